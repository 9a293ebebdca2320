"""Curated tables as the orchestrators run them: one hourly partition per call.

The building of a partition is :func:`ingest_toolkit.curate.curate_hour` (read the landed hours
of the window in the landing's table format, one row per ``event_id``, parse the bodies into
typed columns under the channel's contract, replace the hour atomically in the curated table's
format); this module gives the orchestrators its metadata, the hourly windows of an interval and
the UTC hour of a landed partition directory.

Re-running a partition replaces it (idempotent). Two runs of the same partition must not replace
it at once: the orchestrator runs them one at a time (Dagster: the pool ``curated-<channel>``, see
``conf/dagster.yaml``).

Which partitions a landed hour feeds depends on the zone of the partitions: in UTC one, in a
half-hour zone (Asia/Kolkata) two (:func:`hour_of_landed_dir` reads the hour of a landed
directory; the orchestrator maps it to its partitions).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pendulum

from ..curate.build import CuratedResult, curate_hour, dedupe_earliest, landed_schema, utc_hours
from ..errors import ConfigError
from ..land.storage import Location
from .verdict import PathValue

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..curate.settings import Curation
    from ..land.config import LandingConfig

__all__ = ["CuratedResult", "build_curated_partition", "curated_metadata", "dedupe_earliest", "hour_of_landed_dir",
           "hourly_windows", "landed_hour_dirs", "landed_schema", "utc_hours"]

_LANDED_DIR = re.compile(r"(?:^|/)event_date=(\d{4}-\d{2}-\d{2})/event_hour=(\d{1,2})/?$")


def curated_metadata(result: CuratedResult) -> dict[str, Any]:
    """The metadata of one curated partition, as plain values: its own rows, not a whole run's.
    The counts (rows, rescued, discarded, unparsed, columns) are numbers, which the UI plots."""
    return {"rows": result.rows, "duplicates_dropped": result.duplicates_dropped, "path": PathValue(result.path),
            "format": result.format, "parser": result.parser, "landed_hours": result.landed_hours,
            "landed_files": result.landed_files, "window_utc": f"{result.window_utc[0]} .. {result.window_utc[1]}",
            "columns": result.columns, "columns_added": result.columns_added, "rescued_rows": result.rescued_rows,
            "rescued_share": round(result.rescued_share, 6), "discarded_rows": result.discarded_rows,
            "unparsed_rows": result.unparsed_rows, "schema_created": result.schema_created}


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


def build_curated_partition(spark: SparkSession, landing: LandingConfig, curated_root: str, channel: str,
                            start: datetime, end: datetime, curation: Curation | None = None, *,
                            run_id: str = "") -> CuratedResult:
    """Build (or rebuild) the curated partition ``[start, end)`` of ``channel`` from the landed
    table of ``landing`` (:func:`ingest_toolkit.curate.curate_hour`)."""
    return curate_hour(spark, landing, curated_root, channel, start, end, curation, run_id=run_id)
