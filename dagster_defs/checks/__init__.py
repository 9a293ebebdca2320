"""Asset checks per channel; docs/runbook.md has a section per check (meaning, what to do).

On ``channel/<name>``: ``refcounts_match_recount``, ``drained_logs_deleted``,
``checkpoint_fresh``, ``backlog_below_capacity`` (WARN). On ``landed/<name>``:
``landed_reconciles``, ``landed_no_duplicate_event_ids``. On ``curated/<name>``:
``curated_no_duplicate_event_ids``.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from ..naming import channel_key, curated_key, landed_key
from ..resources import CuratedResource, LandingResource, SparkResource
from ..settings import ChannelSpec, OrchestrationSettings
from ..storage import local_path
from .channel_checks import check_backlog, check_checkpoint_fresh, check_drained_logs_deleted, check_refcounts
from .data_checks import check_no_duplicates, check_reconcile, taken_from_agent, taken_from_checkpoint
from .manifests import manifest_totals

__all__ = ["build_channel_checks", "build_data_checks"]


def build_channel_checks(spec: ChannelSpec, settings: OrchestrationSettings) -> list[dg.AssetChecksDefinition]:
    key = channel_key(spec.name)

    @dg.asset_check(asset=key, name="refcounts_match_recount",
                    description="log_refcounts in checkpoint.meta equal a recount of that checkpoint's queue "
                                "and open takes (read without the lock).")
    def refcounts() -> dg.AssetCheckResult:
        return check_refcounts(spec)

    @dg.asset_check(asset=key, name="drained_logs_deleted",
                    description="No log segment below the deletion floor outlives its checkpoint by more than "
                                "the grace.")
    def drained() -> dg.AssetCheckResult:
        return check_drained_logs_deleted(spec, settings)

    @dg.asset_check(asset=key, name="checkpoint_fresh",
                    description="checkpoint.meta is younger than checkpoint_stale_factor x checkpoint_interval; "
                                "fails when the landing takes through an agent and no process owns the channel.")
    def fresh(landing: LandingResource) -> dg.AssetCheckResult:
        return check_checkpoint_fresh(spec, settings, agent=landing.config().agent)

    @dg.asset_check(asset=key, name="backlog_below_capacity",
                    description="Queued events stay below backlog_warn_fraction of capacity (warning).")
    def backlog() -> dg.AssetCheckResult:
        return check_backlog(spec, settings)

    return [refcounts, drained, fresh, backlog]


def build_data_checks(spec: ChannelSpec, settings: OrchestrationSettings) -> list[dg.AssetChecksDefinition]:
    @dg.asset_check(asset=landed_key(spec.name), name="landed_reconciles",
                    description="Events in the landing manifests == rows in the landed table (== takes committed "
                                "by the channel when the landing is its only taker).")
    def reconcile(landing: LandingResource, spark: SparkResource) -> dg.AssetCheckResult:
        config = landing.config()
        session = _session_for(config.root, spark)
        totals = manifest_totals(config.root, spec.name, session)
        taken = None
        if settings.landing_only_taker:
            status = landing.agent_status(spec, config)
            taken = (taken_from_agent(status) if status is not None else
                     taken_from_checkpoint(spec, totals.newest_commit_unix_ns, settings.checkpoint_wait_seconds))
        return check_reconcile(f"{config.root}/{spec.name}", totals, taken, session)

    @dg.asset_check(asset=landed_key(spec.name), name="landed_no_duplicate_event_ids",
                    description="Every event_id occurs once in the landed table.")
    def landed_unique(landing: LandingResource, spark: SparkResource) -> dg.AssetCheckResult:
        root = landing.config().root
        return check_no_duplicates(f"{root}/{spec.name}", "landed table", _session_for(root, spark))

    @dg.asset_check(asset=curated_key(spec.name), name="curated_no_duplicate_event_ids",
                    description="Every event_id occurs once in the curated partitions.")
    def curated_unique(curated: CuratedResource, spark: SparkResource) -> dg.AssetCheckResult:
        root = curated.root.rstrip("/")
        return check_no_duplicates(f"{root}/{spec.name}", "curated table", _session_for(root, spark))

    return [reconcile, landed_unique, curated_unique]


def _session_for(root: str, spark: SparkResource) -> Any:
    """A Spark session for a table that is not on a local path (HDFS, S3A: read through Spark's
    Hadoop client); None for a local one, which pyarrow reads without a JVM."""
    return None if local_path(root) is not None else spark.session()
