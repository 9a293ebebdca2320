"""A fault-injecting :class:`~ingest_toolkit.channel.fs.FileSystem` for the channel's tests.

:class:`FaultyFileSystem` wraps the real file system: every write goes through to the real files
(so the channel reads back what it wrote), while the layer keeps a model of what would survive a
power loss, in the spirit of LevelDB's ``fault_injection_test``:

* a file's *content* is durable as of its last ``sync()`` (a copy of its bytes is kept then);
* a file's *name* (create, rename, unlink) is durable only after ``sync_dir`` of its directory.

:meth:`FaultyFileSystem.crash` rewrites the real files to that durable state: every tracked file
back to its last-synced bytes (empty if never synced), created names that were never made durable
removed, un-synced renames reverted and un-synced unlinks undone. ``crash(rng)`` is a *torn*
crash instead: each file keeps a random prefix of its unsynced changes and a random prefix of the
pending name changes survives, as on a journaling file system. Directories themselves are
treated as durable once created. Files the channel never touched through this layer (its lock
files, files written before the layer existed) are left alone; a pre-existing file is adopted as
durable, with its current bytes, the first time the layer touches it.

Faults: :meth:`FaultyFileSystem.inject` makes the n-th call of an operation raise ``OSError``
(once or from then on), optionally after a partial ``pwrite``, or makes a ``pread`` come back
short; :meth:`crash_after` cuts the power
right after the n-th completed mutating operation; ``free_bytes_override`` fakes the free space.

After a crash the layer is *dead*: every further call raises ``OSError(EIO)`` and writes nothing,
so the disk stays exactly as the power loss left it while the caller runs into errors and stops
(its own error handling releases its locks); ``close()`` of a file still releases descriptors.
"""

from __future__ import annotations

import errno
import os
import random
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ingest_toolkit.channel.fs import File, FileSystem, OsFileSystem

__all__ = ["MUTATING_OPS", "Fault", "FaultyFile", "FaultyFileSystem", "torn_mix"]

MUTATING_OPS = frozenset({"pwrite", "sync", "truncate", "allocate", "create", "rename", "unlink",
                          "sync_dir"})
"""Operations that change what is (or will be) on disk; :meth:`crash_after` counts these."""

FAULT_OPS = MUTATING_OPS | {"open_write", "open_read", "pread"}


@dataclass(eq=False)
class Fault:
    """Make the ``nth`` matching call of ``op`` (counted from injection) raise ``OSError(error)``.

    ``persistent``: every later matching call fails too. ``partial``: a failing ``pwrite`` first
    writes this many bytes (capped below the full length). ``path_pattern``: only calls on
    paths matching this regular expression (``re.search``) count. ``min_offset``: only
    ``pwrite``/``allocate`` calls at this offset or beyond count (e.g. appends, not headers).
    ``short``: a firing ``pread`` returns only this many bytes (at most) instead of raising: a
    file that ended early, as a file truncated behind the reader's back reads.
    """

    op: str
    nth: int = 1
    error: int = errno.EIO
    persistent: bool = False
    partial: int | None = None
    path_pattern: str | None = None
    min_offset: int = 0
    short: int | None = None
    seen: int = 0
    fired: int = 0

    def matches(self, op: str, path: str, offset: int) -> bool:
        return (op == self.op and offset >= self.min_offset
                and (self.path_pattern is None or re.search(self.path_pattern, path) is not None))

    def trigger(self) -> bool:
        """Count one matching call; True when this call must fail."""
        self.seen += 1
        fires = self.seen == self.nth or (self.persistent and self.seen > self.nth)
        self.fired += fires
        return fires

    @property
    def exhausted(self) -> bool:
        return self.fired > 0 and not self.persistent

    def oserror(self, path: str) -> OSError:
        return OSError(self.error, f"injected: {os.strerror(self.error)}", path)


@dataclass(eq=False)
class _Inode:
    """One file's identity; ``synced`` is its content as of the last sync (None: never synced)."""

    synced: bytes | None = None


@dataclass
class _CrashPlan:
    op: str | None
    remaining: int
    rng: random.Random | None


@dataclass(frozen=True)
class _NameOp:
    """A create, rename or unlink not yet made durable by ``sync_dir``."""

    kind: str
    src: str
    dst: str
    inode: _Inode

    def apply(self, names: dict[str, _Inode]) -> None:
        names.pop(self.src, None)
        if self.kind != "unlink":
            names[self.dst] = self.inode

    def touches(self, directory: str) -> bool:
        return directory in (os.path.dirname(self.src), os.path.dirname(self.dst))


@dataclass
class _State:
    live: dict[str, _Inode] = field(default_factory=dict)  # names as the process sees them
    durable: dict[str, _Inode] = field(default_factory=dict)  # names after a power loss
    pending: list[_NameOp] = field(default_factory=list)  # name changes not durable yet, in order


class FaultyFile:
    """A :class:`File` whose calls are counted, can fail, and feed the durability model."""

    def __init__(self, fs: FaultyFileSystem, real: File, inode: _Inode, path: str) -> None:
        self.path = real.path
        self._fs, self._real, self._inode, self._abspath = fs, real, inode, path
        self.closed = False

    def pwrite(self, data: bytes | memoryview, offset: int) -> None:
        fault = self._fs._check("pwrite", self._abspath, offset)
        if fault is not None:
            if fault.partial:
                self._real.pwrite(memoryview(data)[: min(fault.partial, len(data) - 1)], offset)
            raise fault.oserror(self.path)
        self._real.pwrite(data, offset)
        self._fs._done("pwrite", self._abspath)

    def pread(self, size: int, offset: int) -> bytes:
        fault = self._fs._check("pread", self._abspath)
        if fault is not None:
            if fault.short is None:
                raise fault.oserror(self.path)
            return self._real.pread(min(size, fault.short), offset)
        return self._real.pread(size, offset)

    def sync(self) -> None:
        self._fs._raise_if_faulty("sync", self._abspath)
        if self._fs.real_sync:
            self._real.sync()
        self._inode.synced = self._real.pread(self._real.size(), 0)
        self._fs._done("sync", self._abspath)

    def truncate(self, size: int) -> None:
        self._fs._raise_if_faulty("truncate", self._abspath)
        self._real.truncate(size)
        self._fs._done("truncate", self._abspath)

    def allocate(self, offset: int, length: int) -> None:
        self._fs._raise_if_faulty("allocate", self._abspath, offset)
        self._real.allocate(offset, length)
        self._fs._done("allocate", self._abspath)

    def size(self) -> int:
        self._fs._raise_if_dead()
        return self._real.size()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._fs._open.discard(self)
            self._real.close()


class FaultyFileSystem:
    """See the module docstring. ``real_sync=True`` also issues the real fsyncs (slower)."""

    def __init__(self, real: FileSystem | None = None, *, real_sync: bool = False) -> None:
        self._real: FileSystem = real or OsFileSystem()
        self.real_sync = real_sync
        self._state = _State()
        self._mutex = threading.RLock()  # bookkeeping only: the channel may call from several threads
        self._faults: list[Fault] = []
        self._plan: _CrashPlan | None = None
        self._open: set[FaultyFile] = set()
        self.calls: Counter[str] = Counter()  # calls attempted, per operation
        self.completed: Counter[str] = Counter()  # calls that succeeded, per operation
        self.history: list[tuple[str, str]] = []  # (operation, absolute path) of completed mutating calls
        self.free_bytes_override: int | None = None
        self.dead = False
        self.crashes = 0

    # -- fault control --------------------------------------------------------------------
    def inject(self, op: str, *, nth: int = 1, error: int = errno.EIO, persistent: bool = False,
               partial: int | None = None, path_pattern: str | None = None, min_offset: int = 0,
               short: int | None = None) -> Fault:
        """Fail the ``nth`` next matching call of ``op``; returns the fault (see :class:`Fault`)."""
        if op not in FAULT_OPS:
            raise ValueError(f"cannot inject into {op!r}; choose one of {sorted(FAULT_OPS)}")
        if partial is not None and op != "pwrite":
            raise ValueError("partial applies to pwrite only")
        if short is not None and op != "pread":
            raise ValueError("short applies to pread only")
        fault = Fault(op, nth, error, persistent, partial, path_pattern, min_offset, short)
        self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        self._faults.clear()

    def crash_after(self, nth: int, op: str | None = None, *, rng: random.Random | None = None) -> None:
        """Power loss right after the ``nth`` next completed ``op`` (any mutating op if None).

        That call still returns normally; every later call fails (the layer is dead). With ``rng``
        the crash is torn: see :meth:`crash`.
        """
        if op is not None and op not in MUTATING_OPS:
            raise ValueError(f"{op!r} is not a mutating operation")
        self._plan = _CrashPlan(op, nth, rng)

    def restart(self) -> None:
        """Bring a crashed layer back to life (a new process on the same disk)."""
        self.dead = False
        self._faults.clear()
        self._plan = None

    def open_files(self) -> list[str]:
        """Paths of files opened through this layer and not closed yet."""
        return sorted(f.path for f in self._open)

    # -- power loss -----------------------------------------------------------------------
    def crash(self, rng: random.Random | None = None) -> None:
        """Rewrite the real tree to what survives a power loss now; the layer is dead after.

        Without ``rng`` every unsynced byte and every name change not followed by ``sync_dir``
        is lost. With ``rng`` the crash is torn the way a journaling file system tears: each file
        keeps a random prefix of its unsynced changes (writeback got that far, see
        :func:`torn_mix`), and a random prefix of the pending name changes survives (metadata
        is journaled in order, and may be committed before anyone asks).
        """
        with self._mutex:
            self._crash(rng)

    def _crash(self, rng: random.Random | None) -> None:
        state = self._state
        current = {id(inode): _read(path) for path, inode in state.live.items()}
        names = dict(state.durable)
        if rng is not None:
            for op in state.pending[: rng.randint(0, len(state.pending))]:
                op.apply(names)
        for path in sorted(set(state.live) | set(state.durable) | set(names)):
            inode = names.get(path)
            if inode is None:
                _remove(path)
                continue
            data = inode.synced or b""
            if rng is not None and id(inode) in current:
                data = torn_mix(data, current[id(inode)], rng)
            inode.synced = data
            _write(path, data)
        state.live, state.durable, state.pending = dict(names), names, []
        self.dead = True
        self.crashes += 1

    # -- FileSystem protocol --------------------------------------------------------------
    def create(self, path: str) -> File:
        key = _key(path)
        self._raise_if_faulty("create", key)
        real = self._real.create(path)
        with self._mutex:
            inode = self._state.live[key] = _Inode()
            self._state.pending.append(_NameOp("create", key, key, inode))
        file = self._wrap(real, inode, key)
        self._done("create", key)
        return file

    def open_read(self, path: str) -> File:
        return self._open_existing("open_read", path, self._real.open_read)

    def open_write(self, path: str) -> File:
        return self._open_existing("open_write", path, self._real.open_write)

    def rename(self, src: str, dst: str) -> None:
        ksrc, kdst = _key(src), _key(dst)
        self._adopt(ksrc)
        self._adopt(kdst)
        self._raise_if_faulty("rename", ksrc)
        self._real.rename(src, dst)
        with self._mutex:
            live = self._state.live
            if ksrc in live:
                live[kdst] = live.pop(ksrc)
                self._state.pending.append(_NameOp("rename", ksrc, kdst, live[kdst]))
        self._done("rename", kdst)

    def unlink(self, path: str) -> None:
        key = _key(path)
        self._adopt(key)
        self._raise_if_faulty("unlink", key)
        self._real.unlink(path)
        with self._mutex:
            inode = self._state.live.pop(key, None)
            if inode is not None:
                self._state.pending.append(_NameOp("unlink", key, key, inode))
        self._done("unlink", key)

    def listdir(self, path: str) -> list[str]:
        self._raise_if_dead()
        return self._real.listdir(path)

    def sync_dir(self, path: str) -> None:
        key = _key(path)
        self._raise_if_faulty("sync_dir", key)
        if self.real_sync:
            self._real.sync_dir(path)
        with self._mutex:
            state = self._state
            for name in {p for p in (*state.live, *state.durable) if os.path.dirname(p) == key}:
                if name in state.live:
                    state.durable[name] = state.live[name]
                else:
                    del state.durable[name]
            state.pending = [op for op in state.pending if not op.touches(key)]
        self._done("sync_dir", key)

    def makedirs(self, path: str) -> None:
        self._raise_if_dead()
        self._real.makedirs(path)

    def exists(self, path: str) -> bool:
        self._raise_if_dead()
        return self._real.exists(path)

    def free_bytes(self, path: str) -> int:
        self._raise_if_dead()
        if self.free_bytes_override is not None:
            return self.free_bytes_override
        return self._real.free_bytes(path)

    # -- internals ------------------------------------------------------------------------
    def _open_existing(self, op: str, path: str, opener: Callable[[str], File]) -> File:
        key = _key(path)
        self._adopt(key)
        self._raise_if_faulty(op, key)
        real = opener(path)
        inode = self._state.live.get(key) or _Inode()
        return self._wrap(real, inode, key)

    def _wrap(self, real: File, inode: _Inode, key: str) -> FaultyFile:
        file = FaultyFile(self, real, inode, key)
        self._open.add(file)
        return file

    def _adopt(self, key: str) -> None:
        """Start tracking a file that existed before this layer touched it (as durable)."""
        state = self._state
        if key in state.live or not os.path.isfile(key):
            return
        inode = state.live[key] = _Inode(_read(key))
        state.durable.setdefault(key, inode)

    def _raise_if_dead(self) -> None:
        if self.dead:
            raise OSError(errno.EIO, "injected: power lost, the process is gone")

    def _check(self, op: str, path: str, offset: int = 0) -> Fault | None:
        """Count a call of ``op``; returns the fault it must fail with, if any."""
        with self._mutex:
            self._raise_if_dead()
            self.calls[op] += 1
            firing = [f for f in self._faults if f.matches(op, path, offset) and f.trigger()]
            self._faults = [f for f in self._faults if not f.exhausted]
            return firing[0] if firing else None

    def _raise_if_faulty(self, op: str, path: str, offset: int = 0) -> None:
        fault = self._check(op, path, offset)
        if fault is not None:
            raise fault.oserror(path)

    def _done(self, op: str, path: str) -> None:
        """Record a completed call; cuts the power if the crash plan says so."""
        with self._mutex:
            self.completed[op] += 1
            self.history.append((op, path))
            plan = self._plan
            if plan is None or (plan.op is not None and plan.op != op):
                return
            plan.remaining -= 1
            if plan.remaining <= 0:
                self._plan = None
                self.crash(plan.rng)


SECTOR = 512  # a disk writes a sector whole or not at all: writes tear at sector boundaries


def torn_mix(old: bytes, new: bytes, rng: random.Random) -> bytes:
    """``new`` written back up to a random sector boundary after the first change (or its end), ``old``
    after it: what a power loss leaves of writes that were not synced."""
    if old == new:
        return old
    first = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    boundaries = [*range(first - first % SECTOR, len(new), SECTOR), len(new)]
    cut = rng.choice(boundaries)
    return new[:cut] + old[cut:]


def _key(path: str) -> str:
    return os.path.abspath(path)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:  # in place: descriptors still open elsewhere see the change
        f.write(data)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
