"""Fault injection: power loss, ENOSPC, EIO and failed renames against the file channel.

Every test drives a :class:`FileChannel` over :class:`~tests.channel.faultfs.FaultyFileSystem`
and then reopens the directories with a plain ``FileChannel`` (the real file system), comparing
what recovery rebuilt with a reference model: committed puts minus committed takes, FIFO.

The random workloads mix put and take transactions (batches, rollbacks, spilled puts, segment
rolls at 64 KiB, explicit checkpoints that delete drained segments) and cut the power after a
random file operation. The background checkpoint thread is off so that the same seed always
performs the same operations: a clean run counts them, and the crash point is drawn from that.
"""

from __future__ import annotations

import errno
import random
import re
import shutil
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel, Transaction, TxnState
from ingest_toolkit.errors import ChannelFailedError, DiskSpaceError, IngestError, TransientError
from tests.channel.faultfs import MUTATING_OPS, FaultyFileSystem
from tests.soak import soak

KiB, MiB = 1 << 10, 1 << 20
SPILL = 4096  # the smallest spill_bytes the config allows


# -- helpers ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    """What the model remembers of one event."""

    body: bytes
    headers: tuple[tuple[str, str], ...]
    seq: int


def item_of(event: Event) -> Item:
    return Item(event.body, tuple(sorted(event.headers.items())), event.seq)


def settings(root: Path, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "checkpoint_dir": str(root / "checkpoint"),
        "data_dirs": [str(root / "data1"), str(root / "data2")],
        "capacity": 5000, "transaction_capacity": 5000,
        "max_file_size": 64 * KiB, "max_event_size": 12 * KiB,
        "durability": "fsync", "min_free_bytes": 0, "preallocate_bytes": 16 * KiB,
        "spill_bytes": SPILL, "keep_alive": 0.0,
        "checkpoint_interval": 0.0,  # no background thread: I/O happens only where tests cause it
    }
    values.update(overrides)
    return values


def put_committed(ch: FileChannel, bodies: Sequence[bytes]) -> list[Item]:
    """Put ``bodies`` in one committed transaction; returns the model items."""
    events = [Event(body, {"n": str(i)}) for i, body in enumerate(bodies)]
    with ch.transaction() as tx:
        return items_of(events, tx.put_many(events))


def items_of(events: Sequence[Event], seqs: Sequence[int]) -> list[Item]:
    return [Item(e.body, tuple(sorted(e.headers.items())), s) for e, s in zip(events, seqs, strict=True)]


def bodies(prefix: str, n: int, size: int = 100) -> list[bytes]:
    return [f"{prefix}{i:04d}".encode().ljust(size, b".") for i in range(n)]


def drain(ch: FileChannel) -> list[Item]:
    """Every queued event, oldest first, without removing them."""
    with ch.transaction() as tx:
        events = tx.take(len(ch))
        tx.rollback()
    return [item_of(e) for e in events]


def recovered(root: Path, **overrides: Any) -> list[Item]:
    """Reopen with the real file system; returns the queue and checks the channel still works."""
    cfg = settings(root, **overrides)
    with FileChannel(**cfg) as ch:
        queue = drain(ch)
        put_committed(ch, [b"after-recovery"])
    with FileChannel(**cfg) as ch:
        assert len(ch) == len(queue) + 1, "a commit after recovery did not survive a clean restart"
    return queue


def in_other_thread(fn: Callable[[], Transaction]) -> Transaction:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def assert_failed(ch: FileChannel, open_tx: Transaction) -> None:
    """Every operation of a failed channel raises ChannelFailedError, including open txns'."""
    for attempt in (ch.transaction, lambda: open_tx.put(Event(b"x")), open_tx.commit,
                    lambda: in_other_thread(ch.transaction)):
        with pytest.raises(ChannelFailedError, match="Close it and open it again"):
            attempt()


def fill_until_error(ch: FileChannel, limit: int = 100) -> tuple[list[Item], IngestError]:
    """Commit 3 KiB events one per transaction until a commit fails; returns (committed, error)."""
    committed: list[Item] = []
    for i in range(limit):
        try:
            committed += put_committed(ch, bodies(f"fill{i}-", 1, 3 * KiB))
        except IngestError as err:
            return committed, err
    raise AssertionError(f"no commit failed in {limit} attempts: the fault never fired")


# -- random workloads and power loss --------------------------------------------------------
@dataclass
class Model:
    """Reference queue plus the state after every returned commit (history[0]: empty)."""

    queue: deque[Item] = field(default_factory=deque)
    history: list[tuple[Item, ...]] = field(default_factory=lambda: [()])
    log_syncs_at: list[int] = field(default_factory=lambda: [0])
    inflight: tuple[Item, ...] | None = None  # the state if the commit in progress takes effect
    next_id: int = 0

    def committing(self, state: Sequence[Item]) -> None:
        self.inflight = tuple(state)

    def committed(self, log_syncs: int) -> None:
        assert self.inflight is not None
        self.queue = deque(self.inflight)
        self.history.append(self.inflight)
        self.log_syncs_at.append(log_syncs)
        self.inflight = None


@dataclass(frozen=True)
class Workload:
    """A seeded random mix of put/take transactions; ``disk_full`` adds ENOSPC episodes."""

    seed: int
    durability: str
    steps: int = 60
    disk_full: bool = False

    def settings(self, root: Path) -> dict[str, Any]:
        preallocate = random.Random(self.seed).choice([0, 4 * KiB, 16 * KiB])
        return settings(root, durability=self.durability, preallocate_bytes=preallocate)

    def run(self, ch: FileChannel, fs: FaultyFileSystem, model: Model) -> None:
        rng = random.Random(self.seed)
        for _ in range(self.steps):
            if self.disk_full and rng.random() < 0.15:
                inject_disk_full(fs, rng)
            step = put_step if rng.random() < 0.55 or not model.queue else take_step
            checkpoint = rng.random() < 0.08
            try:
                step(ch, fs, rng, model)
                if checkpoint:
                    ch.checkpoint()  # deletes drained segments: their unlinks meet the power loss too
            except DiskSpaceError:
                model.inflight = None  # the commit was rolled back: the model stays as it was


_LOG_FILE = r"log-\d+$"


def log_syncs(fs: FaultyFileSystem) -> int:
    """Completed syncs of segment files (not .meta / temporary files)."""
    return sum(1 for op, path in fs.history if op == "sync" and re.search(_LOG_FILE, path))


def inject_disk_full(fs: FaultyFileSystem, rng: random.Random) -> None:
    """ENOSPC on one of the next writes or allocations of a segment (appends or its creation)."""
    op = rng.choice(["pwrite", "pwrite", "allocate"])
    partial = rng.choice([None, 1, 30, 700]) if op == "pwrite" else None
    fs.inject(op, nth=rng.randint(1, 3), error=errno.ENOSPC, partial=partial, path_pattern=_LOG_FILE)


def random_event(rng: random.Random, model: Model) -> Event:
    model.next_id += 1
    size = rng.choices([rng.randint(0, 300), rng.randint(300, 3000), rng.randint(SPILL, 9000)],
                       weights=[6, 3, 1])[0]
    headers = {"id": str(model.next_id)} if rng.random() < 0.5 else {}
    return Event(f"{model.next_id:06d}:".encode() + rng.randbytes(size), headers)


def put_step(ch: FileChannel, fs: FaultyFileSystem, rng: random.Random, model: Model) -> None:
    events = [random_event(rng, model) for _ in range(rng.randint(1, 6))]
    cut, rollback = rng.randint(0, len(events)), rng.random() < 0.2  # drawn before any I/O
    with ch.transaction() as tx:
        seqs = tx.put_many(events[:cut]) + [tx.put(e) for e in events[cut:]]
        if rollback:
            tx.rollback()
            return
        model.committing((*model.queue, *items_of(events, seqs)))
        tx.commit()
    model.committed(log_syncs(fs))


def take_step(ch: FileChannel, fs: FaultyFileSystem, rng: random.Random, model: Model) -> None:
    wanted, rollback = rng.randint(1, 8), rng.random() < 0.2
    with ch.transaction() as tx:
        got = [item_of(e) for e in tx.take(wanted)]
        assert got == list(model.queue)[:wanted], "take did not return the head of the queue"
        if rollback:
            tx.rollback()
            return
        model.committing(tuple(model.queue)[len(got):])
        tx.commit()
    model.committed(log_syncs(fs))


def clean_run(root: Path, work: Workload) -> int:
    """Run the workload to a clean close; checks recovery and returns the mutating op count."""
    fs, model = FaultyFileSystem(), Model()
    with FileChannel(fs=fs, **work.settings(root)) as ch:
        work.run(ch, fs, model)
        assert drain(ch) == list(model.queue)
    assert fs.open_files() == [], "close() left descriptors open"
    assert recovered(root) == list(model.queue)
    return sum(fs.completed[op] for op in MUTATING_OPS)


def run_until_power_loss(fs: FaultyFileSystem, cfg: dict[str, Any],
                         work: Callable[[FileChannel], None]) -> None:
    """Open, ``work``, close; the planned power loss must strike somewhere in there.

    After it every file operation fails with EIO, so ``work`` stops at the first error, and
    ``close()`` writes nothing more: it only drops the locks the "dead process" held.
    """
    ch: FileChannel | None = None
    try:
        ch = FileChannel(fs=fs, **cfg)
        work(ch)
    except (IngestError, OSError):
        if not fs.dead:
            raise
    finally:
        if ch is not None:
            ch.close()
    assert fs.crashes == 1, "the planned power loss did not happen"


def acceptable_states(model: Model, fs: FaultyFileSystem, durability: str) -> list[tuple[Item, ...]]:
    """fsync: the last returned commit (or the one in flight). page_cache: any prefix from the
    newest state a later segment sync covered (a seal syncs every earlier commit)."""
    if durability == "fsync":
        floor = len(model.history) - 1
    else:
        synced = log_syncs(fs)
        floor = max(i for i, n in enumerate(model.log_syncs_at) if n < synced or i == 0)
    states = model.history[floor:]
    return states + [model.inflight] if model.inflight is not None else states


@dataclass
class Trial:
    """A workload cut by a power loss: the queues recovery may rebuild, and how it was cut."""

    states: list[tuple[Item, ...]]
    description: str

    def check(self, got: Sequence[Item]) -> None:
        assert tuple(got) in self.states, (
            f"{self.description}: recovered {len(got)} events, acceptable queue lengths "
            f"{[len(s) for s in self.states]}")


def crash_workload(root: Path, work: Workload, *, torn: bool) -> Trial:
    """Run ``work`` in ``root/crashed`` until a power loss at a random mutating operation."""
    total = clean_run(root / "clean", work)
    crash_at = random.Random(work.seed * 7919 + torn).randint(1, total)
    fs, model = FaultyFileSystem(), Model()
    fs.crash_after(crash_at, rng=random.Random(work.seed) if torn else None)
    run_until_power_loss(fs, work.settings(root / "crashed"), lambda ch: work.run(ch, fs, model))
    return Trial(acceptable_states(model, fs, work.durability),
                 f"{work}, torn={torn}: power lost after mutating op {crash_at} of {total}, "
                 f"{len(model.history) - 1} commits returned")


def power_loss_trial(root: Path, work: Workload, *, torn: bool) -> None:
    crash_workload(root, work, torn=torn).check(recovered(root / "crashed"))


@pytest.mark.parametrize("torn", [False, True], ids=["clean-cut", "torn"])
@pytest.mark.parametrize("durability", ["fsync", "page_cache"])
@pytest.mark.parametrize("seed", range(6))
def test_power_loss_during_random_workload(tmp_path: Path, seed: int, durability: str, torn: bool) -> None:
    power_loss_trial(tmp_path, Workload(seed, durability), torn=torn)


@pytest.mark.parametrize("durability", ["fsync", "page_cache"])
@pytest.mark.parametrize("seed", range(6))
def test_power_loss_after_disk_full_episodes(tmp_path: Path, seed: int, durability: str) -> None:
    """ENOSPC (often after a partial write) leaves junk past the log's end that later commits
    overwrite only in part; a power loss then must still recover exactly the commits."""
    power_loss_trial(tmp_path, Workload(seed, durability, disk_full=True), torn=seed % 2 == 1)


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["fsync", "page_cache"])
def test_power_loss_many_seeds(tmp_path: Path, durability: str) -> None:
    for seed in range(100, 100 + soak(75)):
        work = Workload(seed, durability, steps=120, disk_full=seed % 3 == 0)
        power_loss_trial(tmp_path / str(seed), work, torn=seed % 2 == 1)


def ops_to_reopen(root: Path) -> int:
    """Mutating operations a recovery of ``root`` performs (measured on a copy, which it recovers)."""
    fs = FaultyFileSystem()
    with FileChannel(fs=fs, **settings(root)):
        pass
    return sum(fs.completed[op] for op in MUTATING_OPS)


@pytest.mark.parametrize("seed", range(8))
def test_power_loss_during_recovery_changes_nothing(tmp_path: Path, seed: int) -> None:
    """A second power loss while recovery cuts, seals and starts segments: same outcome."""
    torn = seed % 4 >= 2
    trial = crash_workload(tmp_path, Workload(seed, ("fsync", "page_cache")[seed % 2]), torn=torn)
    crashed, copy = tmp_path / "crashed", tmp_path / "copy"
    shutil.copytree(crashed, copy)
    ops = ops_to_reopen(copy)
    expected = recovered(copy)
    trial.check(expected)
    fs = FaultyFileSystem()
    fs.crash_after(random.Random(seed).randint(1, ops), rng=random.Random(seed) if torn else None)
    run_until_power_loss(fs, settings(crashed), lambda ch: None)
    assert recovered(crashed) == expected


# -- a crash inside a commit ----------------------------------------------------------------
def _start_commit(ch: FileChannel, kind: str) -> None:
    with ch.transaction() as tx:
        if kind == "put":
            tx.put_many([Event(b) for b in bodies("new", 2)])
        elif kind == "spill":
            tx.put(Event(b"s" * (SPILL + 100)))  # spills: its PUT frame is written before commit
        else:
            tx.take(2)


@pytest.mark.parametrize("kind", ["put", "take", "spill"])
def test_crash_after_write_before_sync_shows_nothing_uncommitted(tmp_path: Path, kind: str) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    committed = put_committed(ch, bodies("old", 5))
    syncs = fs.completed["sync"]
    fs.crash_after(1, "pwrite")
    with pytest.raises(ChannelFailedError):  # the power is gone: its sync fails
        _start_commit(ch, kind)
    assert fs.completed["sync"] == syncs, "the crash must come before the commit's sync"
    ch.close()
    assert recovered(tmp_path) == committed


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kind", ["put", "take"])
def test_torn_crash_inside_commit_is_all_or_nothing(tmp_path: Path, kind: str, seed: int) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    committed = put_committed(ch, bodies("old", 5))
    fs.crash_after(1, "pwrite", rng=random.Random(seed))  # a random prefix of the write survives
    with pytest.raises(ChannelFailedError):  # the power is gone: its sync fails
        _start_commit(ch, kind)
    ch.close()
    got = recovered(tmp_path)
    if kind == "take":
        assert got in (committed, committed[2:])
    else:
        assert got == committed or (got[:5] == committed and [i.body for i in got[5:]] == bodies("new", 2))


# -- ENOSPC -----------------------------------------------------------------------------------
def _finish(fs: FaultyFileSystem, ch: FileChannel, ending: str) -> None:
    if ending == "crash":
        fs.crash()
    ch.close()


@pytest.mark.parametrize("ending", ["close", "crash"])
@pytest.mark.parametrize("partial", [None, 1, 60, 150])
def test_enospc_on_put_commit_rolls_back_and_channel_stays_usable(
        tmp_path: Path, partial: int | None, ending: str) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    committed = put_committed(ch, bodies("old", 3))
    fault = fs.inject("pwrite", error=errno.ENOSPC, partial=partial)
    tx = ch.transaction()
    tx.put_many([Event(b) for b in bodies("lost", 2)])
    with pytest.raises(DiskSpaceError) as info:
        tx.commit()
    assert isinstance(info.value, TransientError) and fault.fired == 1
    assert tx.state is TxnState.ROLLED_BACK
    assert ch.stats()["used"] == len(ch) == 3, "the put reservation was not released"
    committed += put_committed(ch, bodies("later", 2))  # the fault cleared: commits work again
    assert drain(ch) == committed
    _finish(fs, ch, ending)
    assert recovered(tmp_path) == committed


@pytest.mark.parametrize("ending", ["close", "crash"])
@pytest.mark.parametrize("partial", [None, 30])
def test_enospc_on_take_commit_returns_events_to_the_head(
        tmp_path: Path, partial: int | None, ending: str) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    committed = put_committed(ch, bodies("old", 5))
    fs.inject("pwrite", error=errno.ENOSPC, partial=partial)
    tx = ch.transaction()
    assert [item_of(e) for e in tx.take(3)] == committed[:3]
    with pytest.raises(DiskSpaceError):
        tx.commit()
    assert tx.state is TxnState.ROLLED_BACK
    assert drain(ch) == committed, "taken events must return to the head, in order"
    with ch.transaction() as tx:
        assert [item_of(e) for e in tx.take(2)] == committed[:2]
    _finish(fs, ch, ending)
    assert recovered(tmp_path) == committed[2:]


def test_enospc_while_spilling_fails_the_put_and_rolls_back(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    committed = put_committed(ch, bodies("old", 2))
    fs.inject("pwrite", error=errno.ENOSPC, partial=SPILL // 2)
    with pytest.raises(DiskSpaceError), ch.transaction() as tx:
        tx.put(Event(b"b" * (SPILL + 100)))
    assert tx.state is TxnState.ROLLED_BACK
    assert ch.stats()["used"] == len(ch) == 2
    committed += put_committed(ch, [b"small"])
    fs.crash()
    ch.close()
    assert recovered(tmp_path) == committed


def test_enospc_on_allocate_while_appending(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path, preallocate_bytes=4 * KiB))
    committed = put_committed(ch, bodies("old", 1, 3000))  # fits the first 4 KiB
    allocations = fs.completed["allocate"]
    fs.inject("allocate", error=errno.ENOSPC)
    with pytest.raises(DiskSpaceError):
        put_committed(ch, bodies("lost", 1, 3000))  # needs the file grown
    assert fs.completed["allocate"] == allocations
    committed += put_committed(ch, bodies("later", 1, 3000))
    assert fs.completed["allocate"] == allocations + 1
    fs.crash()
    ch.close()
    assert recovered(tmp_path) == committed


def test_enospc_while_creating_the_next_segment_is_retryable(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path, data_dirs=[str(tmp_path / "data")]))
    fs.inject("allocate", error=errno.ENOSPC, path_pattern=r"log-2$")
    committed, err = fill_until_error(ch)
    assert isinstance(err, DiskSpaceError)
    committed += put_committed(ch, bodies("later", 1, 3000))  # space is back: the roll succeeds
    ch.close()
    assert recovered(tmp_path, data_dirs=[str(tmp_path / "data")]) == committed


@pytest.mark.parametrize("op", ["create", "pwrite", "allocate", "sync", "sync_dir"])
def test_eio_while_creating_the_next_segment_fails_the_channel(tmp_path: Path, op: str) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    fs.inject(op, error=errno.EIO, path_pattern=r"data1$" if op == "sync_dir" else r"log-2$")
    committed, err = fill_until_error(ch)
    assert isinstance(err, ChannelFailedError)
    ch.close()
    assert recovered(tmp_path) == committed


def test_below_min_free_bytes_the_channel_can_still_be_drained(tmp_path: Path) -> None:
    """Take commits are exempt from min_free_bytes: they are tiny and they are what frees space."""
    fs = FaultyFileSystem()
    fs.free_bytes_override = 100 * MiB
    ch = FileChannel(fs=fs, **settings(tmp_path, min_free_bytes=10 * MiB, max_file_size=64 * KiB))
    committed = put_committed(ch, bodies("old", 600))  # spans several segments
    fs.free_bytes_override = 10 * MiB - 1
    with pytest.raises(DiskSpaceError):
        put_committed(ch, [b"refused"])
    taken: list[Item] = []
    while len(ch):
        with ch.transaction() as tx:
            taken += [item_of(e) for e in tx.take(50)]
    assert taken == committed
    assert ch.checkpoint().deleted_logs, "drained segments must be deleted to free the space"
    ch.close()
    assert recovered(tmp_path) == []


def test_min_free_bytes_refuses_a_commit_before_writing(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    fs.free_bytes_override = 100 * MiB
    ch = FileChannel(fs=fs, **settings(tmp_path, min_free_bytes=10 * MiB))
    committed = put_committed(ch, bodies("old", 3))
    fs.free_bytes_override = 10 * MiB - 1
    writes = {op: fs.calls[op] for op in MUTATING_OPS}
    tx = ch.transaction()
    tx.put(Event(b"refused"))
    with pytest.raises(DiskSpaceError) as info:
        tx.commit()
    assert {op: fs.calls[op] for op in MUTATING_OPS} == writes, "something was written"
    message = str(info.value)
    assert "min_free_bytes" in message and "nothing was written" in message
    assert "Free space" in message and "retry" in message
    assert info.value.min_free_bytes == 10 * MiB and info.value.free_bytes == 10 * MiB - 1
    assert tx.state is TxnState.ROLLED_BACK and ch.stats()["used"] == 3
    fs.free_bytes_override = 100 * MiB
    committed += put_committed(ch, [b"accepted"])
    ch.close()
    assert recovered(tmp_path) == committed


# -- EIO --------------------------------------------------------------------------------------
@pytest.mark.parametrize("crash", [False, True], ids=["reopen", "power-loss"])
@pytest.mark.parametrize("kind", ["put", "take"])
def test_fsync_eio_fails_the_channel_until_reopened(tmp_path: Path, kind: str, crash: bool) -> None:
    """The in-doubt commit: its bytes reached the page cache but the fsync failed. Without a power
    loss recovery finds and applies it; after a power loss it is gone. Both are allowed."""
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    committed = put_committed(ch, bodies("old", 5))
    open_tx = in_other_thread(ch.transaction)
    fs.inject("sync", error=errno.EIO)
    tx = ch.transaction()
    if kind == "put":
        events = [Event(b) for b in bodies("new", 2)]
        in_doubt = committed + items_of(events, tx.put_many(events))
    else:
        tx.take(2)
        in_doubt = committed[2:]
    with pytest.raises(ChannelFailedError) as info:
        tx.commit()
    assert isinstance(info.value.cause, OSError) and info.value.cause.errno == errno.EIO
    assert tx.state is TxnState.UNKNOWN
    assert_failed(ch, open_tx)
    _finish(fs, ch, "crash" if crash else "close")
    assert recovered(tmp_path) == (committed if crash else in_doubt)


@pytest.mark.parametrize("crash", [False, True], ids=["reopen", "power-loss"])
@pytest.mark.parametrize("partial", [None, 50])
def test_write_eio_fails_the_channel_and_reopen_recovers(
        tmp_path: Path, partial: int | None, crash: bool) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    committed = put_committed(ch, bodies("old", 4))
    open_tx = in_other_thread(ch.transaction)
    fs.inject("pwrite", error=errno.EIO, partial=partial)
    with pytest.raises(ChannelFailedError):
        put_committed(ch, bodies("lost", 2))
    assert_failed(ch, open_tx)
    _finish(fs, ch, "crash" if crash else "close")
    assert recovered(tmp_path) == committed


# -- failures while sealing a segment ----------------------------------------------------------
@pytest.mark.parametrize("crash", [False, True], ids=["reopen", "power-loss"])
@pytest.mark.parametrize("error", [errno.EIO, errno.ENOSPC])
@pytest.mark.parametrize("op", ["rename", "sync_dir"])
def test_seal_failure_during_roll_is_reported_and_recovered(
        tmp_path: Path, op: str, error: int, crash: bool) -> None:
    """Sealing writes log-N.meta with write_atomic (tmp, sync, rename, sync_dir). Today any
    failure there stops the channel (ChannelFailedError), ENOSPC included."""
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    open_tx = in_other_thread(ch.transaction)
    fault = fs.inject(op, error=error)  # the next rename / sync_dir is the seal's
    committed, err = fill_until_error(ch)
    assert fault.fired == 1 and fs.completed["truncate"] >= 1, "the fault did not hit a seal"
    assert isinstance(err, ChannelFailedError)
    assert isinstance(err.cause, OSError) and err.cause.errno == error
    assert_failed(ch, open_tx)
    _finish(fs, ch, "crash" if crash else "close")
    assert recovered(tmp_path) == committed
    with FileChannel(**settings(tmp_path)) as ch2:  # recovery leaves a channel that can roll again
        fill = [put_committed(ch2, bodies(f"roll{i}-", 1, 3 * KiB)) for i in range(30)]
    assert recovered(tmp_path)[-30:] == [items[0] for items in fill]


# -- rollback when its ROLLBACK frame cannot be written -----------------------------------------
@pytest.mark.parametrize("crash", [False, True], ids=["reopen", "power-loss"])
@pytest.mark.parametrize(("error", "partial"), [(errno.EIO, None), (errno.EIO, 10),
                                                (errno.ENOSPC, None), (errno.ENOSPC, 10)])
def test_rollback_loses_nothing_when_its_frame_fails(
        tmp_path: Path, error: int, partial: int | None, crash: bool) -> None:
    """ENOSPC: the rollback succeeds and the channel goes on. EIO: the rollback itself does not
    raise, but the write error stops the channel (the next call raises ChannelFailedError)."""
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    committed = put_committed(ch, bodies("old", 3))
    tx = ch.transaction()
    writes = fs.completed["pwrite"]
    tx.put(Event(b"s" * (SPILL + 100)))
    assert fs.completed["pwrite"] == writes + 1, "the put did not spill"
    fs.inject("pwrite", error=error, partial=partial)
    tx.rollback()
    assert tx.state is TxnState.ROLLED_BACK and fs.calls["pwrite"] == writes + 2
    if error == errno.ENOSPC:
        committed += put_committed(ch, bodies("after", 2))
        assert drain(ch) == committed
    else:
        with pytest.raises(ChannelFailedError):
            ch.transaction()
    _finish(fs, ch, "crash" if crash else "close")
    assert recovered(tmp_path) == committed


# -- descriptors --------------------------------------------------------------------------------
def test_close_after_failure_releases_every_descriptor(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    fs.inject("sync", error=errno.EIO)
    with pytest.raises(ChannelFailedError):
        put_committed(ch, [b"x"])
    ch.close()
    assert fs.open_files() == []


# -- read errors ---------------------------------------------------------------------------------
def test_read_eio_during_take_raises_an_ingest_error_and_keeps_the_events(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    committed = put_committed(ch, bodies("old", 3))
    fs.inject("pread", error=errno.EIO)
    try:
        with pytest.raises(IngestError), ch.transaction() as tx:
            tx.take(2)
    finally:
        assert drain(ch) == committed, "events whose read failed must stay at the head"
        ch.close()


# -- read errors while opening: checkpoint, segment headers and .meta go through the FileSystem --
def _checkpointed(root: Path) -> list[Item]:
    """A channel with a checkpoint, sealed segments (each with .meta) and events after the
    checkpoint, closed without a final checkpoint; returns the queue."""
    cfg = settings(root, checkpoint_on_close=False)
    with FileChannel(**cfg) as ch:
        committed = put_committed(ch, bodies("a", 400, 300))  # about two segments
        ch.checkpoint()
        committed += put_committed(ch, bodies("b", 5))
    return committed


@pytest.mark.parametrize("target", [r"checkpoint\.meta$", r"checkpoint-\d+\.queue$", r"channel\.id$",
                                    r"log-\d+$", r"log-\d+\.meta$"])
def test_eio_reading_at_open_fails_the_open_and_changes_nothing(tmp_path: Path, target: str) -> None:
    """Every file the open reads is read through the FileSystem: an EIO on any of them stops the
    open with an error naming the file, and a later open (the disk healthy again) loses nothing."""
    committed = _checkpointed(tmp_path)
    fs = FaultyFileSystem()
    fault = fs.inject("pread", error=errno.EIO, path_pattern=target)
    with pytest.raises(OSError) as info:
        FileChannel(fs=fs, **settings(tmp_path))
    assert fault.fired == 1, f"the open read no file matching {target} through the FileSystem"
    assert re.search(target, str(info.value.filename)), info.value
    assert recovered(tmp_path) == committed


@pytest.mark.parametrize("target", [r"checkpoint\.meta$", r"checkpoint-\d+\.queue$", r"checkpoint-\d+\.inflight$"])
@pytest.mark.parametrize("short", [0, 7, -1], ids=["empty", "7-bytes", "all-but-one"])
def test_short_read_of_a_checkpoint_file_falls_back_to_a_full_replay(
        tmp_path: Path, target: str, short: int) -> None:
    """A checkpoint file that reads back shorter than written is refused (length and checksum),
    never half-used: the open rebuilds the state from the logs and names the file."""
    committed = _checkpointed(tmp_path)
    size = next(p.stat().st_size for p in (tmp_path / "checkpoint").iterdir() if re.search(target, p.name))
    fs = FaultyFileSystem()
    fault = fs.inject("pread", short=size - 1 if short < 0 else short, path_pattern=target)
    with FileChannel(fs=fs, **settings(tmp_path)) as ch:
        assert fault.fired == 1
        assert ch.checkpoint_problem is not None and re.search(target.rstrip("$"), ch.checkpoint_problem)
        assert drain(ch) == committed


def test_short_read_of_a_segment_header_at_open_is_not_taken_for_a_lost_header(tmp_path: Path) -> None:
    """A segment header that reads back short during the survey of headers: the open refuses or
    recovers exactly, never drops the segment as an interrupted creation."""
    committed = _checkpointed(tmp_path)
    fs = FaultyFileSystem()
    fault = fs.inject("pread", short=10, path_pattern=r"log-1$")
    try:
        with FileChannel(fs=fs, **settings(tmp_path)) as ch:
            assert drain(ch) == committed
    except IngestError as err:
        assert "log-1" in str(err), err
    assert fault.fired == 1, "the open did not read the header through the FileSystem"
    assert recovered(tmp_path) == committed
