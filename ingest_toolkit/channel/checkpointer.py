"""Taking checkpoints and deleting the log segments they make unnecessary.

Deletion rule: after a checkpoint is durable, a segment is deleted when its id is below

* the checkpoint's log position (replay starts there), and
* every segment an event still points into (queued, in an open take, or spilled by an open put).

Deleting only *below* the oldest needed segment, never a drained segment between needed ones,
keeps a full replay exact: a TAKE frame always lies in a segment at or after its event's PUT
frame, so no take of a surviving put can have been deleted.

With a backup directory, each committed checkpoint is then copied there (:mod:`.backup`), and
the floor is also at most the floor of the newest complete backup: when a copy fails, the
previous backup stays usable, so the segments it needs are kept until a copy succeeds again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..numbers import count
from .backup import BackupState, write_backup
from .checkpoint import CHECKPOINT_META, Snapshot, write_checkpoint
from .format import pointer_log_id
from .fs import FileSystem, write_atomic
from .proto import channel_pb2 as pb
from .segment import meta_path

__all__ = ["CheckpointResult", "Checkpointer", "deletable_logs", "deletion_floor", "lowest_pointer", "supported"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    meta: pb.CheckpointMeta
    blocked_seconds: float  # how long the channel lock was held for the snapshot
    seconds: float  # the whole checkpoint, writing, backup copy and deleting included
    deleted_logs: list[int]
    backup_seconds: float = 0.0  # the backup copy (0 without a backup directory)
    backup_error: str | None = None  # why the backup copy failed (the previous backup is kept)


def deletion_floor(log_id: int, refcounts: Mapping[int, int], puts: Iterable[tuple[int, list[int]]]) -> int:
    """The deletion rule (module docstring): segments below the returned id may be deleted.

    ``log_id``: the checkpoint's log position; ``refcounts``: events per segment (queued or in an
    open take); ``puts``: the spilled pointers of open puts, per transaction. A put's first pointer
    is its oldest segment (log ids never decrease within a transaction).
    """
    needed = [log_id, *(lid for lid, n in refcounts.items() if n > 0)]
    needed += [pointer_log_id(ptrs[0]) for _txn, ptrs in puts if ptrs]
    return min(needed)


def deletable_logs(snap: Snapshot, log_ids: list[int], backup_floor: int | None = None) -> list[int]:
    floor = deletion_floor(snap.log_id, snap.refcounts, snap.puts)
    if backup_floor is not None:
        floor = min(floor, backup_floor)  # what the backup needs stays (module docstring)
    return sorted(lid for lid in log_ids if lid < floor)


def lowest_pointer(snap: Snapshot) -> int | None:
    """The smallest pointer a queued, taken or spilled event of the snapshot holds (None: none).
    One pass over the queue in C; read before the queue is released."""
    lowest = [min(part.cast("Q")) for part in snap.queue.parts()]
    lowest += [min(pointers) for _txn, pointers in (*snap.takes, *snap.puts) if pointers]
    return min(lowest, default=None)


def supported(log_ids: list[int], lowest: int | None, checkpoint_id: int) -> list[int]:
    """``log_ids`` (to be deleted) below the segment of ``lowest`` (:func:`lowest_pointer`):
    deletion never rests on the reference counts alone. A segment that an event still points
    into while the counts say it is drained is kept, with an error: the counts are wrong, the
    queue is not."""
    if not log_ids or lowest is None or pointer_log_id(lowest) > max(log_ids):
        return log_ids
    floor = pointer_log_id(lowest)
    log.error("checkpoint %d: the reference counts say segments %s are drained, but an event still points into "
              "log %d; keeping it and every later segment (the counts are wrong: please report it)",
              checkpoint_id, log_ids, floor)
    return [log_id for log_id in log_ids if log_id < floor]


class Checkpointer:
    """Runs checkpoints for one channel: on demand, on a timer, and at close.

    ``snapshot`` copies the state under the channel lock; everything else happens outside it,
    serialised by this object's own lock so two checkpoints never overlap.
    """

    def __init__(self, fs: FileSystem, checkpoint_dir: str, channel_id: bytes,
                 snapshot: Callable[[], tuple[Snapshot, dict[int, str]]],
                 forget_logs: Callable[[list[int]], None], *,
                 sync_through: Callable[[tuple[int, int]], None] = lambda _position: None,
                 backup_dir: str | None = None, backup: BackupState | None = None) -> None:
        self._fs, self._dir, self._channel_id = fs, checkpoint_dir, channel_id
        self._snapshot, self._forget_logs, self._sync_through = snapshot, forget_logs, sync_through
        self.backup_dir = backup_dir
        self.backup = backup or BackupState()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: CheckpointResult | None = None
        self.failures = 0

    def run(self) -> CheckpointResult:
        with self._lock:
            started = time.monotonic()
            snap, paths = self._snapshot()
            blocked = time.monotonic() - started
            try:
                lowest = lowest_pointer(snap)
                self._sync_through((snap.log_id, snap.log_offset))  # never points past durable frames
                snap.log_bytes = _total_size(paths.values())
                meta = write_checkpoint(self._fs, self._dir, self._channel_id, snap,
                                        backup_checkpoint_id=self.backup.checkpoint_id,
                                        backup_dir=self.backup_dir or "")
            finally:
                snap.queue.release()  # also when the write failed before reaching the queue file
            backed_up = time.monotonic()
            error = self._copy_to_backup(meta, snap) if self.backup_dir else None
            backup_seconds = time.monotonic() - backed_up if self.backup_dir else 0.0
            drained = deletable_logs(snap, list(paths), self.backup.floor)
            deleted = self._delete(supported(drained, lowest, snap.checkpoint_id), paths)
            self.last = CheckpointResult(meta, blocked, time.monotonic() - started, deleted,
                                         backup_seconds, error)
            return self.last

    def _copy_to_backup(self, meta: pb.CheckpointMeta, snap: Snapshot) -> str | None:
        """Copy the committed checkpoint to the backup directory; the error text if that failed."""
        assert self.backup_dir is not None
        try:
            data = write_backup(self._fs, self._dir, self.backup_dir, meta)
        except Exception as err:  # the previous backup stays complete, and its segments stay
            self.backup.failures += 1
            self.backup.problem = f"backup copy of checkpoint {meta.checkpoint_id} to {self.backup_dir} failed: {err}"
            log.error("%s; the previous backup (#%d) is kept, and so are the log segments it needs",
                      self.backup.problem, self.backup.checkpoint_id)
            return self.backup.problem
        previous = meta.backup_checkpoint_id
        self.backup.checkpoint_id = meta.backup_checkpoint_id = meta.checkpoint_id
        self.backup.floor = deletion_floor(snap.log_id, snap.refcounts, snap.puts)
        self.backup.problem = None
        try:  # checkpoint.meta now says the backup is of this checkpoint (same bytes as the copy's)
            write_atomic(self._fs, os.path.join(self._dir, CHECKPOINT_META), data)
        except OSError as err:
            log.warning("checkpoint.meta in %s still names backup #%d, not #%d (not updated: %s)", self._dir,
                        previous, meta.checkpoint_id, err)
        return None

    def _delete(self, log_ids: list[int], paths: dict[int, str]) -> list[int]:
        if not log_ids:
            return []
        self._forget_logs(log_ids)  # the channel stops handing out these paths first
        directories = set()
        for log_id in log_ids:
            path = paths[log_id]
            for victim in (path, meta_path(path)):
                if self._fs.exists(victim):
                    self._fs.unlink(victim)
            directories.add(os.path.dirname(path))
        for directory in sorted(directories):
            self._fs.sync_dir(directory)
        log.info("deleted %s: %s", count(len(log_ids), "drained log segment"), log_ids)
        return log_ids

    # -- background ---------------------------------------------------------------------
    def start(self, interval: float) -> None:
        if interval <= 0:
            return
        self._thread = threading.Thread(target=self._loop, args=(interval,), name="channel-checkpoint",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.run()
            except Exception as err:  # the previous checkpoint stays valid; try again next time
                self.failures += 1
                log.error("checkpoint failed (the previous one stays valid): %s", err)


def _total_size(paths: Iterable[str]) -> int:
    total = 0
    for path in paths:
        try:
            total += os.stat(path).st_size
        except FileNotFoundError:
            pass
    return total
