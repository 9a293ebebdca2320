"""Landing batch after batch until the channel is empty, with two batches in flight.

A landing run is mostly Python work (the take reads and decodes events, Arrow columns are built)
followed by JVM work (Spark writes). :func:`land_until_empty` overlaps them: while Spark writes
batch N, a second thread takes and prepares batch N+1. Each batch is a complete
:func:`~ingest_toolkit.land.land_once` run in its own thread (a channel transaction belongs to
the thread that opened it), with its own take, manifest and commit, so the exactly-once argument
is the one of a single run. Two takes are open at once and their events are disjoint; if one
fails it rolls back alone (its events return to the head) and no further batch is started.
Recovery of earlier runs happens once, before the first batch, never while a batch of this
drain is writing.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from .config import LandingConfig
from .landing import LandingResult, before_take, land_once, recover_channel_dir
from .source import TakeSource
from .storage import open_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["land_until_empty"]


def land_until_empty(source: TakeSource, config: LandingConfig, spark: SparkSession, *,
                     max_runs: int | None = None, overlap: bool = True) -> list[LandingResult]:
    """Run landing batches until a take comes back empty (or ``max_runs`` batches ran).

    Results are in completion order. The first failure (a LandingError) is raised after the
    batch in flight with it has finished; batches that completed before it stay landed.
    ``overlap=False`` runs the batches one after another in this thread.
    """
    _recover(source.name, config, spark)
    if not overlap:
        return _sequential(source, config, spark, max_runs)
    results: list[LandingResult] = []
    write_lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="land") as pool:
        pending: set[Future[LandingResult]] = set()
        started, more, error = 0, True, None
        while pending or (more and error is None):
            while more and error is None and len(pending) < 2 and (max_runs is None or started < max_runs):
                pending.add(pool.submit(land_once, source, config, spark, recover=False, write_lock=write_lock))
                started += 1
            if max_runs is not None and started >= max_runs:
                more = False
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                try:
                    result = future.result()
                except Exception as err:  # keep the first; let the other batch finish
                    error = error or err
                    continue
                results.append(result)
                more = more and result.taken > 0 and result.backlog_after > 0
    if error is not None:
        raise error
    return results


def _recover(channel: str, config: LandingConfig, spark: SparkSession) -> None:
    """Recovery of earlier runs, once for the whole drain; it fails as a run's own recovery does."""
    store = open_storage(config.root, config.storage, spark)
    before_take(channel, "recovering earlier runs",
                lambda: recover_channel_dir(store, channel, config.staging_grace_seconds), config.root)


def _sequential(source: TakeSource, config: LandingConfig, spark: SparkSession,
                max_runs: int | None) -> list[LandingResult]:
    results: list[LandingResult] = []
    while max_runs is None or len(results) < max_runs:
        results.append(land_once(source, config, spark, recover=False))
        if results[-1].taken == 0 or results[-1].backlog_after == 0:
            break
    return results
