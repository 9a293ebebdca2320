"""Asset checks per channel: the checks of :mod:`ingest_toolkit.orchestrate` as Dagster asset checks.

On the channel asset: ``refcounts_match_recount``, ``referenced_logs_intact``,
``drained_logs_deleted``, ``checkpoint_fresh``, ``recovery_losses_acknowledged``,
``backlog_below_capacity`` (WARN). On the landed
table: ``landed_reconciles`` (for a Delta or Iceberg table, against the batch the asset's newest
materialization committed), ``landed_no_duplicate_event_ids``, ``landed_files_per_partition``
(WARN). On the curated table:
``curated_no_duplicate_event_ids``. docs/runbook.md has a section per check (meaning, what to
do); every result carries the severity the runbook gives the check and a link to its section.
The channel checks read the channel's directories, or, where those cannot be read here, the
status of the agent the landing resource takes through (:mod:`ingest_toolkit.orchestrate.remote`).
Each check here only gathers its resources and turns the verdict into an ``AssetCheckResult``.
"""

# No ``from __future__ import annotations``: Dagster reads the ``context`` annotation at decoration time.

from collections.abc import Callable

import dagster as dg

from ingest_toolkit.orchestrate import channel_checks as channel
from ingest_toolkit.orchestrate import data_checks as data
from ingest_toolkit.orchestrate.log_presence import referenced_logs_intact
from ingest_toolkit.orchestrate.remote import AgentAccess, StateSource, state_source
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings
from ingest_toolkit.orchestrate.verdict import check_description

from .metadata import asset_check_result
from .naming import channel_key, curated_key, landed_key
from .resources import ResourceKeys

__all__ = ["build_channel_checks", "build_data_checks", "last_landing"]


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

    return [refcounts, referenced, drained, fresh, incidents, backlog]


def build_data_checks(spec: ChannelSpec, settings: OrchestrationSettings, keys: ResourceKeys | None = None,
                      curated: bool = True) -> list[dg.AssetChecksDefinition]:
    """The landed table's checks, and the curated table's unless ``curated`` is False (no curated asset)."""
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

    @_check(curated_key(spec.node), "curated_no_duplicate_event_ids", settings, frozenset({keys.curated, keys.spark}))
    def curated_unique(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        curated, spark = keys.curated_of(context), keys.spark_of(context)
        return asset_check_result(data.curated_no_duplicate_event_ids(spec, settings, curated.root, spark.session))

    landed = [reconcile, landed_unique, landed_files]
    return [*landed, curated_unique] if curated else landed


def last_landing(context: dg.AssetCheckExecutionContext, key: dg.AssetKey) -> data.LastLanding | None:
    """The batch the newest materialization of the landed asset committed (its metadata), if any."""
    event = context.instance.get_latest_materialization_event(key)
    materialization = event.asset_materialization if event is not None else None
    if materialization is None:
        return None
    values = {name: getattr(value, "value", value) for name, value in materialization.metadata.items()}
    return data.LastLanding.from_metadata(values)
