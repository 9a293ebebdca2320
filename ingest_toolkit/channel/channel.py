"""The durable file channel: Flume FileChannel semantics over our own log format.

State and its guards (all under ``self._cond``, one lock):

* ``_queue`` - pointers of committed, not-taken events, FIFO by commit order.
* ``_used`` - capacity in use: queued + taken-not-committed + put-not-committed events.
* ``_refcounts`` - per log id, queued + in-flight events whose PUT frame lives there.
* ``_log`` - the write side (:class:`~.logwriter.LogWriter`): appending, rolling segments, the
  space checks and group commit; it calls :meth:`FileChannel._publish_commit` for each commit
  a sync made durable, in commit order.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ChannelClosedError, ChannelFailedError, ChannelFullError, LogReadError, TransactionError
from . import format as fmt
from .checkpoint import Snapshot
from .checkpointer import Checkpointer, CheckpointResult
from .codec import TXN_PUT, EventColumns, encode_rollback
from .config import ChannelConfig
from .crypto import TAG_BYTES, keychain_of
from .format import FrameType
from .fs import FileSystem, OsFileSystem
from .incidents import Incident, IncidentBook
from .lock import DirectoryLock
from .logwriter import LogWriter
from .reader import EventReader
from .recovery import recover
from .tags import TagRecord, check_tag
from .transaction import Transaction, TxnKind, TxnState, take_chunks
from .txnframes import commit_frame, count_logs, take_frames

if TYPE_CHECKING:
    from .columnar import ArrowColumns

__all__ = ["FileChannel"]

log = logging.getLogger(__name__)

_MARK_COALESCE_NS = 1_000_000_000  # one commit-time mark per second of backlog at most
_Taken = TypeVar("_Taken")


class FileChannel:
    """A durable FIFO of events with put and take transactions.

    Opening locks the directories and recovers by replaying the logs; ``close`` seals the
    current segment. Thread-safe; each thread holds at most one open transaction.
    """

    def __init__(self, *, fs: FileSystem | None = None,
                 progress: Callable[[int, int], None] | None = None, **settings: Any) -> None:
        self.config = ChannelConfig.build(**settings)
        self._keys = keychain_of(self.config)  # a bad key file or variable: ConfigError, nothing touched
        self._fs: FileSystem = fs or OsFileSystem()
        self._cond = threading.Condition(threading.Lock())
        self._local = threading.local()
        self._locks: list[DirectoryLock] = []
        self._closed = True
        self._closing = False
        self._lock_directories()
        try:
            self._recover(progress)
            self._closed = False
            self._checkpointer = Checkpointer(self._fs, self.config.checkpoint_dir, self.channel_id,
                                              self._snapshot, self._forget_logs, sync_through=self._sync_through,
                                              backup_dir=self.config.backup_checkpoint_dir,
                                              backup=self._recovered_backup)
            if self.replay_stats.frames or self.checkpoint_problem or self._backup_behind():
                self.checkpoint()  # what this open replayed need not be replayed again
        except BaseException:
            self._closed = True
            if hasattr(self, "_reader"):
                self._reader.close()
            self._release_locks()
            raise
        self._checkpointer.start(self.config.checkpoint_interval)

    # -- opening --------------------------------------------------------------------------
    def _backup_behind(self) -> bool:
        """Whether the backup copy is missing, unusable or older than the checkpoint in force."""
        backup = self._recovered_backup
        return backup is not None and (self.recovery_source != "checkpoint"
                                       or backup.checkpoint_id != self._checkpoint_id)

    def _lock_directories(self) -> None:
        backup = self.config.backup_checkpoint_dir
        for directory in (self.config.checkpoint_dir, *self.config.data_dirs, *([backup] if backup else [])):
            self._fs.makedirs(directory)
            lock = DirectoryLock(directory)
            try:
                lock.acquire()
            except BaseException:
                self._release_locks()
                raise
            self._locks.append(lock)

    def _recover(self, progress: Callable[[int, int], None] | None) -> None:
        recovered = recover(self._fs, self.config, progress, self._keys)
        result = recovered.result
        self.replay_stats = result.stats
        self.checkpoint_problem = recovered.checkpoint_problem
        # Where the state came from: "checkpoint", "backup" (the primary was unusable) or
        # "full-replay" (no usable copy); backup_problem: why the backup found was skipped.
        self.recovery_source = recovered.source
        self._recovered_backup = recovered.backup
        self.backup_problem = recovered.backup.problem if recovered.backup else None
        self._incidents = IncidentBook(self.config.checkpoint_dir, self._fs)  # what recovery and repairs cut
        self.channel_id = recovered.channel_id
        self._paths = {info.log_id: info.path for info in result.segments}
        self._queue = result.queue
        self._refcounts = Counter(result.refcounts)
        self._used = len(self._queue)
        clock = time.time_ns() // 1000  # seeds survive the loss of every log: see docs
        self._seq = max(result.max_seq + 1, clock)
        self._next_txn = max(result.max_txn + 1, clock)
        self._checkpoint_id = recovered.last_checkpoint_id
        self._puts_total, self._takes_total = result.puts_committed, result.takes_committed
        self._totals_at_open = (self._puts_total, self._takes_total)  # for the counters since open
        self._marks: deque[tuple[int, int]] = deque(recovered.marks)
        self._tags = result.tags
        self._take_calls = 0
        self._open: dict[int, Transaction] = {}
        self._commits = 0
        self.sealer = self._keys.sealer(self.channel_id)
        self._reader = EventReader(self._fs, self._paths, self.config.max_event_size + fmt.FRAME_OVERHEAD + TAG_BYTES,
                                   keys=self._keys)
        self._log = LogWriter(lambda: self._fs, lambda: self.config, self.channel_id, recovered.next_log_id,
                              self._paths, self._cond, check_usable=self._check_usable,
                              publish=self._publish_commit, queued=lambda: len(self._queue),
                              sealer=self.sealer)

    # -- public API -----------------------------------------------------------------------
    def transaction(self, tag: str | None = None, *, pipelined: bool = False) -> Transaction:
        """Begin a transaction for the calling thread.

        ``tag`` (puts only; a non-empty str of at most 128 bytes UTF-8, else InvalidTagError) is
        a client batch id written into the COMMIT frame: once the commit returns, ``find_tag``
        answers it (docs/channel.md, "Commit tags"). A take in a tagged transaction raises
        TransactionError; a tagged transaction that puts nothing commits nothing and records no tag.

        ``pipelined``: a take that may stay open beside other pipelined takes of the same thread
        (a consumer with several batches in flight: the forward sink, the agent's take window).
        Its events go back to the head on rollback, so such takes are rolled back newest first:
        a rollback while a pipelined take popped after it is still open raises TransactionError
        (it would put the older events behind the newer).
        """
        if tag is not None:
            check_tag(tag)
        current: Transaction | None = getattr(self._local, "tx", None)
        if not pipelined and current is not None and current.state is TxnState.OPEN:
            raise TransactionError(
                f"this thread already has open transaction {current.txn_id}; commit or roll it "
                "back first (one transaction per thread)")
        with self._cond:
            self._check_usable()
            tx = Transaction(self, self._next_txn, tag)
            tx.pipelined = pipelined
            self._next_txn += 1
            self._open[tx.txn_id] = tx
        if not pipelined:
            self._local.tx = tx
        return tx

    def find_tag(self, tag: str) -> TagRecord | None:
        """The commit of a put transaction tagged ``tag``, if it is still remembered.

        Remembered: the newest ``tag_window`` tags committed within ``tag_retention_seconds``,
        across restarts. A tag appears when its commit is published (durable as ``durability``
        promises) and never before. Checking and then putting is not atomic: callers that
        deduplicate concurrent retries hold one lock per tag around both.
        """
        check_tag(tag)
        with self._cond:
            return self._tags.find(tag)

    def __len__(self) -> int:
        """Committed events not yet taken (events in open take transactions excluded)."""
        return len(self._queue)

    def stats(self) -> dict[str, Any]:
        """Live counters (docs/rpc.md, "Status"). ``oldest_commit_unix_ns``: when the oldest event
        not yet taken for good (queued or in an open take) was committed, 0 when there is none:
        the live backlog age, which ``checkpoint.meta`` only has as of its last write."""
        with self._cond:
            takes = [t for t in self._open.values() if t.kind is TxnKind.TAKE]
            return {
                "channel_id": str(uuid.UUID(bytes=self.channel_id)),
                "queue_size": len(self._queue),
                "used": self._used,
                "capacity": self.config.capacity,
                "open_transactions": len(self._open),
                "open_takes": len(takes),
                "events_in_open_takes": sum(t.count for t in takes),
                "oldest_commit_unix_ns": next((ns for end, ns in self._marks if end > self._takes_total), 0),
                "commits": self._commits,
                "fsyncs": self._log.fsyncs,
                "log_files": {lid: {"path": p, "refcount": self._refcounts.get(lid, 0)}
                              for lid, p in sorted(self._paths.items())},
                "writing": self._log.segment.log_id,
                "next_seq": self._seq,
                "puts_committed": self._puts_total,  # over the channel's life (restored by recovery)
                "takes_committed": self._takes_total,
                "puts_since_open": self._puts_total - self._totals_at_open[0],  # like commits and fsyncs
                "takes_since_open": self._takes_total - self._totals_at_open[1],
                "checkpoint_id": self._checkpoint_id,
                "tags": len(self._tags),
                # a retried batch first sent after this time is recognised (docs/channel.md, "Window")
                "tags_since_unix_ns": self._tags.remembered_since(),
                "recovery_source": self.recovery_source,
                "backup": self._backup_stats(),
                "incidents": self._incidents.summary(),
            }

    def _backup_stats(self) -> dict[str, Any] | None:
        if self.config.backup_checkpoint_dir is None:
            return None
        state = self._checkpointer.backup
        return {"dir": self.config.backup_checkpoint_dir, "checkpoint_id": state.checkpoint_id,
                "current": state.checkpoint_id == self._checkpoint_id, "failures": state.failures,
                "problem": state.problem}

    def incidents(self) -> list[Incident]:
        """Every range recovery or a repair cut from this channel's log, oldest first
        (:mod:`.incidents`); the open ones have ``acknowledged_unix_ns == 0``."""
        return self._incidents.all()

    def acknowledge_incidents(self, ids: list[int] | None, note: str) -> list[Incident]:
        """Mark open incidents acknowledged (``ids`` None: all of them); returns those marked.
        The channel's status stops counting them and its checks pass again."""
        with self._cond:
            if self._closed:
                raise ChannelClosedError()
        return self._incidents.acknowledge(ids, note)

    def checkpoint(self) -> CheckpointResult:
        """Write a checkpoint now and delete the log segments it made unnecessary.

        Puts and takes are blocked only while the state is copied (``blocked_seconds``); the files
        are written outside the lock. A failure leaves the previous checkpoint valid.
        """
        return self._checkpointer.run()

    @property
    def last_checkpoint(self) -> CheckpointResult | None:
        return self._checkpointer.last

    def close(self) -> None:
        """Roll back open transactions, seal the segment, checkpoint, release the locks.

        The locks are released whatever fails on the way; a failure leaves what the next open
        needs (at worst it replays the log).
        """
        with self._cond:
            if self._closed or self._closing:
                return
            self._closing = True
        try:
            self._checkpointer.stop()
            self._seal_for_close()
            if self.config.checkpoint_on_close and self._log.failed is None:
                self.checkpoint()
        except Exception as err:
            log.error("closing %s did not complete (%s); the next open recovers from the log",
                      self.config.checkpoint_dir, err)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._reader.close()
            self._release_locks()

    def _seal_for_close(self) -> None:
        with self._cond:
            self._log.wait_idle()
            # Open takes go back chunk by chunk, the last popped first, so the queue is in its
            # original order whatever order they were begun or rolled back in (as a checkpoint
            # restores them); rolling them back one by one would put an older take's events
            # behind a newer one's.
            open_txns = sorted(self._open.values(), key=lambda t: t.txn_id)
            for _txn, pointers in reversed(take_chunks(open_txns)):
                self._queue.extendleft(pointers)
            for tx in open_txns:
                if tx.kind is TxnKind.TAKE:
                    self._finish(tx, TxnState.ROLLED_BACK)
                elif tx.state is TxnState.OPEN:
                    self._rollback_locked(tx)
            self._cond.notify_all()
            self._log.seal_for_close()

    def __enter__(self) -> FileChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- used by the Checkpointer ---------------------------------------------------------
    def _snapshot(self) -> tuple[Snapshot, dict[int, str]]:
        """The published state and its log position, under the lock: bookkeeping is copied, the
        queue lent (``PointerQueue.freeze``, no copy); nothing is synced here."""
        with self._cond:
            if self._closed:
                raise ChannelClosedError()
            if self._log.failed is not None:
                raise ChannelFailedError(self._log.failed)
            # The state as published: every COMMIT frame before this position, and none after
            # it, is in the queue. Frames after it (commits still waiting for their sync) are
            # replayed from the log. The Checkpointer makes the position durable (_sync_through)
            # before it writes anything: no fdatasync while the lock is held.
            log_id, log_offset = self._log.checkpoint_position()
            limit = fmt.make_pointer(log_id, log_offset)
            self._checkpoint_id += 1
            open_txns = sorted(self._open.values(), key=lambda t: t.txn_id)
            puts = [(t.txn_id, t.spilled[: bisect_left(t.spilled, limit)])
                    for t in open_txns if t.kind is TxnKind.PUT and t.spilled]
            takes, tags = take_chunks(open_txns), self._tags.records()
            snap = Snapshot(  # the queue is lent last: nothing after it can fail and leave it lent
                checkpoint_id=self._checkpoint_id, queue=self._queue.freeze(),
                takes=takes, puts=[(txn, ptrs) for txn, ptrs in puts if ptrs],
                refcounts=dict(self._refcounts), log_id=log_id, log_offset=log_offset,
                last_seq=self._seq - 1, next_txn_id=self._next_txn, marks=list(self._marks),
                puts_committed=self._puts_total, takes_committed=self._takes_total,
                capacity=self.config.capacity, interval_ms=int(self.config.checkpoint_interval * 1000),
                tags=tags)
            return snap, dict(self._paths)

    def _sync_through(self, position: tuple[int, int]) -> None:
        """Make the log durable up to a snapshot's position (the lock is released while syncing)."""
        with self._cond:
            if self._log.failed is not None:
                raise ChannelFailedError(self._log.failed)
            self._log.sync_through(position)

    def _forget_logs(self, log_ids: list[int]) -> None:
        with self._cond:
            for log_id in log_ids:
                self._paths.pop(log_id, None)
        for log_id in log_ids:
            self._reader.forget(log_id)

    # -- the TransactionHost protocol: called by Transaction, not by users ------------------
    def txn_reserve(self, n: int) -> int:
        """Take ``n`` capacity slots (waiting up to keep_alive) and ``n`` sequence numbers.

        Returns the first sequence number.
        """
        capacity = self.config.capacity
        with self._cond:
            self._check_usable()
            if self._used + n <= capacity:  # the usual case: no clock, no wait
                self._used += n
                first = self._seq
                self._seq += n
                return first
            deadline = time.monotonic() + self.config.keep_alive
            while self._used + n > capacity:
                remaining = deadline - time.monotonic()
                if n > capacity or remaining <= 0:
                    raise ChannelFullError(capacity=capacity, used=self._used, requested=n)
                self._cond.wait(remaining)
                self._check_usable()
            self._used += n
            first = self._seq
            self._seq += n
            return first

    def txn_spill(self, tx: Transaction) -> None:
        with self._cond:
            self._check_usable()
            tx.spilled.extend(self._log.append(tx.frames, runs=tx.runs or None))
            tx.frames.clear()
            tx.runs.clear()
            tx.buffered_bytes = 0

    def txn_take_columns(self, tx: Transaction, n: int) -> EventColumns:
        return self._take(tx, n, self._reader.read_columns)

    def txn_take_payloads(self, tx: Transaction, n: int) -> tuple[list[bytes], list[int]]:
        return self._take(tx, n, self._reader.read_payloads)

    def txn_take_arrow(self, tx: Transaction, n: int) -> ArrowColumns:
        return self._take(tx, n, self._reader.read_arrow)

    def _take(self, tx: Transaction, n: int, read: Callable[[list[int]], _Taken]) -> _Taken:
        """Pop up to ``n`` pointers into ``tx`` and ``read`` their events (a method of
        ``self._reader``: the result's form is the only difference between take methods)."""
        with self._cond:
            self._check_usable()
            pointers = self._queue.popleft(n)
            # In the transaction within the same critical section, so a checkpoint never sees
            # these events neither queued nor in flight; the pop order lets it restore them
            # exactly where they were.
            if pointers:
                tx.take_chunks.append((self._take_calls, len(tx.taken)))
                self._take_calls += 1
            tx.taken.extend(pointers)
            tx.count += len(pointers)
        if not pointers:
            return read([])  # an empty result of the caller's form; nothing to put back
        try:
            return read(pointers)
        except BaseException as err:
            with self._cond:
                del tx.taken[len(tx.taken) - len(pointers):]
                tx.take_chunks.pop()
                tx.count -= len(pointers)
                self._queue.extendleft(pointers)  # nothing was taken
            if isinstance(err, OSError):
                raise LogReadError(path=getattr(err, "filename", None) or "log segment", cause=err) from err
            raise

    def txn_commit(self, tx: Transaction) -> None:
        with self._cond:
            self._check_usable()
            if tx.count == 0:
                self._finish(tx, TxnState.COMMITTED)
                return
            if tx.kind is TxnKind.PUT:
                if tx.tag is not None:
                    tx.tag_record = TagRecord(tx.tag, tx.first_seq, tx.count, time.time_ns())
                frames = tx.frames + [commit_frame(tx.txn_id, TXN_PUT, tx.count, tx.tag_record)]
                pointers = self._log.append(frames, runs=tx.runs or None)
                tx.spilled.extend(pointers[:-1])  # a RUN frame's pointers are its PUT frames
            else:
                self._log.append(take_frames(tx.txn_id, tx.taken, self.config.max_file_size), draining=True)
            tx.appended = True
            self._log.commit(tx, page_cache=self.config.durability == "page_cache")

    def txn_rollback(self, tx: Transaction) -> None:
        with self._cond:
            self._rollback_locked(tx)

    # -- internals (caller holds the lock) ------------------------------------------------
    def _rollback_locked(self, tx: Transaction) -> None:
        if tx.state is not TxnState.OPEN:
            return
        if tx.kind is TxnKind.TAKE:
            if tx.pipelined and tx.take_chunks:
                self._check_newest_take(tx)
            self._queue.extendleft(tx.taken)  # back at the head, original order
        else:
            self._used -= tx.count
            if tx.spilled and self._log.failed is None:
                frame = fmt.encode_frame(FrameType.ROLLBACK, tx.txn_id, 0, encode_rollback(TXN_PUT))
                self._log.write_rollback(tx.txn_id, frame)
        self._finish(tx, TxnState.ROLLED_BACK)
        self._cond.notify_all()

    def _check_newest_take(self, tx: Transaction) -> None:
        first = tx.take_chunks[0][0]
        later = [t.txn_id for t in self._open.values() if t is not tx and t.pipelined and t.kind is TxnKind.TAKE
                 and t.take_chunks and t.take_chunks[-1][0] > first]
        if later:
            raise TransactionError(
                f"take {tx.txn_id} cannot roll back before take(s) {', '.join(map(str, sorted(later)))} popped after "
                "it: its events would return behind theirs; roll back pipelined takes newest first")

    def _finish(self, tx: Transaction, state: TxnState) -> None:
        tx.state = state
        self._open.pop(tx.txn_id, None)

    def _publish_commit(self, tx: Transaction) -> None:
        """Apply one commit the log writer made durable (called in commit order)."""
        self._commits += 1
        if tx.kind is TxnKind.PUT:
            self._queue.extend(tx.spilled)
            count_logs(self._refcounts, tx.spilled, +1)
            self._puts_total += tx.count
            self._mark_commit()
            if tx.tag_record is not None:
                self._tags.add(tx.tag_record)  # published, so durable: replay finds the same
        else:
            count_logs(self._refcounts, tx.taken, -1)
            self._used -= tx.count
            self._takes_total += tx.count
            while self._marks and self._marks[0][0] <= self._takes_total:
                self._marks.popleft()
        self._finish(tx, TxnState.COMMITTED)

    def _mark_commit(self) -> None:
        now = time.time_ns()
        marks = self._marks
        if marks and now - marks[-1][1] < _MARK_COALESCE_NS:
            marks[-1] = (self._puts_total, marks[-1][1])  # keeps the earlier, conservative time
        else:
            marks.append((self._puts_total, now))

    def _check_usable(self) -> None:
        if self._closed or self._closing:
            raise ChannelClosedError()
        if self._log.failed is not None:
            raise ChannelFailedError(self._log.failed)

    def _release_locks(self) -> None:
        for lock in reversed(self._locks):
            lock.release()
        self._locks.clear()
