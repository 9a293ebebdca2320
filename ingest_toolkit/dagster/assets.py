"""Per channel assets: the channel (observable source), its landed table, its hourly curated table.

Graph::

    <name>_channel  ->  <name>_landed   ->  <name>_curated  (hourly partitions)
    (the agent          (Spark landing:     (Spark: one row per event_id,
     fills it;           one take per        staging dir + swap)
     observed)           land_once)

The landing run and the curation of an hour are :mod:`ingest_toolkit.orchestrate` functions;
the assets call them with their resources and record the results as metadata. The channel asset
and its observations are in :mod:`ingest_toolkit.dagster.observations`, the curated partitions in
:mod:`ingest_toolkit.dagster.partitions`. Metadata that does not change from run to run (the
pool's limit, file counts) is text, so the asset page's plots show only what moves.

The landing asset runs in the concurrency pool ``landing-<channel>``, the curated asset in
``curated-<channel>``. The limits are the *instance's* configuration, not the code's:
``conf/dagster.yaml`` (copied to ``$DAGSTER_HOME/dagster.yaml``) limits every pool to one run.
On an instance without a limit both assets log a WARNING and record ``pool_limit: null`` in
their materialization metadata. Nothing about the landed table's exactly-once depends on the
pool (see :mod:`ingest_toolkit.dagster.instance`); it prevents wasted work and contention, and for the
curated asset two runs swapping the same partition at once.
"""

# No ``from __future__ import annotations`` here: Dagster inspects the run-config parameter's
# annotation at decoration time and cannot resolve a string one (LandingRunConfig).
import time
import warnings
from typing import Any

import dagster as dg

from ingest_toolkit.land.config import LandingConfig
from ingest_toolkit.orchestrate.curation import CuratedResult, build_curated_partition, curated_metadata
from ingest_toolkit.orchestrate.landing import land, landing_lines, landing_metadata
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings

from .instance import pool_limit
from .maintenance import KINDS
from .metadata import dagster_metadata
from .naming import channel_key, curated_key, curated_pool_name, landed_key, landing_pool_name
from .partitions import channel_partitions
from .resources import ResourceKeys, SparkResource

__all__ = ["LandingRunConfig", "build_curated_asset", "build_landing_asset"]


class LandingRunConfig(dg.Config):
    """Run configuration of a landing run."""

    batches: int | None = None  # land_once calls (take transactions); None: [dagster] batches_per_run


def _pool_metadata(context: dg.AssetExecutionContext, pool: str, risk: str) -> dict[str, Any]:
    """``pool`` / ``pool_limit`` metadata (text: a constant); a WARNING when the instance does not
    limit the pool."""
    limit = pool_limit(context.instance, pool)
    if limit is None:
        context.log.warning(
            f"the Dagster instance sets no limit for pool {pool}: {risk}. Use conf/dagster.yaml as "
            f"$DAGSTER_HOME/dagster.yaml (or `dagster instance concurrency set {pool} 1`); see docs/dagster.md")
    return {"pool": pool, "pool_limit": dg.MetadataValue.text("none" if limit is None else str(limit))}


def build_landing_asset(spec: ChannelSpec, settings: OrchestrationSettings, keys: ResourceKeys | None = None,
                        pool: str | None = None, *, table_format: str = "parquet") -> dg.AssetsDefinition:
    """The landed table; ``keys``: its resources (default :meth:`ResourceKeys.of` the channel), ``pool``:
    its concurrency pool (default ``landing-<channel>``), ``table_format``: its format (the asset's kinds)."""
    keys = keys or ResourceKeys.of(spec.node)
    pool = pool or landing_pool_name(spec.node)
    what = {"parquet": "Parquet", "delta": "a Delta Lake table", "iceberg": "an Iceberg table"}[table_format]

    @dg.asset(key=landed_key(spec.node), deps=[channel_key(spec.node)], pool=pool,
              required_resource_keys={keys.landing, keys.spark}, group_name="landing", kinds=KINDS[table_format],
              description=f"Takes committed events out of channel '{spec.name}' in take transactions and lands "
                          f"them into {what} (partitioned by event date/hour), exactly once.")
    def landed(context: dg.AssetExecutionContext, config: LandingRunConfig) -> dg.MaterializeResult:
        landing, spark = keys.landing_of(context), keys.spark_of(context)
        pool_meta = _pool_metadata(context, pool, f"two landing runs of channel {spec.name} may run at once "
                                                  "(the landed table stays exactly-once; the runs compete)")
        landing_config = landing.config()
        started = time.monotonic()
        run = land(spec, landing_config, spark.session, batches=config.batches or settings.batches_per_run,
                   token=landing.agent_token, notice=context.log.info)
        for line in landing_lines(run, spec.name):
            context.log.info(line)
        metadata = dagster_metadata(landing_metadata(run, landing_config.root, spec.name))
        return dg.MaterializeResult(metadata={**metadata, "duration_s": round(time.monotonic() - started, 3),
                                              **pool_meta})

    return landed


def _build_partitions(context: dg.AssetExecutionContext, partitions: dg.HourlyPartitionsDefinition,
                      spec: ChannelSpec, settings: OrchestrationSettings, landing: LandingConfig, spark: SparkResource,
                      curated_root: str) -> dict[str, CuratedResult]:
    """Build every partition of the run (one key, or a backfill's range) in one Spark session;
    each partition's materialization gets the metadata of its own hour."""
    results: dict[str, CuratedResult] = {}
    curation = settings.curated.for_channel(spec.name)
    for key in context.partition_keys:
        window = partitions.time_window_for_partition_key(key)
        result = build_curated_partition(spark.session(), landing, curated_root, spec.name, window.start, window.end,
                                         curation, run_id=context.run.run_id)
        context.log.info(f"partition {key}: {result.rows} rows from {result.landed_files} landed files "
                         f"({result.format}), {result.duplicates_dropped} duplicates dropped, "
                         f"{result.columns} columns" + (f" (new: {', '.join(result.columns_added)})"
                                                        if result.columns_added else "")
                         + f", {result.rescued_rows} rows with rescued data, {result.discarded_rows} discarded")
        context.add_asset_metadata(dagster_metadata(curated_metadata(result)), partition_key=key)
        results[key] = result
    return results


def build_curated_asset(spec: ChannelSpec, settings: OrchestrationSettings,
                        partitions: dg.HourlyPartitionsDefinition | None = None, keys: ResourceKeys | None = None,
                        pool: str | None = None) -> dg.AssetsDefinition:
    """The hourly curated table; ``partitions`` default: :func:`channel_partitions` of the channel,
    ``pool`` default ``curated-<channel>`` (the table's: instances of a fleet curating it share it)."""
    partitions = partitions or channel_partitions(spec, settings)
    keys = keys or ResourceKeys.of(spec.node)
    pool = pool or curated_pool_name(spec.name)

    with warnings.catch_warnings():  # BackfillPolicy is "beta" in Dagster 1.13; single_run is what Spark wants
        warnings.simplefilter("ignore", dg.BetaWarning)

        @dg.asset(key=curated_key(spec.node), deps=[landed_key(spec.node)], partitions_def=partitions, pool=pool,
                  backfill_policy=dg.BackfillPolicy.single_run(), group_name="curated", kinds={"spark", "parquet"},
                  required_resource_keys={keys.landing, keys.spark, keys.curated},
                  description=f"Hourly curated table of channel '{spec.name}': the landed rows of the hour, one per "
                              "event_id, the body parsed into typed columns whose schema evolves under the channel's "
                              "contract (what does not fit is kept in _rescued_data); each hour replaced as a whole. "
                              "Backfill any range: one run builds every hour of it in one Spark session.")
        def curated_table(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
            landing, spark, curated = keys.landing_of(context), keys.spark_of(context), keys.curated_of(context)
            pool_meta = _pool_metadata(context, pool, f"two runs of the same hour of channel {spec.name} could swap "
                                                      "its directory at the same time")
            results = _build_partitions(context, partitions, spec, settings, landing.config(), spark, curated.root)
            return dg.MaterializeResult(metadata={"hours_in_run": dg.MetadataValue.text(str(len(results))),
                                                  **pool_meta})

    return curated_table
