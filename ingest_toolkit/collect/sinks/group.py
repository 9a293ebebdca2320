"""A sink group's thread: batches taken in order, put downstream, each committed after its ack.

Up to ``pipeline`` puts are in flight at once. A batch is a *slot*: an open take of the local
channel, its in-flight record, the events it puts (kept in memory while the take is open), and at
times a put running in one of the group's put threads. The rules that keep every batch id of
:mod:`.forward` stable with several takes open:

* **One thread takes, in order, and records before sending.** The group thread takes every batch
  and writes its record (fsync'ed) before its first put and before the next take. So every take
  that is not committed has a record, and the records' ``take`` numbers are the order of their
  events at the head of the channel once the takes are rolled back or recovered after a crash
  (the recovery puts uncommitted takes back where they were; commits only remove events).
* **Each take is committed by its put thread after its own ack** (then its record is removed), in
  whatever order the acks come: committing removes a batch's events from wherever they are, and a
  record left by a crash between the commit and the removal no longer matches the head.
* **A failed batch keeps its take.** Its events stay out of the queue, in memory, and its next put
  sends the very same events under the same id: no rollback, no retake, and no other batch waits
  for it. Where the next put may go is the record's business (:meth:`SinkGroup._settle`): a batch
  *in doubt* at a sink stays pinned to that sink and waits there, set aside with it, until that
  sink answers (its batch-id record says whether it stored the batch) or ``release_in_doubt_after``
  passes; meanwhile the group takes and forwards newer batches through the other sinks. A sink
  that holds a batch in doubt is sent nothing new before that batch is resolved, so at most
  ``pipeline`` batches wait per sink.
* **Takes are rolled back only when the group stops or a put thread fails unexpectedly**: every
  put in flight ends first (those acknowledged commit), then every open take is rolled back from
  the newest to the oldest, so the events return to the head in their original order. Each keeps
  its record and is retaken with exactly its count, oldest first and before anything new: the
  same events, the same id, pinned as its own put left it. A record whose retake does not match
  the head was committed before a restart and is dropped.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...channel import EventColumns, FileChannel, Transaction, TxnState
from .forward import Downstream, Outcome, add_hop, forward_batch_id
from .inflight import InFlight, Records
from .processors import Processor
from .take import arrow_available, take_batch

__all__ = ["SinkGroup", "take_batch"]

log = logging.getLogger("ingest_toolkit.collect.sinks")

IDLE_POLL = 0.01  # seconds between looks at an empty channel


@dataclass(eq=False)
class _Slot:
    """One batch of the pipeline: its record and, while it is taken, its take, what it puts and its put."""

    record: InFlight
    tx: Transaction | None = None  # the open take; None: the batch waits to be (re)taken
    columns: EventColumns | None = None  # what its puts send (the hop header raised), while the take is open
    sink: Downstream | None = None  # where its last put went
    future: Future[Outcome] | None = None  # the put (and commit) in flight; None: not being put
    committed: bool = False  # the take was committed after the ack (by the put thread)
    recorded: bool = False  # its record file is written as it is now
    events: int = 0  # events put (the batch less those dropped as looping)
    dropped: int = 0
    ack_seconds: float = 0.0
    pinned_since: float | None = None  # time.monotonic() of the first in-doubt failure
    released_from: str | None = None  # the sink a released batch was in doubt at: tried last

    @property
    def waiting(self) -> bool:
        """Taken and not being put: its put failed, or it was retaken, and it waits for a sink."""
        return self.tx is not None and self.future is None and not self.committed


def _clamp(seconds: float) -> float:
    """A pause of the group thread: at least a poll, at most a second (new events, stop requests)."""
    return min(max(seconds, IDLE_POLL), 1.0)


class SinkGroup:
    """The thread that empties ``channel`` through ``sinks`` (see the module doc)."""

    def __init__(self, name: str, channel: FileChannel, sinks: list[Downstream], processor: Processor,
                 state_dir: Path, *, min_penalty: float, max_penalty: float,
                 release_in_doubt_after: float = 0.0, unreachable_after: float = 120.0) -> None:
        first = sinks[0].settings
        self.name, self.channel, self.sinks, self.processor = name, channel, sinks, processor
        self.batch_size, self.linger, self.pipeline = first.batch_size, first.linger, first.pipeline
        self.hop_header, self.max_hops = first.hop_header, first.max_hops
        self.min_penalty, self.max_penalty = min_penalty, max_penalty
        self.release_in_doubt_after, self.unreachable_after = release_in_doubt_after, unreachable_after
        self._by_name = {sink.name: sink for sink in sinks}
        self._records = Records(state_dir, name)
        self.slots = [_Slot(record, recorded=True) for record in self._records.load()]  # take order
        self._next_take = max((s.record.take for s in self.slots), default=-1) + 1
        self._puts = ThreadPoolExecutor(self.pipeline, thread_name_prefix=f"sink-group-{name}")
        arrow_available()  # warms Arrow up now, not on the first batch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first_seen: float | None = None
        self._lock = threading.Lock()
        self._counts = {"batches": 0, "events": 0, "dropped_looping": 0, "errors": 0, "released_in_doubt": 0}
        self.error = ""

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"sink-group-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("sink group %s did not stop within %.1fs (a put is still waiting for its answer); "
                            "its takes are rolled back when the channel closes", self.name, timeout)
            self._thread = None
        self._puts.shutdown(wait=False, cancel_futures=True)
        for sink in self.sinks:
            sink.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def inflight(self) -> InFlight | None:
        """The oldest batch in flight (taken and not yet committed)."""
        return self.slots[0].record if self.slots else None

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._counts)
        slots = list(self.slots)
        records = [asdict(slot.record) for slot in slots]
        waiting = [slot.record.batch_id for slot in slots if slot.waiting and slot.record.in_doubt is not None]
        return {**counts, "running": self.running, "processor": self.processor.kind,
                "channel": self.channel_name, "pipeline": self.pipeline,
                "inflight": records[0] if records else None, "inflight_batches": records,
                "waiting_in_doubt": waiting, "unforwarded_events": self.unforwarded_events(),
                "unreachable_after": self.unreachable_after,
                "unreachable": self.unreachable(), "sinks": {sink.name: sink.stats() for sink in self.sinks}}

    def unforwarded_events(self) -> int:
        """Events of the channel not yet acknowledged downstream: queued, in a batch taken and not
        committed (in flight, or waiting for a sink), or being put. 0: everything put so far was
        forwarded. The channel's ``used``, one number read under its lock: counting the queue and
        the batches apart could miss a batch between its take and its slot."""
        return int(self.channel.stats()["used"])

    def unreachable(self) -> list[str]:
        """The sinks whose puts have gone unanswered for longer than ``unreachable_after``."""
        return [sink.name for sink in self.sinks if sink.unreachable_seconds() > self.unreachable_after]

    def forwarding(self) -> dict[str, Any]:
        """What the agent's gRPC status says about the forwarding of this group's channel (the
        ``forward_sinks_reachable`` check judges it): the sinks, their addresses and how long each
        has gone unanswered."""
        sinks = {sink.name: {"address": sink.settings.address, "last_error": sink.last_error,
                             "unreachable_seconds": round(sink.unreachable_seconds(), 1)} for sink in self.sinks}
        waiting = sum(1 for slot in list(self.slots) if slot.waiting and slot.record.in_doubt is not None)
        return {"group": self.name, "unreachable_after": self.unreachable_after, "unreachable": self.unreachable(),
                "waiting_in_doubt": waiting, "sinks": sinks}

    @property
    def channel_name(self) -> str:
        return self.sinks[0].settings.channel

    # -- the loop ---------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pause = self.step()
            except Exception as err:
                with self._lock:
                    self._counts["errors"] += 1
                self.error = f"{type(err).__name__}: {err}"
                log.exception("sink group %s: unexpected error; retrying in 1s", self.name)
                pause = 1.0
            if pause and self._stop.wait(pause):
                break
        self._settle_on_stop()

    def step(self) -> float:
        """Advance the pipeline: account for the batches whose puts ended (committed, or waiting
        for a sink after a failure), else start one put (a waiting batch's, or a new batch's),
        waiting for a put to end when ``pipeline`` are in flight. Returns how long to wait before
        the next step (0: at once). With ``pipeline = 1`` a step puts one batch and accounts for it."""
        if any(slot.future is not None and slot.future.done() for slot in self.slots):
            self._finish()
            return 0.0
        pause = self._start_one()
        in_flight = self._in_flight()
        if not in_flight:
            return pause
        if len(in_flight) >= self.pipeline:
            wait(in_flight, return_when=FIRST_COMPLETED)  # each put ends by its own timeout
            self._finish()
        elif pause:
            wait(in_flight, timeout=pause, return_when=FIRST_COMPLETED)
        return 0.0

    def _in_flight(self) -> list[Future[Outcome]]:
        return [slot.future for slot in self.slots if slot.future is not None]

    # -- starting a put ---------------------------------------------------------------------
    def _start_one(self) -> float:
        """Retake the oldest batch whose take was rolled back; else put the oldest waiting batch
        that has a sink ready for it; else take and put a new batch. Returns the seconds to wait
        when nothing can start now (0: something started)."""
        retake = next((s for s in self.slots if s.tx is None), None)
        if retake is not None:
            self._retake(retake)
            return 0.0
        if len(self._in_flight()) >= self.pipeline:
            return 0.0  # the step waits for a put to end
        pause, unpinned_waits = 1.0, False
        for slot in [s for s in self.slots if s.waiting]:  # oldest first; each may go where its record allows
            sink, wait_for = self._sink_for(slot)
            if sink is not None:
                self._send(slot, sink)
                return 0.0
            pause = min(pause, wait_for)
            unpinned_waits = unpinned_waits or slot.record.in_doubt is None
        if unpinned_waits:  # a batch any sink may take goes before anything new
            return _clamp(pause)
        return self._take_new(pause)  # only pinned batches wait, for sinks set aside: newer ones go on

    def _sink_for(self, slot: _Slot) -> tuple[Downstream | None, float]:
        """The sink a waiting batch goes to now, or None and the seconds until one may be ready: its
        own sink while it is pinned there, else what the processor picks among the open sinks."""
        if slot.record.in_doubt is not None:
            self._maybe_release(slot)
        pinned = self._by_name.get(slot.record.in_doubt or "")
        if pinned is not None:
            left = pinned.available_at - time.monotonic()
            return (pinned, 0.0) if left <= 0 else (None, left)
        return self.processor.pick(self._open_sinks(exclude=slot.released_from), None)

    def _open_sinks(self, exclude: str | None = None) -> list[Downstream]:
        """The sinks that may take a batch not pinned anywhere: those holding no batch in doubt
        (that batch is resolved first), the one a released batch came from last."""
        holding = {s.record.in_doubt for s in self.slots if s.record.maybe_stored and not s.committed}
        open_sinks = [sink for sink in self.sinks if sink.name not in holding]
        return [sink for sink in open_sinks if sink.name != exclude] or open_sinks

    def _take_new(self, pause: float) -> float:
        """Take a new batch and put it, when one is due and a sink is ready; else the seconds to wait."""
        due = self._linger()
        if due:
            return min(due, pause)
        sink, wait_for = self.processor.pick(self._open_sinks(), None)
        if sink is None:
            return _clamp(min(wait_for, pause))
        tx = self.channel.transaction(pipelined=True)
        slot: _Slot | None = None
        try:
            columns = take_batch(tx, self.batch_size)
            if not len(columns):
                tx.rollback()
                return IDLE_POLL
            slot = self._new_slot(columns)
            slot.tx = tx
            self._prepare(slot, columns)
            self._send(slot, sink)
        except BaseException:
            self._undo_take(tx, slot)
            raise
        return 0.0

    def _retake(self, slot: _Slot) -> None:
        """Take exactly the recorded events of a batch whose take was rolled back (or that a
        restart found recorded); it then waits for a sink like any failed batch. A head that does
        not match the record means the batch was committed before a restart: the record goes."""
        tx = self.channel.transaction(pipelined=True)
        try:
            columns = take_batch(tx, slot.record.count)
            if not slot.record.matches(columns):
                tx.rollback()
                self._drop_stale(slot)
                return
            slot.tx = tx
            self._prepare(slot, columns)
        except BaseException:
            self._undo_take(tx, slot)
            raise

    @staticmethod
    def _undo_take(tx: Transaction, slot: _Slot | None) -> None:
        if tx.state is TxnState.OPEN:
            tx.rollback()  # the newest take: nothing was taken after it
        if slot is not None and not slot.committed:
            slot.tx = slot.future = slot.columns = None

    def _new_slot(self, columns: EventColumns) -> _Slot:
        record = InFlight(forward_batch_id(self.channel.channel_id, columns.seqs[0], len(columns)),
                          columns.seqs[0], columns.seqs[-1], len(columns), take=self._next_take)
        self._next_take += 1
        slot = _Slot(record)
        self.slots.append(slot)
        self._first_seen = None
        return slot

    def _drop_stale(self, slot: _Slot) -> None:
        log.info("sink group %s: batch %s was committed before a restart; dropping its record",
                 self.name, slot.record.batch_id)
        self._records.remove(slot.record)
        self.slots.remove(slot)

    def _prepare(self, slot: _Slot, columns: EventColumns) -> None:
        """What the batch's puts send: the events with the hop header raised, without those looping."""
        forward, slot.dropped = add_hop(columns, self.hop_header, self.max_hops)
        if slot.dropped:
            log.warning("sink group %s: dropped %d events that were already forwarded %d times or more (%s >= "
                        "max_hops %d): a forwarding loop, or more tiers than max_hops", self.name, slot.dropped,
                        self.max_hops, self.hop_header, self.max_hops)
        slot.columns, slot.events = forward, len(forward)

    def _send(self, slot: _Slot, sink: Downstream) -> None:
        """Record the batch (durably, naming the sink, before the request can reach it) and put it."""
        assert slot.tx is not None and slot.columns is not None, "only a taken batch is put"
        slot.sink = sink
        record = slot.record
        if not slot.events:  # nothing to put: committed at once, so it needs no record
            slot.future = Future()
            slot.future.set_result(self._commit(slot, Outcome()))
            return
        if record.in_doubt != sink.name or not slot.recorded:
            record.in_doubt = sink.name  # durable before the request can reach the sink
            self._records.write(record)
            slot.recorded = True
        slot.future = self._puts.submit(self._put, slot, sink, slot.columns, record.batch_id)

    def _put(self, slot: _Slot, sink: Downstream, forward: EventColumns, batch_id: str) -> Outcome:
        """In a put thread: the put, and after its ack the commit of the take."""
        started = time.perf_counter()
        outcome = sink.put_batch(forward, batch_id)
        slot.ack_seconds = time.perf_counter() - started
        return outcome if outcome.error is not None else self._commit(slot, outcome)

    def _commit(self, slot: _Slot, outcome: Outcome) -> Outcome:
        assert slot.tx is not None
        slot.tx.commit()
        slot.committed = True
        self._records.remove(slot.record)
        return outcome

    def _linger(self) -> float:
        """0 when a new batch is due: ``batch_size`` events are queued, or some are and the oldest
        has waited ``linger`` seconds with no put in flight. While a put is in flight a partial
        batch keeps growing (the step wakes when that put ends): otherwise a steady stream would go
        out in batches of one linger's worth, each paying a record and a commit."""
        queued = len(self.channel)
        if not queued:
            self._first_seen = None
            return IDLE_POLL
        now = time.monotonic()
        if self._first_seen is None:
            self._first_seen = now
        if queued >= self.batch_size:
            return 0.0
        if self._in_flight():
            return IDLE_POLL
        if now - self._first_seen < self.linger:
            return min(IDLE_POLL, self.linger - (now - self._first_seen))
        return 0.0

    def _maybe_release(self, slot: _Slot) -> None:
        """Unpin a batch in doubt once ``release_in_doubt_after`` has passed (0: never). It keeps its
        batch id wherever it goes next (the record's)."""
        now = time.monotonic()
        if slot.pinned_since is None:
            slot.pinned_since = now  # pinned before a restart: the clock starts now
        record = slot.record
        if not self.release_in_doubt_after or now - slot.pinned_since < self.release_in_doubt_after:
            return
        log.warning("sink group %s: batch %s has been in doubt at sink %s for %.0fs (release_in_doubt_after); any "
                    "sink may take it now under the same id, and it is stored twice if %s had stored it",
                    self.name, record.batch_id, record.in_doubt, now - slot.pinned_since, record.in_doubt)
        slot.released_from, record.in_doubt, record.maybe_stored = record.in_doubt, None, False
        self._records.write(record)
        slot.pinned_since = None
        with self._lock:
            self._counts["released_in_doubt"] += 1

    # -- ending a put -----------------------------------------------------------------------
    def _finish(self) -> None:
        """Account for the puts that ended: a committed batch leaves the pipeline; a failed one
        keeps its take and waits for a sink as its record says (:meth:`_settle`); each failed sink
        is set aside. An unexpected error of a put thread rolls every take back (module doc)."""
        done = [slot for slot in self.slots if slot.future is not None and slot.future.done()]
        unexpected = next((e for slot in done if slot.future is not None
                           and (e := slot.future.exception()) is not None), None)
        if unexpected is not None:  # an unexpected error of a put thread (or of a commit)
            self._roll_back_all()
            raise unexpected
        failed: dict[str, Downstream] = {}
        for slot in done:
            assert slot.future is not None
            outcome = slot.future.result()
            if slot.committed:
                self._acked(slot)
            elif outcome.error is not None and slot.sink is not None:
                slot.future = None
                self._settle(slot, slot.sink, outcome)
                failed[slot.sink.name] = slot.sink
        for sink in failed.values():
            self._set_aside(sink)

    def _acked(self, slot: _Slot) -> None:
        assert slot.committed and slot.future is not None
        outcome = slot.future.result()
        self.slots.remove(slot)
        if slot.sink is not None and slot.events:
            slot.sink.acked(slot.events, slot.ack_seconds, outcome.duplicate)
            self.processor.succeeded(slot.sink)
        with self._lock:
            self._counts["batches"] += 1
            self._counts["events"] += slot.events
            self._counts["dropped_looping"] += slot.dropped

    def _set_aside(self, sink: Downstream) -> None:
        """A failed sink waits for its penalty: ``min_penalty`` doubling per consecutive failure up to
        ``max_penalty``, jittered (x0.5 to 1)."""
        penalty = min(self.max_penalty, self.min_penalty * 2 ** (sink.failures - 1)) * random.uniform(0.5, 1.0)
        sink.available_at = max(sink.available_at, time.monotonic() + penalty)
        self.processor.failed(sink)
        log.warning("sink group %s: sink %s (%s) set aside for %.2fs: %s", self.name, sink.name,
                    sink.settings.address, penalty, sink.last_error)

    def _roll_back_all(self) -> None:
        """Wait for every put in flight, then roll every open take back to the head, the newest
        first; the rolled-back batches wait to be retaken, the acknowledged ones are accounted."""
        wait(self._in_flight())
        failed_after_commit = []
        for slot in reversed(self.slots):
            if slot.committed:
                if slot.future is not None and slot.future.exception() is not None:
                    failed_after_commit.append(slot)  # its put thread failed after the commit: nothing to account
                continue
            if slot.tx is not None and slot.tx.state is TxnState.OPEN:
                slot.tx.rollback()
            slot.tx = slot.future = slot.columns = None
        for slot in failed_after_commit:
            self.slots.remove(slot)
        for slot in [s for s in self.slots if s.committed]:
            self._acked(slot)

    def _settle(self, slot: _Slot, sink: Downstream, outcome: Outcome) -> None:
        """Update a failed batch's record by its put's outcome at ``sink``: pinned there while it may
        be stored there, else free for any sink."""
        record, err = slot.record, outcome.error
        assert err is not None
        sink.failed(err, outcome.in_doubt, outcome.answered)
        if outcome.in_doubt and not record.maybe_stored:
            record.maybe_stored = True  # durable: a restart keeps the batch with this sink
            self._records.write(record)
        elif not outcome.in_doubt and (outcome.answered or not record.maybe_stored):
            record.in_doubt, record.maybe_stored = None, False  # any sink may take it now
            self._records.write(record)
        # else still pinned: in doubt now, or this put never reached the sink but an earlier one may be stored there
        pinned = record.in_doubt is not None
        if pinned and slot.pinned_since is None:
            slot.pinned_since = time.monotonic()
        log.warning("sink group %s: put of batch %s (%d events) to %s (%s) failed%s: %s", self.name, record.batch_id,
                    record.count, sink.name, sink.settings.address,
                    " in doubt (kept for that sink; newer batches go on)" if pinned else "", err)

    def _settle_on_stop(self) -> None:
        """The group stops: the puts in flight end (those acknowledged commit), the other takes are
        rolled back (their records stay: a restart retakes them with their ids)."""
        try:
            self._roll_back_all()
        except Exception as err:
            log.warning("sink group %s: batches in flight at the stop are rolled back by the channel's close (%s)",
                        self.name, err)
