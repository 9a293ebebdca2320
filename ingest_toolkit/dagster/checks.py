"""Asset checks per channel: the checks of :mod:`ingest_toolkit.orchestrate` as Dagster asset checks.

On the channel asset: ``refcounts_match_recount``, ``referenced_logs_intact``,
``drained_logs_deleted``, ``checkpoint_fresh``, ``recovery_losses_acknowledged``,
``backlog_below_capacity`` (WARN), ``forward_sinks_reachable`` (WARN). On the landed
table: ``landed_reconciles`` (for a Delta or Iceberg table, against the batch the asset's newest
materialization committed), ``landed_no_duplicate_event_ids``, ``landed_files_per_partition``
(WARN), ``landed_fully_replicated`` (WARN; HDFS only). On the curated table:
``curated_no_duplicate_event_ids``, ``curated_covers_landed``, and, judging the hours the run built,
``curated_schema_drift`` (WARN), ``curated_rescued_below_threshold``, ``curated_rows_discarded``
(WARN). docs/runbook.md has a section per check (meaning, what to
do); every result carries the severity the runbook gives the check and a link to its section.
The channel checks read the channel's directories, or, where those cannot be read here, the
status of the agent the landing resource takes through (:mod:`ingest_toolkit.orchestrate.remote`).
Each check here only gathers its resources and turns the verdict into an ``AssetCheckResult``.
"""

# No ``from __future__ import annotations``: Dagster reads the ``context`` annotation at decoration time.

from collections.abc import Callable
from typing import Any

import dagster as dg

from ingest_toolkit.orchestrate import channel_checks as channel
from ingest_toolkit.orchestrate import curated_checks
from ingest_toolkit.orchestrate import data_checks as data
from ingest_toolkit.orchestrate.forwarding_checks import forward_sinks_reachable
from ingest_toolkit.orchestrate.log_presence import referenced_logs_intact
from ingest_toolkit.orchestrate.remote import AgentAccess, StateSource, state_source
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings
from ingest_toolkit.orchestrate.verdict import check_description

from .metadata import asset_check_result
from .naming import channel_key, curated_key, landed_key
from .partitions import channel_partitions
from .resources import ResourceKeys

__all__ = ["build_channel_checks", "build_curated_checks", "build_data_checks", "last_landing"]


def _check(key: dg.AssetKey, name: str, settings: OrchestrationSettings, resources: frozenset[str] = frozenset(),
           ) -> Callable[[Callable[..., dg.AssetCheckResult]], dg.AssetChecksDefinition]:
    """``@asset_check`` with the check's description, its runbook section and the resources it reads."""
    def decorate(fn: Callable[..., dg.AssetCheckResult]) -> dg.AssetChecksDefinition:
        return dg.asset_check(asset=key, name=name, description=check_description(name, settings),
                              required_resource_keys=set(resources))(fn)
    return decorate


def build_channel_checks(spec: ChannelSpec, settings: OrchestrationSettings,
                         keys: ResourceKeys | None = None) -> list[dg.AssetChecksDefinition]:
    key = channel_key(spec.node)
    keys = keys or ResourceKeys.of(spec.node)

    landing_only = frozenset({keys.landing})

    def source(context: dg.AssetCheckExecutionContext) -> StateSource:
        """Where the state is read: the directories, or the agent the landing takes through."""
        landing = keys.landing_of(context)
        config = landing.config()
        return state_source(spec, AgentAccess.of(config, landing.agent_token), settings.observe)

    @_check(key, "refcounts_match_recount", settings, landing_only)
    def refcounts(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return asset_check_result(channel.refcounts_match_recount(spec, settings, source=source(context)))

    @_check(key, "referenced_logs_intact", settings, landing_only)
    def referenced(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return asset_check_result(referenced_logs_intact(spec, settings, source=source(context)))

    @_check(key, "drained_logs_deleted", settings, landing_only)
    def drained(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return asset_check_result(channel.drained_logs_deleted(spec, settings, source=source(context)))

    @_check(key, "checkpoint_fresh", settings, landing_only)
    def fresh(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        landing = keys.landing_of(context)
        return asset_check_result(channel.checkpoint_fresh(spec, settings, agent=landing.config().agent,
                                                           source=source(context)))

    @_check(key, "recovery_losses_acknowledged", settings, landing_only)
    def incidents(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return asset_check_result(channel.recovery_losses_acknowledged(spec, settings, source=source(context)))

    @_check(key, "backlog_below_capacity", settings, landing_only)
    def backlog(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return asset_check_result(channel.backlog_below_capacity(spec, settings, source=source(context)))

    @_check(key, "forward_sinks_reachable", settings, landing_only)
    def forwarding(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return asset_check_result(forward_sinks_reachable(spec, settings, source=source(context)))

    return [refcounts, referenced, drained, fresh, incidents, backlog, forwarding]


def build_data_checks(spec: ChannelSpec, settings: OrchestrationSettings, keys: ResourceKeys | None = None,
                      curated: bool = True, partitions: dg.HourlyPartitionsDefinition | None = None,
                      ) -> list[dg.AssetChecksDefinition]:
    """The landed table's checks, and the curated table's unless ``curated`` is False (no curated
    asset); ``partitions``: the curated asset's."""
    keys = keys or ResourceKeys.of(spec.node)
    landing_spark = frozenset({keys.landing, keys.spark})

    @_check(landed_key(spec.node), "landed_reconciles", settings, landing_spark)
    def reconcile(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        landing, spark = keys.landing_of(context), keys.spark_of(context)
        return asset_check_result(data.landed_reconciles(spec, settings, landing.config(), spark.session,
                                                         token=landing.agent_token,
                                                         last=last_landing(context, landed_key(spec.node))))

    @_check(landed_key(spec.node), "landed_no_duplicate_event_ids", settings, landing_spark)
    def landed_unique(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        landing, spark = keys.landing_of(context), keys.spark_of(context)
        config = landing.config()
        return asset_check_result(data.landed_no_duplicate_event_ids(spec, settings, config.root, spark.session,
                                                                     landing=config))

    @_check(landed_key(spec.node), "landed_files_per_partition", settings, landing_spark)
    def landed_files(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        landing, spark = keys.landing_of(context), keys.spark_of(context)
        return asset_check_result(data.landed_files_per_partition(spec, settings, landing.config(), spark.session))

    @_check(landed_key(spec.node), "landed_fully_replicated", settings, landing_spark)
    def replicated(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        landing, spark = keys.landing_of(context), keys.spark_of(context)
        return asset_check_result(data.landed_fully_replicated(spec, settings, landing.config().root, spark.session))

    landed = [reconcile, landed_unique, landed_files, replicated]
    return [*landed, *build_curated_checks(spec, settings, keys, partitions)] if curated else landed


def last_landing(context: dg.AssetCheckExecutionContext, key: dg.AssetKey) -> data.LastLanding | None:
    """The batch the newest materialization of the landed asset committed (its metadata), if any."""
    event = context.instance.get_latest_materialization_event(key)
    materialization = event.asset_materialization if event is not None else None
    if materialization is None:
        return None
    values = {name: getattr(value, "value", value) for name, value in materialization.metadata.items()}
    return data.LastLanding.from_metadata(values)


_LATEST = 24  # a run of the checks alone judges the latest build of this many partitions


def _built(context: dg.AssetCheckExecutionContext, key: dg.AssetKey) -> tuple[list[dict[str, Any]], str]:
    """The metadata of every curated hour this run materialized; in a run of the checks alone,
    that of the latest build of the most recently built partitions. And the scope's words."""
    built = []
    for event in context.instance.all_logs(context.run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = event.asset_materialization
        if materialization is not None and materialization.asset_key == key and materialization.partition:
            built.append({name: value.value for name, value in materialization.metadata.items()})
    if built:
        return built, "built by this run"
    latest: dict[str, dict[str, Any]] = {}
    records = context.instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=4 * _LATEST).records
    for record in records:  # newest first
        materialization = record.asset_materialization
        if materialization is None or not materialization.partition or materialization.partition in latest:
            continue
        latest[materialization.partition] = {name: value.value for name, value in materialization.metadata.items()}
        if len(latest) == _LATEST:
            break
    return list(latest.values()), f"of the {len(latest)} most recently built partitions (their latest build)"


def build_curated_checks(spec: ChannelSpec, settings: OrchestrationSettings, keys: ResourceKeys | None = None,
                         partitions: dg.HourlyPartitionsDefinition | None = None) -> list[dg.AssetChecksDefinition]:
    """The curated table's checks (:mod:`ingest_toolkit.orchestrate.curated_checks`); ``partitions``:
    the curated asset's (default :func:`channel_partitions`)."""
    keys = keys or ResourceKeys.of(spec.node)
    key = curated_key(spec.node)
    partitions = partitions or channel_partitions(spec, settings)
    tables = frozenset({keys.landing, keys.curated, keys.spark})

    @_check(key, "curated_no_duplicate_event_ids", settings, tables)
    def curated_unique(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        landing, curated, spark = keys.landing_of(context), keys.curated_of(context), keys.spark_of(context)
        return asset_check_result(curated_checks.curated_no_duplicate_event_ids(
            spec, settings, landing.config(), curated.root, spark.session))

    @_check(key, "curated_covers_landed", settings, frozenset({keys.landing, keys.spark}))
    def covers(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        landing, spark = keys.landing_of(context), keys.spark_of(context)
        return asset_check_result(curated_checks.curated_covers_landed(
            spec, settings, landing.config(), partitions.start, spark.session))

    @_check(key, "curated_schema_drift", settings)
    def drift(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return asset_check_result(curated_checks.curated_schema_drift(spec, settings, *_built(context, key)))

    @_check(key, "curated_rescued_below_threshold", settings)
    def rescued(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return asset_check_result(curated_checks.curated_rescued_below_threshold(
            spec, settings, *_built(context, key)))

    @_check(key, "curated_rows_discarded", settings)
    def discarded(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return asset_check_result(curated_checks.curated_rows_discarded(spec, settings, *_built(context, key)))

    return [curated_unique, covers, drift, rescued, discarded]
