"""Builds the definitions of a channel from its settings: what the component's instance yields.

One call per channel produces: the channel's observable source asset and its checks, the
landing asset and its checks, the hourly curated asset and its check, three jobs (land,
curate, check), the landing sensor, the curated sensor, the channel observer sensor, the drain
schedule (without the curated asset, its check, job and sensor when ``curate`` is off), for a
Delta or Iceberg landed table its maintenance asset, job and schedule, and the
channel's three resources (:class:`~ingest_toolkit.dagster.resources.ResourceKeys`).
:class:`~ingest_toolkit.dagster.component.IngestChannelComponent` calls
:func:`build_channel_definitions` for its channel; :func:`build_definitions` merges several (tests,
and a code location that lists its channels in Python rather than in ``defs.yaml`` files).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import dagster as dg

from ingest_toolkit.errors import ConfigError
from ingest_toolkit.land.config import LandingConfig, load_landing_config
from ingest_toolkit.orchestrate.remote import AgentAccess
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings

from .assets import build_curated_asset, build_landing_asset
from .checks import build_channel_checks, build_data_checks
from .curated_sensor import build_curated_sensor
from .maintenance import build_maintenance
from .naming import (
    channel_key,
    checks_job_name,
    curated_job_name,
    curated_key,
    curated_pool_name,
    landed_key,
    landing_job_name,
    landing_pool_name,
)
from .observations import build_channel_asset, build_observer_sensor
from .partitions import channel_partitions
from .resources import CuratedResource, LandingResource, ResourceKeys, SparkResource, env_or
from .sensors import build_drain_schedule, build_landing_sensor

__all__ = ["ChannelOptions", "agent_access", "build_channel_definitions", "build_definitions", "build_resources",
           "table_format_of"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelOptions:
    """What one channel's definitions may set beyond the shared settings (a component instance's
    ``defs.yaml``): the landing root and agent (override ``landing_conf``'s), the pools."""

    landing_root: str | None = None
    table_format: str | None = None  # parquet, delta, iceberg (default: landing_conf's format)
    agent: str | None = None
    landing_pool: str | None = None  # default landing-<channel>
    curated_pool: str | None = None  # default curated-<channel>: one per curated table, fleet instances share it
    curate: bool = True  # False: no curated asset, job, sensor or check (another instance curates the table)


def build_channel_definitions(spec: ChannelSpec, settings: OrchestrationSettings,
                              options: ChannelOptions | None = None,
                              resources: dict[str, dg.ConfigurableResource] | None = None) -> dg.Definitions:
    """Everything Dagster needs for one channel, its resources included (default :func:`build_resources`)."""
    options = options or ChannelOptions()
    keys = ResourceKeys.of(spec.node)
    land_job = dg.define_asset_job(
        landing_job_name(spec.node), selection=dg.AssetSelection.assets(landed_key(spec.node)),
        description=f"Land channel {spec.name} (then check the landed table).",
        tags={"ingest/channel": spec.node, "ingest/landing": spec.node})
    access = agent_access(settings, options)
    tables = [channel_key(spec.node), landed_key(spec.node)]
    pool = options.landing_pool or landing_pool_name(spec.node)
    table_format = table_format_of(settings, options)
    assets: list[dg.AssetsDefinition | dg.SourceAsset] = [build_channel_asset(spec, settings, access),
              build_landing_asset(spec, settings, keys, pool, table_format=table_format)]
    jobs = [land_job]
    schedules = [build_drain_schedule(spec, settings, land_job, access)]
    if table_format != "parquet":  # Delta, Iceberg: compaction and retention, in the landing's pool
        maintenance = build_maintenance(spec, settings, keys, pool, table_format)
        assets.append(maintenance.asset)
        jobs.append(maintenance.job)
        schedules.append(maintenance.schedule)
    sensors = [build_landing_sensor(spec, settings, land_job, access)]
    partitions = None
    if options.curate:
        curate_job = dg.define_asset_job(
            curated_job_name(spec.node), selection=dg.AssetSelection.assets(curated_key(spec.node)),
            description=f"Build curated hours of channel {spec.name}.",
            tags={"ingest/channel": spec.node, "ingest/curated": spec.node})
        partitions = channel_partitions(spec, settings, options.landing_root)  # one start for the asset and sensor
        # the pool is the table's (<curated_root>/<channel>): fleet instances curating one table take turns
        assets.append(build_curated_asset(spec, settings, partitions, keys,
                                          options.curated_pool or curated_pool_name(spec.name)))
        tables.append(curated_key(spec.node))
        jobs.append(curate_job)
        sensors.append(build_curated_sensor(spec, settings, curate_job, partitions))
    checks_job = dg.define_asset_job(
        checks_job_name(spec.node), selection=dg.AssetSelection.checks_for_assets(*tables),
        description=f"Every on-call check of channel {spec.name} and its tables.")
    return dg.Definitions(
        assets=assets,
        asset_checks=[*build_channel_checks(spec, settings, keys),
                      *build_data_checks(spec, settings, keys, curated=options.curate, partitions=partitions)],
        jobs=[*jobs, checks_job],
        sensors=[*sensors, build_observer_sensor(spec, settings, access)],
        schedules=schedules,
        resources=resources if resources is not None else build_resources(settings, spec, options))


def build_resources(settings: OrchestrationSettings, spec: ChannelSpec,
                    options: ChannelOptions | None = None) -> dict[str, dg.ConfigurableResource]:
    """The channel's resources (keys :meth:`ResourceKeys.of` it), from ``landing_conf``, the
    options and the settings loaders' variables (``INGEST_<TABLE>__<KEY>``).

    The fields hold the values in effect (the resource page shows where the landing writes, which
    agent it takes through, which Spark master it uses), read from ``landing_conf`` when the
    definitions load; a value of ``options`` wins, else a variable set where they load appears as
    EnvVar (:func:`env_or`). A run loads the definitions again in its own process, so a variable
    set only where runs execute applies too. A landing configuration that cannot be read leaves
    the fields empty (the runs report the problem). ``INGEST_DAGSTER__CURATED_ROOT`` is part of
    the ``[dagster]`` settings (read at load).
    """
    options = options or ChannelOptions()
    keys = ResourceKeys.of(spec.node)
    landing = _landing_config(settings)
    spark = landing.spark if landing is not None else None
    return {
        keys.landing: LandingResource(
            landing_conf=settings.landing_conf,
            root=options.landing_root or env_or("INGEST_LANDING__ROOT", landing.root if landing else None),
            agent=options.agent or env_or("INGEST_LANDING__AGENT", landing.agent if landing else None),
            agent_token=env_or("INGEST_AGENT_TOKEN", None),
            table_format=options.table_format or env_or("INGEST_LANDING__FORMAT", landing.format if landing else None)),
        keys.spark: SparkResource(landing_conf=settings.landing_conf,
                                  master=env_or("INGEST_SPARK__MASTER", spark.master if spark else None),
                                  remote=env_or("INGEST_SPARK__REMOTE", spark.remote if spark else None)),
        keys.curated: CuratedResource(root=env_or("INGEST_DAGSTER__CURATED_ROOT", settings.curated_root)),
    }


def agent_access(settings: OrchestrationSettings, options: ChannelOptions | None = None) -> AgentAccess | None:
    """The agent the sensors, the drain schedule and the observer ask for a channel's state where its
    directories cannot be read: ``options.agent`` (a component's ``agent``), else ``[landing] agent``,
    with the ``[landing]`` token variable and TLS files (the token is read at each call)."""
    options = options or ChannelOptions()
    landing = _landing_config(settings)
    if landing is None:
        return AgentAccess(options.agent) if options.agent else None
    return AgentAccess.of(landing, agent=options.agent)


def table_format_of(settings: OrchestrationSettings, options: ChannelOptions | None = None) -> str:
    """The landed table's format: ``options.table_format`` (a component's ``table_format``), else
    ``[landing] format`` of ``landing_conf`` (with ``INGEST_LANDING__FORMAT``), else parquet."""
    if options is not None and options.table_format:
        return options.table_format
    landing = _landing_config(settings)
    return landing.format if landing is not None else "parquet"


def _landing_config(settings: OrchestrationSettings) -> LandingConfig | None:
    try:
        return load_landing_config(settings.landing_conf)
    except ConfigError as err:
        logging.getLogger(__name__).warning("the landing resource shows no values: %s", err)
        return None


def build_definitions(settings: OrchestrationSettings, specs: list[ChannelSpec]) -> dg.Definitions:
    """The definitions of several channels with the same settings (each with its own resources)."""
    return dg.Definitions.merge(*(build_channel_definitions(spec, settings) for spec in specs))

