"""One landing run: take -> Parquet in staging -> manifest commit -> moves -> take commit.

Protocol (docs/landing.md has the crash table):

1. *Recover* the channel's landing directory: a staging directory whose manifest exists is a
   batch that was committed but not fully moved: finish the moves (roll forward). One without a
   manifest is a failed run's leftover: delete it once idle for ``staging_grace_seconds``.
2. *Take* up to ``max_events`` in one take transaction.
3. *Recognise* redelivered events: seqs that a committed manifest of this channel identity
   holds are dropped from the batch (they are in the table already).
4. *Write* the rest with Spark to ``<channel>/_staging/<batch id>/`` (Spark's job commit), check
   that the staged footers hold exactly the batch's rows, and sync the files.
5. *Commit the manifest* as the next number of the channel's commit log (an exclusive create,
   :class:`~ingest_toolkit.land.manifest.ManifestLog`): the commit point of the landed table. A
   commit that another run made meanwhile with some of the same seqs makes this one fail with
   CommitConflict, and nothing is published.
6. *Move* each file to its final name (idempotent, never replacing a file), sync, delete the
   staging directory.
7. *Commit* the take.

Any failure before 7 rolls the take back. The invariants that make every crash safe: a file
reaches a partition directory only after a manifest naming it is committed; a manifest commits
only seqs that no earlier manifest holds; and both are durable before the take is committed.
"""

from __future__ import annotations

import gc
import logging
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..handoff import take_within_capacity
from .batches import build_table, landed_mask, seq_array, seq_ranges
from .config import LandingConfig
from .diagnose import summarize
from .errors import CommitConflict, LandingError
from .faults import fault_during, fault_point
from .hadoop_errors import describe_failure
from .manifest import Manifest, ManifestFile, ManifestLog
from .publish import STAGING_DIR, finish_moves, recover_channel_dir, staged_files
from .source import TakeBatch, TakeSource
from .spark import write_parquet
from .storage import Storage, open_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["LandingResult", "finish_moves", "land_once", "recover_channel_dir"]

log = logging.getLogger(__name__)
_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class LandingResult:
    """What one run did. ``events``: rows written by this run; ``redelivered``: taken events
    recognised as landed by an earlier run (not written again); ``taken`` = both.
    ``partitions``: the ``event_date=D/event_hour=H`` directories holding the taken events, those
    written by earlier runs (redelivered) included: what a downstream build must refresh."""

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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Written:
    events: int = 0
    redelivered: int = 0
    manifest: Manifest | None = None
    manifest_uri: str | None = None
    partitions: tuple[str, ...] = ()


def land_once(source: TakeSource, config: LandingConfig, spark: SparkSession, *, recover: bool = True,
              write_lock: AbstractContextManager[Any] | None = None) -> LandingResult:
    """Land one take transaction of ``source`` under ``config.root``; see the module docstring.

    Raises LandingError (the take rolled back, retrying is safe) on any failure. ``recover=False``
    and ``write_lock`` are for :func:`~ingest_toolkit.land.drain.land_until_empty`, which runs
    batches in two threads: it recovers once up front, and lets one Spark write run at a time.
    """
    started = time.monotonic()
    channel = _checked_name(source.name)
    run = _Run(channel, open_storage(config.root, config.storage, spark), write_lock)
    if recover:
        run.guard("recovering earlier runs",
                  lambda: recover_channel_dir(run.store, channel, config.staging_grace_seconds))
    with _gc_paused():
        take = run.guard("taking events", lambda: _open_take(source, config.max_events))
    try:
        fault_point("after_take")
        with _gc_paused(), _lease_kept(take, config.lease_renewal_max_seconds):
            written = run.land(take, config, spark)
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
        raise LandingError(f"channel {channel!r}: the batch is landed (manifest {written.manifest_uri}) but "
                           f"committing the take failed: {err}. The events stay in the channel; the next run "
                           "recognises them as landed and only commits", channel=channel, phase="commit",
                           rolled_back=False) from err
    fault_point("after_commit")
    return _result(channel, take, written, time.monotonic() - started, source.backlog())


class _Run:
    def __init__(self, channel: str, store: Storage, write_lock: AbstractContextManager[Any] | None) -> None:
        self.channel, self.store, self.phase = channel, store, "starting"
        self.write_lock = write_lock or nullcontext()

    def guard(self, phase: str, step: Any) -> Any:
        self.phase = phase
        return before_take(self.channel, phase, step, self.store.root)

    def land(self, take: TakeBatch, config: LandingConfig, spark: SparkSession) -> _Written:
        columns = take.columns
        if not len(columns):
            return _Written()
        self.phase = "recognising redelivered events"
        seqs = seq_array(columns)
        bounds = pc.min_max(seqs).as_py()
        landed = ManifestLog(self.store, self.channel).landed(take.channel_id, bounds["min"], bounds["max"])
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
        manifest, uri = self._write(table, take, batch_id, config, spark, landed.newest)
        partitions = tuple(sorted({*manifest.partitions, *(landed.partitions if redelivered else ())}))
        return _Written(table.num_rows, redelivered, manifest, uri, partitions)

    def _write(self, table: pa.Table, take: TakeBatch, batch_id: str, config: LandingConfig,
               spark: SparkSession, newest: int) -> tuple[Manifest, str]:
        staging = f"{self.channel}/{STAGING_DIR}/{batch_id}"
        self.phase = "writing Parquet with Spark"
        with self.write_lock, fault_during("during_write", lambda: self.store.exists(f"{staging}/_temporary")):
            write_parquet(spark, table, self.store.uri(staging), config)
        fault_point("after_write")
        self.phase = "checking Spark's output"
        files = staged_files(self.store, self.channel, batch_id, table.num_rows)
        draft = Manifest(channel=self.channel, channel_id=take.channel_id.hex(), batch_id=batch_id,
                         seq_ranges=tuple(seq_ranges(table.column("seq").combine_chunks())),
                         count=table.num_rows, files=files, partitions=_partitions(files),
                         created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.phase = "confirming the take's lease"
        _confirm_lease(take)
        self.phase = "committing the manifest"
        try:
            manifest = ManifestLog(self.store, self.channel).commit(draft, newest)
        except CommitConflict:
            self.store.delete(staging)
            raise
        fault_point("after_manifest")
        self.phase = "moving files into the partitions"
        finish_moves(self.store, self.channel, manifest)
        fault_point("before_commit")
        return manifest, ManifestLog(self.store, self.channel).uri(manifest)


def before_take(channel: str, phase: str, step: Any, root: str = "") -> Any:
    """Run ``step``, a step before anything is taken; its failure is a LandingError saying so
    (one line: a JVM failure under ``root`` is described, not dumped as a stack trace)."""
    try:
        return step()
    except Exception as err:
        raise LandingError(f"landing channel {channel!r} failed while {phase}: {describe_failure(err, root)}; "
                           "nothing was taken",
                           channel=channel, phase=phase, rolled_back=True) from err


def _partitions(files: tuple[ManifestFile, ...]) -> tuple[str, ...]:
    return tuple(sorted({f.path.rpartition("/")[0] for f in files if "/" in f.path}))


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


def _result(channel: str, take: TakeBatch, written: _Written, duration: float, backlog: int) -> LandingResult:
    manifest = written.manifest
    return LandingResult(channel=channel, events=written.events, redelivered=written.redelivered,
                         taken=len(take.columns), files=len(manifest.files) if manifest else 0,
                         bytes=manifest.bytes if manifest else 0, batch_id=manifest.batch_id if manifest else None,
                         duration_s=round(duration, 3), backlog_after=backlog, manifest_uri=written.manifest_uri,
                         partitions=written.partitions)
