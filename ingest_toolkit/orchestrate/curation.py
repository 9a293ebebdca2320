"""Curated tables: one hourly partition at a time, built with Spark from the landed Parquet.

A partition ``[start, end)`` (in the partitions' time zone, UTC by default) reads the landed
hour directories that cover it (``<landed>/<channel>/event_date=D/event_hour=H``, UTC), keeps
the rows whose ``event_time`` falls in the window, keeps one row per ``event_id`` (the landing is
exactly-once, but the curated table must not depend on it; of duplicates the earliest landed one
survives: smallest ``ingest_time``, then ``batch_id``, so a rebuild keeps the same row), and
replaces
``<curated>/<channel>/event_date=D/event_hour=H`` (the UTC start hour) as a whole:

1. Spark writes the partition to ``<curated>/<channel>/_staging/<hour>-<uuid>``;
2. the old partition directory, if any, is renamed into ``_trash``, the staging directory
   renamed into its place, and the old one deleted.

Re-running a partition therefore replaces it (idempotent) and a failed run leaves the previous
version or, after a crash between the two renames, no directory: the next run rebuilds it. An
hour with no landed data produces an empty partition (a directory with no rows), not an error.

Two runs of the same partition must not swap at once (the second rename could meet the first's
directory): the orchestrator runs them one at a time (Dagster: the pool ``curated-<channel>``, see
``conf/dagster.yaml``).

Which partitions a landed hour feeds depends on the zone of the partitions: in UTC one, in a
half-hour zone (Asia/Kolkata) two (:func:`hour_of_landed_dir` reads the hour of a landed
directory; the orchestrator maps it to its partitions).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pendulum

from ..errors import ConfigError
from ..land.storage import Location, locate
from .verdict import PathValue

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["CuratedResult", "build_curated_partition", "curated_metadata", "dedupe_earliest", "hour_of_landed_dir",
           "hourly_windows", "landed_hour_dirs", "landed_schema", "utc_hours"]

_PARTITION_COLUMNS = ("event_date", "event_hour")
_LANDED_DIR = re.compile(r"(?:^|/)event_date=(\d{4}-\d{2}-\d{2})/event_hour=(\d{1,2})/?$")


@dataclass(frozen=True, slots=True)
class CuratedResult:
    path: str
    rows: int
    duplicates_dropped: int
    source_dirs: list[str]
    window_utc: tuple[str, str]


def curated_metadata(result: CuratedResult) -> dict[str, Any]:
    """The metadata of one curated partition, as plain values: its own rows, not a whole run's."""
    return {"rows": result.rows, "duplicates_dropped": result.duplicates_dropped, "path": PathValue(result.path),
            "landed_dirs": result.source_dirs, "window_utc": f"{result.window_utc[0]} .. {result.window_utc[1]}"}


def landed_schema() -> StructType:
    """Columns of the landed table (the landing contract), used when an hour has no files."""
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType([
        StructField("event_id", StringType(), False), StructField("batch_id", StringType(), True),
        StructField("event_time", TimestampType(), True), StructField("ingest_time", TimestampType(), True),
        StructField("headers", MapType(StringType(), StringType()), True), StructField("body", BinaryType(), True),
        StructField("seq", LongType(), True)])


def utc_hours(start: datetime, end: datetime) -> list[pendulum.DateTime]:
    """The UTC hours that overlap ``[start, end)`` (several for a partition in a half-hour zone)."""
    first = pendulum.instance(start).in_timezone("UTC").start_of("hour")
    last = pendulum.instance(end).in_timezone("UTC")
    hours = []
    while first < last:
        hours.append(first)
        first = first.add(hours=1)
    return hours


def hourly_windows(start: datetime, end: datetime) -> list[tuple[pendulum.DateTime, pendulum.DateTime]]:
    """The curated partitions of an orchestrator's interval ``[start, end)``: one hour each, from
    ``start`` on (an hourly run: one; a daily run or a backfill's range: every hour of it).

    An empty interval, or one that is not a whole number of hours, is a ConfigError: the
    partitions would overlap or leave gaps (Airflow: schedule with a data-interval timetable)."""
    first, last = pendulum.instance(start), pendulum.instance(end)
    seconds = (last - first).total_seconds()
    if seconds <= 0 or seconds % 3600:
        raise ConfigError(f"the interval {first.isoformat()} .. {last.isoformat()} is not a whole number of hours "
                          "(curated partitions are hourly): schedule the curation with an hourly data interval "
                          "(e.g. CronDataIntervalTimetable('0 * * * *'))", key="schedule")
    return [(first.add(hours=n), first.add(hours=n + 1)) for n in range(int(seconds // 3600))]


def landed_hour_dirs(table: Location, hours: list[pendulum.DateTime]) -> list[Location]:
    """The existing landed directories of ``hours`` (``event_hour=08`` or ``event_hour=8``)."""
    found = []
    for hour in hours:
        day = table.child(f"event_date={hour.format('YYYY-MM-DD')}")
        for name in (f"event_hour={hour.hour:02d}", f"event_hour={hour.hour}"):
            if day.child(name).is_dir():
                found.append(day.child(name))
                break
    return found


def hour_of_landed_dir(name: str) -> pendulum.DateTime | None:
    """The UTC hour of a landed partition directory (``event_date=2026-11-20/event_hour=08``, as
    a landing manifest lists them); None for anything else (e.g. Spark's directory of null dates)."""
    match = _LANDED_DIR.search(name)
    if match is None or int(match.group(2)) > 23:
        return None
    day = pendulum.parse(match.group(1), tz="UTC")
    assert isinstance(day, pendulum.DateTime)
    return day.add(hours=int(match.group(2)))


def dedupe_earliest(frame: DataFrame) -> DataFrame:
    """One row per ``event_id``: the earliest landed (``ingest_time``, then ``batch_id``).

    ``dropDuplicates`` keeps whichever row Spark meets first, which depends on file order and
    task scheduling; a rebuild must keep the same row.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("event_id").orderBy(F.col("ingest_time").asc_nulls_last(),
                                                   F.col("batch_id").asc_nulls_last())
    return frame.withColumn("_rank", F.row_number().over(order)).where(F.col("_rank") == 1).drop("_rank")


def _read_window(spark: SparkSession, table: Location, dirs: list[Location], start: datetime,
                 end: datetime) -> DataFrame:
    from pyspark.sql import functions as F

    if not dirs:
        return spark.createDataFrame([], landed_schema())
    frame = spark.read.option("basePath", table.uri).parquet(*(d.uri for d in dirs))
    frame = frame.drop(*[c for c in _PARTITION_COLUMNS if c in frame.columns])
    # Compare instants as microseconds since the epoch: independent of the session time zone.
    start_us, end_us = _epoch_us(start), _epoch_us(end)
    micros = F.unix_micros(F.col("event_time"))
    return frame.where((micros >= F.lit(start_us)) & (micros < F.lit(end_us)))


def _epoch_us(moment: datetime) -> int:
    instant = pendulum.instance(moment)
    return int(instant.timestamp()) * 1_000_000 + instant.microsecond


def build_curated_partition(spark: SparkSession, landed_root: str, curated_root: str, channel: str,
                            start: datetime, end: datetime) -> CuratedResult:
    """Build (or rebuild) the curated partition ``[start, end)`` of ``channel``."""
    hours = utc_hours(start, end)
    landed = locate(landed_root, spark).child(channel)
    dirs = landed_hour_dirs(landed, hours)
    frame = _read_window(spark, landed, dirs, start, end)
    frame = frame.persist()
    try:
        total = frame.count()
        curated = dedupe_earliest(frame).orderBy("event_time", "event_id")
        table = locate(curated_root, spark).child(channel)
        target = table.child(f"event_date={hours[0].format('YYYY-MM-DD')}", f"event_hour={hours[0].hour:02d}")
        staging = table.child("_staging", f"{hours[0].format('YYYY-MM-DD-HH')}-{uuid.uuid4().hex}")
        rows = curated.count()
        try:
            curated.coalesce(1).write.mode("error").parquet(staging.uri)
        except BaseException:
            if staging.exists():  # a failed write leaves no staging directory behind
                staging.fs.delete_dir(staging.path)
            raise
    finally:
        frame.unpersist()
    _swap(table, staging, target)
    window = (pendulum.instance(start).in_timezone("UTC").isoformat(),
              pendulum.instance(end).in_timezone("UTC").isoformat())
    return CuratedResult(target.uri, rows, total - rows, [d.uri for d in dirs], window)


def _swap(table: Location, staging: Location, target: Location) -> None:
    """Put ``staging`` where ``target`` is: two renames, the old version deleted afterwards."""
    fs = table.fs
    trash = table.child("_trash", uuid.uuid4().hex)
    fs.create_dir(target.path.rsplit("/", 1)[0], recursive=True)
    moved_old = False
    if target.exists():
        fs.create_dir(table.child("_trash").path, recursive=True)
        fs.move(target.path, trash.path)
        moved_old = True
    fs.move(staging.path, target.path)
    if moved_old:
        fs.delete_dir(trash.path)
