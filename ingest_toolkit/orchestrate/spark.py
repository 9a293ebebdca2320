"""The Spark session of one orchestrator task: started only when the task needs it, stopped after.

A landing of an empty channel, or a check of a local table (read with pyarrow), never starts a
JVM; so a task gets a *start function* (:func:`task_spark`), not a session. A session already
running in the process (a test's, a long-lived worker's) is reused and left running.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..land.config import SparkSettings

__all__ = ["active_session", "task_spark"]


@contextmanager
def task_spark(settings: SparkSettings) -> Iterator[Callable[[], SparkSession]]:
    """Yield a function that returns the task's session (``settings``: ``[spark]`` of the landing
    configuration), starting it on the first call; a session this block started is stopped when
    the block ends, whether the task succeeded or not."""
    started: list[SparkSession] = []

    def session() -> SparkSession:
        from ..land.spark import spark_session

        if started:
            return started[0]
        running = active_session()
        if running is not None:  # the process's own session: reuse, keep
            return running
        started.append(spark_session(settings))
        return started[0]

    try:
        yield session
    finally:
        for owned in started:
            owned.stop()


def active_session() -> SparkSession | None:
    """The session this process already runs (a test's, a long-lived worker's), or None."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate() if SparkContext._active_spark_context is not None else None
