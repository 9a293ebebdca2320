"""The write side of a channel's log: appending frames, rolling segments, the space checks, and
group commit.

State and its guards (all under the channel's lock, the ``cond`` given to :class:`LogWriter`):

* ``segment`` - the one segment being appended to (frames are ordered by (log id, offset)).
* group commit: ``_write_gen`` counts appends, ``_synced_gen`` the appends known durable, and
  ``_pending`` holds commits waiting for a sync, in append order. One thread at a time
  (``_syncing``) syncs the log outside the lock; it publishes every pending commit its sync
  covered, so concurrent commits share one fdatasync and become visible in commit order.
* ``failed`` - the first write or sync error; nothing more is written once it is set.
* ``published_at`` - ``(log id, offset)`` up to which every COMMIT frame is published and none
  after it is, while commits wait for a sync: the end the last sync covered. ``durable_at`` -
  the end the last sync (or seal) covered. A checkpoint snapshots the published state at
  :meth:`LogWriter.checkpoint_position` and makes it durable with :meth:`LogWriter.sync_through`,
  which syncs outside the lock: a checkpoint never holds the lock across an fdatasync.

Publishing a commit (making it visible in the queue) is the channel's: the writer calls its
``publish`` callback for each transaction a sync covered, in commit order. The configuration and
the file system are the channel's too, read at each use (``config()``, ``fs()``): whoever
replaces them on a live channel changes what the writer does.
"""

from __future__ import annotations

import errno
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable

from ..errors import ChannelFailedError, DiskSpaceError
from . import format as fmt
from .config import ChannelConfig
from .crypto import Placement, Sealer
from .fs import FileSystem
from .segment import SegmentWriter
from .transaction import Transaction, TxnState
from .txnframes import fit_frames, put_seq_range

__all__ = ["LogWriter"]

log = logging.getLogger(__name__)


class LogWriter:
    """Appends frames at the log's end and makes commits durable; every method but the
    constructor is called with ``cond`` held (``wait_durable`` releases it while it syncs)."""

    def __init__(self, fs: Callable[[], FileSystem], config: Callable[[], ChannelConfig], channel_id: bytes,
                 next_log_id: int, paths: dict[int, str], cond: threading.Condition, *,
                 check_usable: Callable[[], None], publish: Callable[[Transaction], None],
                 queued: Callable[[], int | None], sealer: Sealer | None = None) -> None:
        self._fs, self._config, self._channel_id = fs, config, channel_id
        self._sealer = sealer  # encrypting: seals runs as they are appended; its fields go in every header
        self._next_log_id = next_log_id
        self._paths = paths  # the channel's log id -> path map; new segments are added to it
        self._cond = cond
        self._check_usable, self._publish_one, self._queued = check_usable, publish, queued
        self._write_gen = self._synced_gen = 0
        self._syncing = False
        self._retired: list[SegmentWriter] = []  # sealed while a sync used them; closed after it
        self._pending: deque[tuple[int, Transaction]] = deque()
        self.failed: BaseException | None = None
        self.fsyncs = 0
        self.segment = self._new_segment()
        self.published_at = self.durable_at = (self.segment.log_id, self.segment.position)

    def _new_segment(self, *, draining: bool = False) -> SegmentWriter:
        config = self._config()
        log_id = self._next_log_id
        directory = config.data_dirs[log_id % len(config.data_dirs)]
        preallocate = min(config.preallocate_bytes, config.max_file_size - fmt.SEGMENT_HEADER_SIZE)
        if not draining:
            self._check_space(directory, preallocate + fmt.SEGMENT_HEADER_SIZE)
        try:
            writer = SegmentWriter.create(self._fs(), directory, log_id, self._channel_id, preallocate,
                                          config.max_file_size, self._sealer.segment_key if self._sealer else None)
        except OSError as err:
            if err.errno == errno.ENOSPC:
                raise self._disk_full(directory, preallocate) from err
            raise
        self._next_log_id += 1
        self._paths[log_id] = writer.path
        return writer

    # -- appending ------------------------------------------------------------------------
    def append(self, frames: list[bytes], *, draining: bool = False, runs: list[Placement] | None = None) -> list[int]:
        """Write frames at the log's end, rolling segments as needed; returns their pointers.

        ``draining`` writes (take commits, rollback frames) skip the ``min_free_bytes`` check:
        they are small and are what frees space, so a nearly full disk can always be drained. A
        real ENOSPC still fails them with DiskSpaceError. ``runs``: the first ``len(runs)``
        frames are RUN frames (sealed runs), ``runs[k]`` where frame k's PUT frames are in it;
        their pointers are those of the PUT frames.
        """
        pointers: list[int] = []
        i = 0
        while i < len(frames):
            writer = self.segment
            room = self._config().max_file_size - writer.position
            j, size = fit_frames(frames, i, room)
            if j == i and not writer.sealed and writer.position == fmt.SEGMENT_HEADER_SIZE:
                raise ValueError(f"a {len(frames[i])}-byte frame cannot fit an empty segment")  # a bug: never
            if j == i or writer.sealed:
                self._roll(draining=draining)
                continue
            chunk = frames[i:j] if (i, j) != (0, len(frames)) else frames
            if not draining:
                self._check_space(writer.directory, size)
            if runs is not None and i < len(runs):
                self._append_runs(writer, chunk, runs[i:j], size, pointers)
                i = j
                continue
            try:
                base = writer.append(b"".join(chunk), len(chunk), *put_seq_range(chunk))
            except OSError as err:
                raise self._write_error(writer.directory, size, err) from err
            log_base = fmt.make_pointer(writer.log_id, 0)  # | offset: make_pointer, one call per chunk
            offsets = itertools.accumulate(map(len, chunk), initial=base)
            pointers.extend([log_base | o for o in itertools.islice(offsets, len(chunk))])
            i = j
        return pointers

    def _append_runs(self, writer: SegmentWriter, chunk: list[bytes], runs: list[Placement], size: int,
                     pointers: list[int]) -> None:
        """:meth:`append` of a chunk whose first ``len(runs)`` frames are RUN frames: a RUN frame's
        pointers are those of its PUT frames, and the segment counts those frames, as replay does."""
        first = fmt.frame_type_and_seq(chunk[0])[1]
        last = fmt.frame_type_and_seq(chunk[len(runs) - 1])[1] + len(runs[-1][1]) - 1
        count = sum(len(positions) for _shift, positions in runs) + len(chunk) - len(runs)
        assert self._sealer is not None  # only an encrypting channel makes runs
        data = self._sealer.seal_chunk(chunk, len(runs), writer.log_id, writer.position)  # where append writes
        try:
            base = writer.append(data, count, first, last)  # type: ignore[arg-type]  # a bytearray writes like bytes
        except OSError as err:
            raise self._write_error(writer.directory, size, err) from err
        at = fmt.make_pointer(writer.log_id, base)
        for frame, placement in itertools.zip_longest(chunk, runs):
            if placement is None:  # the COMMIT frame after the runs
                pointers.append(at)
            else:
                start = at + placement[0]
                pointers.extend([start + position for position in placement[1]])
            at += len(frame)

    def write_rollback(self, txn_id: int, frame: bytes) -> None:
        """Append a ROLLBACK frame. Only tidiness: replay drops a transaction without COMMIT
        anyway, so a failure here loses nothing and is not raised."""
        try:
            self.append([frame], draining=True)
        except (OSError, DiskSpaceError, ChannelFailedError) as err:
            log.warning("rollback frame of transaction %d not written (%s); harmless", txn_id, err)

    def _roll(self, *, draining: bool = False) -> None:
        # Never releases the lock: an append that rolls must be atomic for checkpoints, which
        # would otherwise see frames already written to the old segment but not yet referenced.
        self._check_usable()
        if not self.segment.sealed:
            in_use = self._syncing  # the sync leader is using this descriptor outside the lock
            try:
                self.segment.seal(close=not in_use)  # syncs: every append so far is durable
            except OSError as err:
                raise self.fail(err) from err
            if in_use:
                self._retired.append(self.segment)
            self.mark_synced()
        try:
            self.segment = self._new_segment(draining=draining)  # on failure the sealed one stays
        except OSError as err:  # not ENOSPC (that is DiskSpaceError): the directory is unusable
            raise self.fail(err) from err
        self.durable_at = (self.segment.log_id, self.segment.position)  # its header was synced

    # -- group commit ---------------------------------------------------------------------
    def commit(self, tx: Transaction, *, page_cache: bool) -> None:
        """``tx``'s COMMIT frame is appended: publish it once durable (at once for ``page_cache``),
        waiting for the sync that covers it otherwise."""
        self._write_gen += 1
        self._pending.append((self._write_gen, tx))
        if page_cache:
            self._synced_gen = self._write_gen
            self._publish()
            return
        self._wait_durable(self._write_gen)

    def _wait_durable(self, gen: int) -> None:
        while self._synced_gen < gen:
            self._check_usable()
            if self._syncing:
                self._cond.wait()
                continue
            self._lead_sync()

    def _lead_sync(self) -> None:
        """Sync the segment outside the lock, then publish every commit the sync covered."""
        self._syncing, target, writer = True, self._write_gen, self.segment
        covered = (writer.log_id, writer.position)  # every frame of commits up to ``target``
        self._cond.release()
        try:
            writer.sync()
            error: OSError | None = None
        except OSError as err:
            error = err
        finally:
            self._cond.acquire()
            self._syncing = False
            self.fsyncs += 1
            self._close_retired()
        if error is not None:
            raise self.fail(error) from error
        self.durable_at = max(self.durable_at, covered)
        if target > self._synced_gen:  # else a seal meanwhile covered more (and said so)
            self.published_at = covered
        self._synced_gen = max(self._synced_gen, target)
        self._publish()
        self._cond.notify_all()

    def checkpoint_position(self) -> tuple[int, int]:
        """Where a checkpoint of the published state resumes replay: the log's end when no
        commit waits for a sync (every COMMIT frame so far is published), else the end the last
        sync covered (the waiting commits' frames lie after it and are replayed)."""
        if not self._pending:
            return self.segment.log_id, self.segment.position
        return self.published_at

    def sync_through(self, position: tuple[int, int]) -> None:
        """Make the log durable up to ``position``, syncing outside the lock (as a group-commit
        leader does) or waiting for a sync in progress; a later sync always covers it, so a
        busy committer cannot starve the caller."""
        while self.durable_at < position:
            self._check_usable()
            if self._syncing:
                self._cond.wait()
                continue
            self._lead_sync()

    def sync_now(self) -> None:
        """Make every frame appended so far durable and publish the commits waiting for it.

        No waiting for a group-commit sync in progress: a busy committer would starve the
        caller (a checkpoint). A second fdatasync of the same descriptor is safe.
        """
        if not self.segment.sealed:
            try:
                self.segment.sync()
            except OSError as err:
                raise self.fail(err) from err
            self.fsyncs += 1
        self.mark_synced()

    def wait_idle(self) -> None:
        """Wait until no thread is syncing outside the lock."""
        while self._syncing:
            self._cond.wait()

    def seal_for_close(self) -> None:
        """Seal the segment (or abandon it after a failure); call after :meth:`wait_idle`."""
        if self.segment.sealed:
            return
        if self.failed is not None:
            self.segment.abandon()  # nothing more may be written; recovery cuts it back
            return
        self.segment.seal()
        self.mark_synced()

    def _close_retired(self) -> None:
        for writer in self._retired:
            writer.close_file()
        self._retired.clear()

    def mark_synced(self) -> None:
        """Everything written so far is durable (a seal or sync just covered it)."""
        self._synced_gen = self._write_gen
        self.published_at = self.durable_at = (self.segment.log_id, self.segment.position)
        self._publish()
        self._cond.notify_all()

    def _publish(self) -> None:
        """Publish every commit the last sync covered, in commit order."""
        pending = self._pending
        if pending and pending[0][0] <= self._synced_gen:
            self._cond.notify_all()  # committers, and puts waiting for room
        while pending and pending[0][0] <= self._synced_gen:
            self._publish_one(pending.popleft()[1])

    # -- space and failure ----------------------------------------------------------------
    def _check_space(self, directory: str, needed: int) -> None:
        minimum = self._config().min_free_bytes
        if minimum and self._fs().free_bytes(directory) - needed < minimum:
            raise self._disk_full(directory, needed)

    def _disk_full(self, directory: str, needed: int) -> DiskSpaceError:
        return DiskSpaceError(path=directory, free_bytes=self._fs().free_bytes(directory),
                              needed_bytes=needed, min_free_bytes=self._config().min_free_bytes,
                              queued=self._queued())

    def _write_error(self, directory: str, needed: int, err: OSError) -> Exception:
        if err.errno == errno.ENOSPC:
            return self._disk_full(directory, needed)  # position unchanged: retryable
        return self.fail(err)

    def fail(self, err: BaseException) -> ChannelFailedError:
        """Record the channel's failure: commits waiting for a sync end UNKNOWN."""
        if self.failed is None:
            log.error("channel failed: %r; reopen it to recover from the log", err)
            self.failed = err
        for _gen, tx in self._pending:
            tx.state = TxnState.UNKNOWN
        self._pending.clear()
        self._cond.notify_all()
        return ChannelFailedError(self.failed)
