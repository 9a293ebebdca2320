"""Asset checks per channel; docs/runbook.md has a section per check (meaning, what to do).

On the channel asset: ``refcounts_match_recount``, ``referenced_logs_intact``,
``drained_logs_deleted``, ``checkpoint_fresh``, ``backlog_below_capacity`` (WARN). On the landed
table: ``landed_reconciles``, ``landed_no_duplicate_event_ids``. On the curated table:
``curated_no_duplicate_event_ids``. Every result carries the severity the runbook gives the check
and a link to its section (:mod:`.runbook`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dagster as dg

from ingest_toolkit.errors import IngestError
from ingest_toolkit.land.storage import local_path

from ..naming import channel_key, curated_key, landed_key
from ..resources import CuratedResource, LandingResource, SparkResource
from ..settings import ChannelSpec, OrchestrationSettings
from .channel_checks import check_backlog, check_checkpoint_fresh, check_drained_logs_deleted, check_refcounts
from .data_checks import TakenCount, check_no_duplicates, check_reconcile, taken_from_agent, taken_from_checkpoint
from .log_presence import check_referenced_logs
from .manifests import manifest_totals
from .runbook import judged, runbook_ref

__all__ = ["build_channel_checks", "build_data_checks"]

_DESCRIPTIONS = {
    "refcounts_match_recount": "log_refcounts in checkpoint.meta equal a recount of that checkpoint's queue and open "
                               "takes (read without the lock).",
    "referenced_logs_intact": "Every log segment that queued events, open takes or the write position need is on "
                              "disk and long enough (a missing or truncated one loses events and stops restarts).",
    "drained_logs_deleted": "No log segment below the deletion floor outlives its checkpoint by more than the grace.",
    "checkpoint_fresh": "checkpoint.meta is younger than checkpoint_stale_factor x checkpoint_interval; fails when "
                        "the landing takes through an agent and no process owns the channel.",
    "backlog_below_capacity": "Queued events stay below backlog_warn_fraction of capacity (warning).",
    "landed_reconciles": "Events in the landing manifests == rows in the landed table (== takes committed by the "
                         "channel when the landing is its only taker).",
    "landed_no_duplicate_event_ids": "Every event_id occurs once in the landed table.",
    "curated_no_duplicate_event_ids": "Every event_id occurs once in the curated partitions.",
}


def _check(key: dg.AssetKey, name: str, settings: OrchestrationSettings,
           ) -> Callable[[Callable[..., dg.AssetCheckResult]], dg.AssetChecksDefinition]:
    """``@asset_check`` with the check's description, its severity and its runbook section."""
    def decorate(fn: Callable[..., dg.AssetCheckResult]) -> dg.AssetChecksDefinition:
        description = f"{_DESCRIPTIONS[name]} Runbook: {runbook_ref(name, settings)}"
        return dg.asset_check(asset=key, name=name, description=description)(fn)
    return decorate


def build_channel_checks(spec: ChannelSpec, settings: OrchestrationSettings) -> list[dg.AssetChecksDefinition]:
    key = channel_key(spec.name)

    @_check(key, "refcounts_match_recount", settings)
    def refcounts() -> dg.AssetCheckResult:
        return judged("refcounts_match_recount", check_refcounts(spec), settings)

    @_check(key, "referenced_logs_intact", settings)
    def referenced() -> dg.AssetCheckResult:
        return judged("referenced_logs_intact", check_referenced_logs(spec), settings)

    @_check(key, "drained_logs_deleted", settings)
    def drained() -> dg.AssetCheckResult:
        return judged("drained_logs_deleted", check_drained_logs_deleted(spec, settings), settings)

    @_check(key, "checkpoint_fresh", settings)
    def fresh(landing: LandingResource) -> dg.AssetCheckResult:
        return judged("checkpoint_fresh", check_checkpoint_fresh(spec, settings, agent=landing.config().agent),
                      settings)

    @_check(key, "backlog_below_capacity", settings)
    def backlog() -> dg.AssetCheckResult:
        return judged("backlog_below_capacity", check_backlog(spec, settings), settings)

    return [refcounts, referenced, drained, fresh, backlog]


def build_data_checks(spec: ChannelSpec, settings: OrchestrationSettings) -> list[dg.AssetChecksDefinition]:
    @_check(landed_key(spec.name), "landed_reconciles", settings)
    def reconcile(landing: LandingResource, spark: SparkResource) -> dg.AssetCheckResult:
        config = landing.config()
        session = _session_for(config.root, spark)
        totals = manifest_totals(config.root, spec.name, session)
        taken: TakenCount | None = None
        unavailable = None
        if settings.landing_only_taker:
            try:
                status = landing.agent_status(spec, config)
            except IngestError as err:  # the agent is down or refuses: a verdict, not a crash of the check
                where = f"at {config.agent}" if config.agent else "that owns the channel"
                status, unavailable = None, (
                    f"the channel's takes_committed could not be read from the agent {where} ({err}); start the "
                    "agent (or fix [landing] agent) and run the check again")
            if status is not None:
                taken = taken_from_agent(status)
            elif unavailable is None:
                taken = taken_from_checkpoint(spec, totals.newest_commit_unix_ns, settings.checkpoint_wait_seconds)
        result = check_reconcile(f"{config.root}/{spec.name}", totals, taken, session, unavailable=unavailable)
        return judged("landed_reconciles", result, settings)

    @_check(landed_key(spec.name), "landed_no_duplicate_event_ids", settings)
    def landed_unique(landing: LandingResource, spark: SparkResource) -> dg.AssetCheckResult:
        root = landing.config().root
        result = check_no_duplicates(f"{root}/{spec.name}", "landed table", _session_for(root, spark))
        return judged("landed_no_duplicate_event_ids", result, settings)

    @_check(curated_key(spec.name), "curated_no_duplicate_event_ids", settings)
    def curated_unique(curated: CuratedResource, spark: SparkResource) -> dg.AssetCheckResult:
        root = curated.root.rstrip("/")
        result = check_no_duplicates(f"{root}/{spec.name}", "curated table", _session_for(root, spark))
        return judged("curated_no_duplicate_event_ids", result, settings)

    return [reconcile, landed_unique, curated_unique]


def _session_for(root: str, spark: SparkResource) -> Any:
    """A Spark session for a table that is not on a local path (HDFS, S3A: read through Spark's
    Hadoop client); None for a local one, which pyarrow reads without a JVM."""
    return None if local_path(root) is not None else spark.session()
