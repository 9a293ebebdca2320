"""Per channel: a sensor that curates the hours every landing wrote into.

Each materialization of ``landed/<c>`` records in its metadata the landed partition directories
its batches wrote (``partitions``: ``event_date=D/event_hour=H``, UTC, from the landing
manifests). The sensor reads the materializations after its cursor (the storage id of the last
one handled), maps each landed hour to the curated partitions that overlap it (one in UTC, two
in a half-hour zone) and requests a run of ``curate_<c>`` per partition.

* Run key ``curate-<c>-<partition>-after<storage id of the landing>``: the same landing never
  launches a partition twice, even if the cursor were lost; a later landing into the same hour
  (late data) is a new materialization with a new storage id, so the hour is rebuilt.
* A partition whose latest curated materialization comes from a run that *started* after the
  landing was recorded already contains that landing's rows (a backfill, a run by hand, the
  demo): it is skipped, and the skip reason says so.
* Two requests for the same partition never run at once: the curated asset is in the pool
  ``curated-<c>`` and the runs carry the tag ``ingest/curated`` (limits in conf/dagster.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from ingest_toolkit.orchestrate.curation import hour_of_landed_dir
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings

from .curated import partition_keys_for_hours
from .naming import curated_key, curated_sensor_name, landed_key
from .partitions import channel_partitions

__all__ = ["build_curated_sensor", "landed_hours"]

_BATCH = 200  # landing materializations handled per evaluation; the rest in the next one


@dataclass(frozen=True, slots=True)
class _Landing:
    storage_id: int
    timestamp: float


def landed_hours(record: dg.EventLogRecord) -> list[str]:
    """The ``partitions`` metadata of a landing materialization (empty for a landing that took
    nothing, or one recorded before the metadata existed)."""
    materialization = record.asset_materialization
    entry = materialization.metadata.get("partitions") if materialization else None
    value = entry.value if entry is not None else None
    return [str(p) for p in value] if isinstance(value, list) else []


def build_curated_sensor(spec: ChannelSpec, settings: OrchestrationSettings, job: dg.UnresolvedAssetJobDefinition,
                         partitions: dg.HourlyPartitionsDefinition | None = None) -> dg.SensorDefinition:
    """The sensor of one channel; ``job`` builds that channel's curated partitions (``partitions``,
    default :func:`channel_partitions`: the curated asset's)."""
    partitions = partitions or channel_partitions(spec, settings)

    @dg.sensor(name=curated_sensor_name(spec.node), job=job, minimum_interval_seconds=settings.sensor_interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Requests the curated partitions of channel {spec.name} that each landing wrote "
                           "into (late data re-curates its hour).")
    def curated_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        after = int(context.cursor) if context.cursor and context.cursor.isdigit() else None
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=landed_key(spec.node), after_storage_id=after), limit=_BATCH,
            ascending=True).records
        if not records:
            return dg.SensorResult(skip_reason=f"channel {spec.name}: no landing since the last evaluation "
                                               f"(cursor {context.cursor or 'none'})")
        wanted: dict[str, _Landing] = {}  # partition -> the latest landing that wrote into it
        early: set[str] = set()  # landed hours before the first partition
        for record in records:
            hours = [h for h in map(hour_of_landed_dir, landed_hours(record)) if h is not None]
            for key in partition_keys_for_hours(partitions, hours):
                wanted[key] = _Landing(record.storage_id, record.timestamp)
            first = partitions.start.timestamp()
            early |= {h.to_iso8601_string() for h in hours if h.add(hours=1).timestamp() <= first}
        requests, current = [], []
        for key, landing in wanted.items():
            if _curated_after(context.instance, curated_key(spec.node), key, landing.timestamp):
                current.append(key)
                continue
            requests.append(dg.RunRequest(
                run_key=f"curate-{spec.node}-{key}-after{landing.storage_id}", partition_key=key,
                tags={"ingest/channel": spec.node, "ingest/curated": spec.node, "ingest/trigger": "landing"}))
        cursor = str(records[-1].storage_id)
        summary = (f"channel {spec.name}: {len(records)} landings up to storage id {cursor}: request "
                   f"{[r.partition_key for r in requests]}" + (f", already curated after them: {current}"
                                                               if current else "") + _before_start(early, partitions))
        if not requests:
            return dg.SensorResult(skip_reason=summary, cursor=cursor)
        context.log.info(summary)
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return curated_sensor


def _before_start(hours: set[str], partitions: dg.HourlyPartitionsDefinition) -> str:
    if not hours:
        return ""
    return (f"; landed hours (UTC) before the first curated partition {partitions.start.isoformat()}: "
            f"{sorted(hours)}: reload the code location (partitions_start = auto then starts at the earliest "
            "landed hour) or set [dagster] partitions_start earlier")


def _curated_after(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str, landed_at: float) -> bool:
    """Whether the latest curated materialization of ``partition`` comes from a run started after
    ``landed_at`` (the landing's files were in place before it was recorded, so that run read them)."""
    latest = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]),
                                             limit=1).records
    if not latest:
        return False
    run = instance.get_run_record_by_id(latest[0].run_id)
    return bool(run is not None and run.start_time is not None and run.start_time > landed_at)
