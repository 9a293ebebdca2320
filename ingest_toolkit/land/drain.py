"""Landing batch after batch until the channel is empty, with two batches in flight.

A landing run is mostly Python work (the take reads and decodes events, Arrow columns are built)
followed by JVM work (Spark writes). :func:`land_until_empty` overlaps them: while Spark writes
batch N, a second thread takes and prepares batch N+1 (plain Parquet only: a Delta or Iceberg
batch is written in this process, and its batches run one after another). Each batch is a complete
:func:`~ingest_toolkit.land.land_once` run in its own thread (a channel transaction belongs to
the thread that opened it), with its own take, manifest and commit, so the exactly-once argument
is the one of a single run. Two takes are open at once and their events are disjoint; if one
fails it rolls back alone (its events return to the head) and no further batch is started.
Recovery of earlier runs happens once, before the first batch, never while a batch of this
drain is writing.

When to stop (:class:`_Progress`) is judged on the channel's *committed backlog* (events
committed and in no open take) that each completed batch reports, never on one empty take: with
two takes in flight, one may find the queue empty because the other holds every event, while
producers commit more. The drain goes on while that backlog is above zero. Producers may keep
adding events while it runs; so that it always ends, it also stops once the backlog has not
reached a new low for ``STALLED_BATCHES`` batches in a row: it no longer gains on the producers,
and what is left is what arrived during its last batches (the next run takes it).
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TYPE_CHECKING

from .config import LandingConfig
from .landing import LandingResult, before_take, land_once
from .progress import QUIET, LandingProgress
from .source import TakeSource
from .tables import needs_spark, open_landed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["land_until_empty"]


def land_until_empty(source: TakeSource, config: LandingConfig, spark: SparkSession | None, *,
                     max_runs: int | None = None, overlap: bool = True,
                     report: LandingProgress = QUIET) -> list[LandingResult]:
    """Run landing batches until the committed backlog is zero (module docstring), or ``max_runs``
    batches ran. Nothing is taken when the channel is empty at the start.

    Results are in completion order. The first failure (a LandingError) is raised after the
    batch in flight with it has finished; batches that completed before it stay landed.
    ``overlap=False`` runs the batches one after another in this thread, and so does a Delta or
    Iceberg landing: its write runs in this process (delta-rs, PyIceberg), not in Spark's JVM, so a
    second batch only competes with it for the same two cores (measured on 200k events in batches
    of 25k: no gain, 0.8-1.1x), and two commits of one channel at once conflict: the loser writes
    its files again unless the two are serialised (``write_lock``). Every result carries the
    ``temp_files_pending`` of the one recovery. ``report`` hears of the backlog found, each
    batch's phases and each completed batch, as they happen.
    """
    pending = _recover(source.name, config, spark)
    backlog = source.backlog()
    report.backlog(backlog)
    results = _drain(source, config, spark, _Progress(max_runs, backlog), overlap, report)
    return [replace(r, temp_files_pending=pending) for r in results]


def _drain(source: TakeSource, config: LandingConfig, spark: SparkSession | None, progress: _Progress,
           overlap: bool, report: LandingProgress) -> list[LandingResult]:
    if not overlap or not needs_spark(config):
        return _sequential(source, config, spark, progress, report)
    results: list[LandingResult] = []
    write_lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="land") as pool:
        pending: dict[Future[LandingResult], int] = {}  # batch in flight -> its number
        error: Exception | None = None
        while True:
            while error is None and len(pending) < 2 and progress.more():
                progress.started += 1
                phases = functools.partial(report.batch_phase, progress.started)
                pending[pool.submit(land_once, source, config, spark, recover=False, write_lock=write_lock,
                                    on_phase=phases)] = progress.started
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                number = pending.pop(future)
                try:
                    result = future.result()
                except Exception as err:  # keep the first; let the other batch finish
                    error = error or err
                    continue
                results.append(result)
                progress.record(result)
                report.batch_done(number, result)
    if error is not None:
        raise error
    return results


STALLED_BATCHES = 2
"""Batches in a row whose backlog is not a new low after which a drain stops (module docstring)."""


class _Progress:
    """Whether a drain starts another batch: batches left, and a committed backlog that is above
    zero and still falling (module docstring). Updated as batches complete, in any order."""

    def __init__(self, max_runs: int | None, backlog: int) -> None:
        self.max_runs, self.started = max_runs, 0
        self.backlog, self.lowest, self.stalled = backlog, backlog, 0

    def more(self) -> bool:
        runs_left = self.max_runs is None or self.started < self.max_runs
        return runs_left and self.backlog > 0 and self.stalled < STALLED_BATCHES

    def record(self, result: LandingResult) -> None:
        self.backlog = result.backlog_after
        if self.backlog == 0:
            return  # nothing now; a batch still in flight may report events committed since
        if self.backlog < self.lowest:
            self.lowest, self.stalled = self.backlog, 0
        else:
            self.stalled += 1


def _recover(channel: str, config: LandingConfig, spark: SparkSession | None) -> int:
    """Recovery of earlier runs, once for the whole drain; it fails as a run's own recovery does.
    Returns the temporary files of killed commits it kept (younger than the grace period)."""
    return int(before_take(channel, "recovering earlier runs", lambda: open_landed(config, channel, spark).recover(),
                           config.root))


def _sequential(source: TakeSource, config: LandingConfig, spark: SparkSession | None,
                progress: _Progress, report: LandingProgress) -> list[LandingResult]:
    results: list[LandingResult] = []
    while progress.more():
        progress.started += 1
        phases = functools.partial(report.batch_phase, progress.started)
        results.append(land_once(source, config, spark, recover=False, on_phase=phases))
        progress.record(results[-1])
        report.batch_done(progress.started, results[-1])
    return results
