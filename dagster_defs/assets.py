"""Per channel assets: the channel (external), its landed table, its hourly curated table.

Graph::

    channel/<name>  ->  landed/<name>  ->  curated/<name>  (hourly partitions)
    (the agent          (Spark landing:     (Spark: dedup by event_id,
     fills it)           one take per        staging dir + swap)
                         land_once)

The landing asset runs in the concurrency pool ``landing-<channel>``; the instance limits
every pool to one (``concurrency: pools: default_limit: 1`` in dagster.yaml), so two runs never
take from the same channel at once.
"""

# No ``from __future__ import annotations`` here: Dagster inspects the run-config parameter's
# annotation at decoration time and cannot resolve a string one (LandingRunConfig).
import time

import dagster as dg

from .curated import build_curated_partition
from .naming import channel_key, curated_key, landed_key, pool_name
from .resources import CuratedResource, LandingResource, SparkResource
from .settings import ChannelSpec, OrchestrationSettings

__all__ = ["LandingRunConfig", "build_channel_spec", "build_curated_asset", "build_landing_asset",
           "hourly_partitions"]


class LandingRunConfig(dg.Config):
    """Run configuration of a landing run."""

    batches: int | None = None  # land_once calls (take transactions); None: [dagster] batches_per_run


def build_channel_spec(spec: ChannelSpec) -> dg.AssetSpec:
    """The channel as an external asset: the agent writes it, Dagster only observes and checks it."""
    return dg.AssetSpec(
        channel_key(spec.name), group_name="channels", kinds={"wal"},
        description=f"Write-ahead-log file channel '{spec.name}' filled by the agent; its checks read "
                    "checkpoint.meta and the segment files without a lock.",
        metadata={"checkpoint_dir": spec.checkpoint_dir, "data_dirs": list(spec.data_dirs),
                  "capacity": spec.capacity})


def build_landing_asset(spec: ChannelSpec, settings: OrchestrationSettings) -> dg.AssetsDefinition:
    @dg.asset(key=landed_key(spec.name), deps=[channel_key(spec.name)], pool=pool_name(spec.name),
              group_name="landing", kinds={"spark", "parquet"},
              description=f"Takes committed events out of channel '{spec.name}' in take transactions and lands "
                          "them as Parquet (partitioned by event date/hour), exactly once.")
    def landed(context: dg.AssetExecutionContext, config: LandingRunConfig, landing: LandingResource,
               spark: SparkResource) -> dg.MaterializeResult:
        from ingest_toolkit.land import land_once

        landing_config = landing.config()
        batches = config.batches or settings.batches_per_run
        started = time.monotonic()
        results = []
        with landing.source(spec, landing_config) as source:
            for _ in range(batches):
                result = land_once(source, landing_config, spark.session())
                results.append(result)
                context.log.info(f"took {result.taken} events of channel {spec.name}, landed {result.events} in "
                                 f"{result.files} files (batch {result.batch_id}, {result.redelivered} already "
                                 f"landed), backlog after: {result.backlog_after}")
                if result.taken == 0 or result.backlog_after == 0:
                    break
        last = results[-1]
        return dg.MaterializeResult(metadata={
            "events": sum(r.events for r in results), "taken": sum(r.taken for r in results),
            "bytes": sum(r.bytes for r in results),
            "files": sum(r.files for r in results), "batch_id": last.batch_id or "",
            "batch_ids": [r.batch_id for r in results if r.batch_id],
            "take_transactions": len(results), "redelivered": sum(r.redelivered for r in results),
            "duration_s": round(time.monotonic() - started, 3), "backlog_after": last.backlog_after,
            "source": "agent " + landing_config.agent if landing_config.agent else "in-process",
            "root": dg.MetadataValue.path(f"{landing_config.root}/{spec.name}"),
            "manifest": str(last.manifest_uri or "")})

    return landed


def hourly_partitions(settings: OrchestrationSettings) -> dg.HourlyPartitionsDefinition:
    """Hourly partitions in ``settings.timezone``; the hour in progress is included (``end_offset=1``)
    so that fresh data can be curated before the hour ends (re-running it later replaces it)."""
    return dg.HourlyPartitionsDefinition(start_date=settings.partitions_start, timezone=settings.timezone,
                                         end_offset=1)


def build_curated_asset(spec: ChannelSpec, settings: OrchestrationSettings) -> dg.AssetsDefinition:
    @dg.asset(key=curated_key(spec.name), deps=[landed_key(spec.name)], partitions_def=hourly_partitions(settings),
              group_name="curated", kinds={"spark", "parquet"},
              description=f"Hourly curated table of channel '{spec.name}': the landed rows of the hour, one per "
                          "event_id, rewritten as a whole (staging directory + swap). Backfill any range.")
    def curated_table(context: dg.AssetExecutionContext, landing: LandingResource, spark: SparkResource,
                curated: CuratedResource) -> dg.MaterializeResult:
        window = context.partition_time_window
        result = build_curated_partition(spark.session(), landing.config().root, curated.root, spec.name,
                                         window.start, window.end)
        context.log.info(f"partition {context.partition_key}: {result.rows} rows from {len(result.source_dirs)} "
                         f"landed directories, {result.duplicates_dropped} duplicates dropped")
        return dg.MaterializeResult(metadata={
            "rows": result.rows, "duplicates_dropped": result.duplicates_dropped,
            "path": dg.MetadataValue.path(result.path), "landed_dirs": result.source_dirs,
            "window_utc": f"{result.window_utc[0]} .. {result.window_utc[1]}"})

    return curated_table
