"""One landing run: take -> recognise -> write and commit to the table -> take commit.

Protocol (docs/landing.md has the crash table of each table format):

1. *Recover* the table: what crashed runs left (plain Parquet: a staging directory whose manifest
   exists is rolled forward, one without is deleted once idle for ``staging_grace_seconds``;
   Delta and Iceberg commit atomically and leave nothing to finish).
2. *Take* up to ``max_events`` in one take transaction.
3. *Recognise* redelivered events: seqs of this channel that the table holds already are dropped
   from the batch (they were landed by a run whose take did not commit).
4. *Write and commit* the rest as one table commit (:mod:`.tables`: a manifest for plain
   Parquet, a Delta commit with the channel's app transaction, an Iceberg snapshot). The table
   is checked again at commit time: a commit that another run made meanwhile with some of the
   same seqs makes this one fail with CommitConflict, and nothing is published.
5. *Commit* the take.

Any failure before 5 rolls the take back. The invariants that make every crash safe: a batch is
visible to readers only once its table commit is durable; a table commit holds only seqs that no
earlier commit of the channel holds; and both happen before the take is committed.
"""

from __future__ import annotations

import gc
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from ..handoff import take_within_capacity
from .batches import build_table, landed_mask, seq_array, seq_ranges
from .config import LandingConfig
from .diagnose import summarize
from .errors import CommitConflict, LandingError
from .faults import fault_point
from .hadoop_errors import describe_failure
from .publish import finish_moves, recover_channel_dir
from .source import TakeBatch, TakeSource
from .tables import Batch, Committed, LandedTable, open_landed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["LandingResult", "finish_moves", "land_once", "recover_channel_dir"]

log = logging.getLogger(__name__)
_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class LandingResult:
    """What one run did. ``events``: rows written by this run; ``redelivered``: taken events
    recognised as landed by an earlier run (not written again); ``taken`` = both.
    ``partitions``: the ``event_date=D/event_hour=H`` partitions holding the taken events, those
    written by earlier runs (redelivered) included: what a downstream build must refresh.
    ``format``, ``table_uri``, ``table_version`` (Delta version, Iceberg snapshot id, Parquet
    commit number) and ``batch_number`` (the channel's batch number in the table) say where the
    batch was committed; ``manifest_uri`` is the batch's manifest (plain Parquet only).
    ``temp_files_pending``: temporary files of killed commits that recovery found and kept,
    being younger than ``staging_grace_seconds`` (a later run's recovery removes them)."""

    channel: str
    events: int
    redelivered: int
    taken: int
    files: int
    bytes: int
    batch_id: str | None
    duration_s: float
    backlog_after: int
    manifest_uri: str | None
    partitions: tuple[str, ...] = ()
    format: str = "parquet"
    table_uri: str | None = None
    table_version: int | None = None
    batch_number: int | None = None
    temp_files_pending: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Written:
    events: int = 0
    redelivered: int = 0
    committed: Committed | None = None
    partitions: tuple[str, ...] = ()
    batch_id: str | None = None


def land_once(source: TakeSource, config: LandingConfig, spark: SparkSession | None, *, recover: bool = True,
              write_lock: AbstractContextManager[Any] | None = None,
              on_phase: Callable[[str, int], None] | None = None) -> LandingResult:
    """Land one take transaction of ``source`` into the table of ``config.root`` and
    ``config.format``; see the module docstring. ``spark``: the session plain Parquet is written
    with (None for Delta and Iceberg, which need none).

    Raises LandingError (the take rolled back, retrying is safe) on any failure. ``recover=False``
    and ``write_lock`` are for :func:`~ingest_toolkit.land.drain.land_until_empty`, which runs
    batches in two threads: it recovers once up front, and lets one Spark write run at a time.
    ``on_phase(phase, taken)`` is told each phase the run enters (the progress ``land`` shows).
    """
    started = time.monotonic()
    channel = _checked_name(source.name)
    run = _Run(channel, config, on_phase)
    run.table = run.guard("opening the table", lambda: open_landed(config, channel, spark, write_lock))
    pending = run.guard("recovering earlier runs", run.table.recover) if recover else 0
    with _gc_paused():
        take = run.guard("taking events", lambda: _open_take(source, config.max_events))
    run.taken = len(take.columns)
    try:
        fault_point("after_take")
        with _gc_paused(), _lease_kept(take, config.lease_renewal_max_seconds):
            written = run.land(take, config)
    except BaseException as err:
        rollback_error = _rollback(take)
        if not isinstance(err, Exception):
            raise
        failure = CommitConflict if isinstance(err, CommitConflict) else LandingError
        raise failure(f"landing channel {channel!r} failed while {run.phase}: {describe_failure(err, config.root)}. "
                      + _after_rollback(take, rollback_error) + "Fix the cause and run again.",
                      channel=channel, phase=run.phase, rolled_back=rollback_error is None) from err
    run.phase = "committing the take"
    try:
        take.commit()
    except Exception as err:
        where = written.committed.uri if written.committed else run.table.uri
        raise LandingError(f"channel {channel!r}: the batch is landed ({where}) but committing the take failed: "
                           f"{err}. The events stay in the channel; the next run recognises them as landed and "
                           "only commits", channel=channel, phase="commit", rolled_back=False) from err
    fault_point("after_commit")
    return replace(_result(channel, take, written, time.monotonic() - started, source.backlog(), run.table),
                   temp_files_pending=pending)


class _Run:
    def __init__(self, channel: str, config: LandingConfig, on_phase: Callable[[str, int], None] | None) -> None:
        self.channel, self.config, self._on_phase = channel, config, on_phase
        self._phase, self.taken = "starting", 0
        self.table: LandedTable

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, phase: str) -> None:
        """Every phase change is told to ``on_phase``; a failure there must not fail the batch."""
        self._phase = phase
        if self._on_phase is not None:
            try:
                self._on_phase(phase, self.taken)
            except Exception:
                log.exception("the progress display failed; the landing goes on")

    def guard(self, phase: str, step: Any) -> Any:
        self.phase = phase
        return before_take(self.channel, phase, step, self.config.root)

    def set_phase(self, phase: str) -> None:
        self.phase = phase

    def land(self, take: TakeBatch, config: LandingConfig) -> _Written:
        columns = take.columns
        if not len(columns):
            return _Written()
        self.phase = "recognising redelivered events"
        seqs = seq_array(columns)
        bounds = pc.min_max(seqs).as_py()
        landed = self.table.landed(take.channel_id, bounds["min"], bounds["max"])
        keep = None
        redelivered = 0
        if landed.ranges:
            mask = landed_mask(seqs, landed.ranges)
            redelivered = int(pc.sum(mask).as_py() or 0)
            if redelivered == len(columns):
                return _Written(redelivered=redelivered, partitions=landed.partitions)
            keep = pc.invert(mask) if redelivered else None
        self.phase = "building the Arrow table"
        batch_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)
        table = build_table(columns, channel_id=take.channel_id, batch_id=batch_id,
                            ingest_time_us=time.time_ns() // 1000)
        if keep is not None:
            table = table.filter(keep)
        batch = Batch(self.channel, take.channel_id, batch_id, table,
                      tuple(seq_ranges(table.column("seq").combine_chunks())))
        committed = self.table.commit(batch, landed, phase=self.set_phase, before_commit=lambda: _confirm_lease(take))
        fault_point("before_commit")
        partitions = tuple(sorted({*committed.partitions, *(landed.partitions if redelivered else ())}))
        return _Written(table.num_rows, redelivered, committed, partitions, batch_id)


def before_take(channel: str, phase: str, step: Any, root: str = "") -> Any:
    """Run ``step``, a step before anything is taken; its failure is a LandingError saying so
    (one line: a JVM failure under ``root`` is described, not dumped as a stack trace)."""
    try:
        return step()
    except Exception as err:
        raise LandingError(f"landing channel {channel!r} failed while {phase}: {describe_failure(err, root)}; "
                           "nothing was taken",
                           channel=channel, phase=phase, rolled_back=True) from err


def _lease(take: TakeBatch) -> tuple[Any, float] | None:
    """``(extend, lease seconds)`` of a leased take (a remote one), None for any other."""
    extend = getattr(take, "extend", None)
    lease = float(getattr(take, "lease_seconds", 0.0) or 0.0)
    return (extend, lease) if extend is not None and lease > 0 else None


def _confirm_lease(take: TakeBatch) -> None:
    """A leased take is renewed once more before its batch is committed: a take that is already
    gone (its events may be landing elsewhere) fails the run here, before anything is published.
    Correctness does not depend on it (the commit log refuses overlapping commits); it spares
    the table a batch whose take can no longer commit."""
    leased = _lease(take)
    if leased is not None:
        leased[0]()


_gc_lock = threading.Lock()
_gc_pause: dict[str, Any] = {"depth": 0, "was_enabled": True}


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a batch's objects are built: a take creates hundreds
    of thousands of events (each with a headers dict) in one go, and every generation-2 pass
    over them is wasted (they are all alive). Nested and concurrent batches share one pause;
    the collector's previous state comes back when the last one ends."""
    with _gc_lock:
        if _gc_pause["depth"] == 0:
            _gc_pause["was_enabled"] = gc.isenabled()
            gc.disable()
        _gc_pause["depth"] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pause["depth"] -= 1
            if _gc_pause["depth"] == 0 and _gc_pause["was_enabled"]:
                gc.enable()


@contextmanager
def _lease_kept(take: TakeBatch, max_seconds: float) -> Iterator[None]:
    """Renew a leased take (one with ``extend`` and ``lease_seconds``: a remote take) every third
    of its lease while the body runs, for at most ``max_seconds`` in all.

    A renewal that fails (the agent restarting, a network blip) is retried every few seconds
    until the lease it had would have run out; after that the take is gone, the run fails when
    it confirms the lease before its manifest commit, and the batch is delivered again."""
    leased = _lease(take)
    if leased is None or max_seconds <= 0:
        yield
        return
    extend, lease = leased
    stop = threading.Event()
    keeper = threading.Thread(target=_renew, args=(extend, lease, max_seconds, stop), name="lease-keeper",
                              daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()


def _renew(extend: Any, lease: float, max_seconds: float, stop: threading.Event) -> None:
    now = time.monotonic()
    give_up, held_until = now + max_seconds, now + lease
    wait = lease / 3
    while not stop.wait(wait) and time.monotonic() < give_up:
        asked = time.monotonic()
        try:
            extend()
        except Exception as err:
            if time.monotonic() >= held_until:
                log.warning("renewing the lease of a take failed (%s) and the lease has run out; the batch will "
                            "fail before its commit and be delivered again", err)
                return
            log.warning("renewing the lease of a take failed (%s); retrying", err)
            wait = min(lease / 10, 5.0)
            continue
        held_until, wait = asked + lease, lease / 3


def _open_take(source: TakeSource, max_events: int) -> TakeBatch:
    """Open the take; a channel whose ``transaction_capacity`` is below ``max_events`` (a remote
    one: the landing cannot know it beforehand) is asked again for what it allows."""
    return take_within_capacity(source.open_take, max_events)


def _rollback(take: TakeBatch) -> Exception | None:
    """Roll ``take`` back; the error if that failed too."""
    try:
        take.rollback()
    except Exception as err:
        return err
    return None


def _after_rollback(take: TakeBatch, error: Exception | None) -> str:
    """What became of the taken events, true whether the channel's owner is alive or not: a take
    is only gone once committed, so a take that could not be rolled back comes back by itself."""
    if error is None:
        return "The take was rolled back; the events are still in the channel. "
    if _lease(take) is not None:
        return (f"Rolling the take back failed too ({summarize(error)}); nothing is lost: a running agent rolls "
                "the take back when its lease ends, and an agent that died puts the events back in the queue "
                "when it restarts (its recovery rolls back every take that was not committed). ")
    return (f"Rolling the take back failed too ({summarize(error)}); nothing is lost: the take was not "
            "committed, so the events are back in the queue when the channel is opened again (recovery rolls "
            "back every take that was not committed). ")


def _checked_name(name: str) -> str:
    if not _CHANNEL_NAME.match(name):
        raise LandingError(f"channel name {name!r} cannot be a directory name (letters, digits, '_', '.', '-')",
                           channel=name, phase="starting", rolled_back=True)
    return name


def _result(channel: str, take: TakeBatch, written: _Written, duration: float, backlog: int,
            table: LandedTable) -> LandingResult:
    committed = written.committed
    return LandingResult(channel=channel, events=written.events, redelivered=written.redelivered,
                         taken=len(take.columns), files=committed.files if committed else 0,
                         bytes=committed.bytes if committed else 0, batch_id=written.batch_id,
                         duration_s=round(duration, 3), backlog_after=backlog,
                         manifest_uri=committed.uri if committed and table.format == "parquet" else None,
                         partitions=written.partitions, format=table.format, table_uri=table.uri,
                         table_version=committed.version if committed else None,
                         batch_number=committed.batch_number if committed else None)
