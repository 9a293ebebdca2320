"""Checks of the curated tables: every landed hour curated, schema health, no duplicate events.

* ``curated_covers_landed`` (ERROR): no landed hour lies before the first curated partition (such
  an hour is never curated: the partitions do not reach it). It names the hours and the events in
  them, and the ``partitions_start`` that would cover them.
* ``curated_schema_drift`` (WARN): the hours built by this run added no column to an existing
  table (the build that creates the table adds its first columns: that is not drift).
* ``curated_rescued_below_threshold`` (ERROR): the rows with rescued data (values that did not fit
  their column, fields a contract kept out, bodies that did not parse) stay at or below
  ``rescued_max_share`` of the rows, in every hour built by this run.
* ``curated_rows_discarded`` (WARN): no row of the hours built by this run was dropped by a
  ``discard_row`` contract.
* ``curated_no_duplicate_event_ids`` (ERROR): every ``event_id`` once, over the table's current
  files in its format.

The three about this run judge the metadata of the hours it built (:func:`ingest_toolkit.orchestrate
.curation.curated_metadata`: the Dagster materializations of the run, the XCom of the Airflow
task that built them); a run of the checks alone judges the latest builds instead (Dagster: of the
most recently built partitions), which its ``scope`` names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pendulum

from ..curate.build import open_curated
from ..curate.source import landed_source
from .settings import ChannelSpec, OrchestrationSettings
from .table_checks import duplicates_verdict
from .table_scan import scan_event_ids
from .verdict import PathValue, Verdict, verdict

if TYPE_CHECKING:
    from ..land.config import LandingConfig

__all__ = ["curated_covers_landed", "curated_no_duplicate_event_ids", "curated_rescued_below_threshold",
           "curated_rows_discarded", "curated_schema_drift"]

StartSpark = Callable[[], Any]
Built = Sequence[Mapping[str, Any]]  # the metadata of each hour a run built
_SHOWN = 12


def _session(root: str, start_spark: StartSpark) -> Any:
    from ..land.storage import local_path

    return None if "://" not in root or local_path(root) is not None else start_spark()


def _hours_text(counts: Mapping[str, int]) -> str:
    shown = [f"{hour} ({events} events)" for hour, events in list(counts.items())[:_SHOWN]]
    more = len(counts) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def curated_covers_landed(spec: ChannelSpec, settings: OrchestrationSettings, landing: LandingConfig,
                          first_partition: datetime, start_spark: StartSpark) -> Verdict:
    """No landed hour of ``spec`` lies before ``first_partition`` (the start of the curated
    partitions: Dagster's partitions_start, an Airflow DAG's start_date)."""
    first = pendulum.instance(first_partition).in_timezone("UTC")
    source = landed_source(landing, spec.name, _session(landing.root, start_spark))
    hours = source.hours()
    early = {key: entry.events for key, entry in hours.items() if entry.hour.add(hours=1) <= first}
    metadata: dict[str, Any] = {"landed_hours": len(hours), "first_partition_utc": first.isoformat(),
                                "hours_before_first_partition": len(early),
                                "events_before_first_partition": sum(early.values()),
                                "table": PathValue(source.uri)}
    if not early:
        return verdict("curated_covers_landed", settings, passed=True, metadata=metadata,
                       description=f"channel {spec.name}: all {len(hours)} landed hours are at or after the first "
                                   f"curated partition ({first.isoformat()})")
    earliest = min(hours[key].hour for key in early).in_timezone(settings.timezone)
    metadata["sample_hours"] = dict(list(early.items())[:_SHOWN])
    return verdict(
        "curated_covers_landed", settings, passed=False, metadata=metadata,
        description=f"channel {spec.name}: {len(early)} landed hours (UTC) before the first curated partition "
                    f"{first.isoformat()} hold {sum(early.values())} events that are never curated: "
                    f"{_hours_text(early)}. Set partitions_start = \"{earliest.format('YYYY-MM-DD-HH:mm')}\" (or "
                    "reload the code location: partitions_start = auto starts at the earliest landed hour), then "
                    "backfill those hours")


def curated_schema_drift(spec: ChannelSpec, settings: OrchestrationSettings, built: Built,
                         scope: str = "built by this run") -> Verdict:
    """The hours ``built`` added no column to an existing table (WARN otherwise: new fields are new
    columns)."""
    added = {str(hour.get("window_utc", "?")): list(hour.get("columns_added") or []) for hour in built
             if not hour.get("schema_created")}
    added = {hour: columns for hour, columns in added.items() if columns}
    columns = sorted({c for cs in added.values() for c in cs})
    metadata: dict[str, Any] = {"hours_built": len(built), "columns_added": len(columns),
                                "new_columns": columns, "columns": max((int(h.get("columns", 0)) for h in built),
                                                                       default=0)}
    if not columns:
        return verdict("curated_schema_drift", settings, passed=True, metadata=metadata,
                       description=f"channel {spec.name}: the {len(built)} hours {scope} added no column to the "
                                   "table")
    first = next(iter(added))
    return verdict("curated_schema_drift", settings, passed=False, metadata=metadata,
                   description=f"channel {spec.name}: the hours {scope} added {len(columns)} columns: "
                               f"{', '.join(columns)} "
                               f"(first in hour {first}); the table's schema history records the run and batches "
                               "that brought them")


def curated_rescued_below_threshold(spec: ChannelSpec, settings: OrchestrationSettings, built: Built,
                                    scope: str = "built by this run") -> Verdict:
    """In every hour ``built``, rows with rescued data <= ``rescued_max_share`` of its rows."""
    limit = settings.curated.for_channel(spec.name).rescued_max_share
    over: dict[str, tuple[int, int, int]] = {}
    rescued = rows = unparsed = 0
    for hour in built:
        hour_rows, hour_rescued = int(hour.get("rows", 0)), int(hour.get("rescued_rows", 0))
        hour_unparsed = int(hour.get("unparsed_rows", 0))
        rows, rescued, unparsed = rows + hour_rows, rescued + hour_rescued, unparsed + hour_unparsed
        if hour_rows and hour_rescued / hour_rows > limit:
            over[str(hour.get("window_utc", "?"))] = (hour_rescued, hour_rows, hour_unparsed)
    metadata: dict[str, Any] = {"hours_built": len(built), "rows": rows, "rescued_rows": rescued,
                                "unparsed_rows": unparsed, "rescued_share": round(rescued / rows, 6) if rows else 0.0,
                                "rescued_max_share": limit, "hours_over": len(over)}
    if not over:
        return verdict("curated_rescued_below_threshold", settings, passed=True, metadata=metadata,
                       description=f"channel {spec.name}: {rescued} of {rows} rows have rescued data, within "
                                   f"{limit:.2%} in each of the {len(built)} hours {scope}")
    worst_hour, (worst, of, bad_bodies) = max(over.items(), key=lambda kv: kv[1][0] / kv[1][1])
    why = (f"; {bad_bodies} bodies did not parse with parser \"{_parser_of(built)}\": set the channel's curated "
           "parser (json, logfmt, regex or none)" if bad_bodies else
           "; look at _rescued_data of those rows: a producer changed a field's type, or the contract keeps "
           "fields out")
    return verdict("curated_rescued_below_threshold", settings, passed=False, metadata=metadata,
                   description=f"channel {spec.name}: {len(over)} hours {scope} have more than {limit:.2%} of their "
                               f"rows with rescued data, the worst {worst_hour}: {worst} of {of} rows{why}")


def _parser_of(built: Built) -> str:
    return str(next((hour.get("parser") for hour in built if hour.get("parser")), "json"))


def curated_rows_discarded(spec: ChannelSpec, settings: OrchestrationSettings, built: Built,
                           scope: str = "built by this run") -> Verdict:
    """No row of the hours ``built`` was dropped by a ``discard_row`` contract (WARN)."""
    dropped = {str(hour.get("window_utc", "?")): int(hour.get("discarded_rows", 0)) for hour in built}
    dropped = {hour: n for hour, n in dropped.items() if n}
    total = sum(dropped.values())
    metadata: dict[str, Any] = {"hours_built": len(built), "discarded_rows": total, "hours_with_discards": len(dropped)}
    if not total:
        return verdict("curated_rows_discarded", settings, passed=True, metadata=metadata,
                       description=f"channel {spec.name}: the contract discarded no row in the {len(built)} hours "
                                   f"{scope}")
    return verdict("curated_rows_discarded", settings, passed=False, metadata=metadata,
                   description=f"channel {spec.name}: the contract (discard_row) dropped {total} rows in the hours "
                               f"{scope}: "
                               f"{_hours_text(dropped).replace(' events)', ' rows)')}; they stay in the landed "
                               "table")


def curated_no_duplicate_event_ids(spec: ChannelSpec, settings: OrchestrationSettings, landing: LandingConfig,
                                   curated_root: str, start_spark: StartSpark) -> Verdict:
    """Every ``event_id`` occurs once in the curated table of ``spec`` (its current files)."""
    curation = settings.curated.for_channel(spec.name)
    table = open_curated(curation.table_format(landing.format), curated_root, spec.name, landing,
                         _session(curated_root, start_spark))
    scan = scan_event_ids(table.location, files=table.data_files())
    return duplicates_verdict("curated_no_duplicate_event_ids", settings, scan, "curated table", table.uri,
                              table.format)
