"""Builds the definitions of every configured channel from the settings.

One call per channel produces: the channel's observable source asset and its five checks, the
landing asset and its two checks, the hourly curated asset and its check, three jobs (land,
curate, check), the landing sensor, the curated sensor, the channel observer sensor and the
drain schedule. :func:`build_definitions` merges them with
the resources; ``definitions.py`` calls it on the settings in ``conf/``.
"""

from __future__ import annotations

import logging

import dagster as dg

from ingest_toolkit.errors import ConfigError
from ingest_toolkit.land.config import LandingConfig, load_landing_config

from .assets import build_curated_asset, build_landing_asset
from .channels import load_channel_specs
from .checks import build_channel_checks, build_data_checks
from .curated_sensor import build_curated_sensor
from .naming import channel_key, checks_job_name, curated_job_name, curated_key, landed_key, landing_job_name
from .observations import build_channel_asset, build_observer_sensor
from .partitions import channel_partitions
from .resources import CuratedResource, LandingResource, SparkResource, env_or
from .sensors import build_drain_schedule, build_landing_sensor
from .settings import ChannelSpec, OrchestrationSettings, load_orchestration_settings

__all__ = ["build_channel_definitions", "build_definitions", "build_resources", "definitions_from_conf"]


def build_channel_definitions(spec: ChannelSpec, settings: OrchestrationSettings) -> dg.Definitions:
    """Everything Dagster needs for one channel (no resources)."""
    land_job = dg.define_asset_job(
        landing_job_name(spec.name), selection=dg.AssetSelection.assets(landed_key(spec.name)),
        description=f"Land channel {spec.name} (then check the landed table).",
        tags={"ingest/channel": spec.name, "ingest/landing": spec.name})
    curate_job = dg.define_asset_job(
        curated_job_name(spec.name), selection=dg.AssetSelection.assets(curated_key(spec.name)),
        description=f"Build curated hours of channel {spec.name}.",
        tags={"ingest/channel": spec.name, "ingest/curated": spec.name})
    checks_job = dg.define_asset_job(
        checks_job_name(spec.name),
        selection=dg.AssetSelection.checks_for_assets(channel_key(spec.name), landed_key(spec.name),
                                                      curated_key(spec.name)),
        description=f"Every on-call check of channel {spec.name} and its tables.")
    partitions = channel_partitions(spec, settings)  # one start for the curated asset and its sensor
    return dg.Definitions(
        assets=[build_channel_asset(spec), build_landing_asset(spec, settings),
                build_curated_asset(spec, settings, partitions)],
        asset_checks=[*build_channel_checks(spec, settings), *build_data_checks(spec, settings)],
        jobs=[land_job, curate_job, checks_job],
        sensors=[build_landing_sensor(spec, settings, land_job),
                 build_curated_sensor(spec, settings, curate_job, partitions),
                 build_observer_sensor(spec, settings)],
        schedules=[build_drain_schedule(spec, settings, land_job)])


def build_resources(settings: OrchestrationSettings) -> dict[str, dg.ConfigurableResource]:
    """Resources from ``conf/`` and the settings loaders' variables (``INGEST_<TABLE>__<KEY>``).

    The fields hold the values in effect (the resource page shows where the landing writes, which
    agent it takes through, which Spark master it uses), read from ``landing_conf`` when the
    definitions load; a variable set where they load appears as EnvVar (:func:`env_or`). A run
    loads the definitions again in its own process, so a variable set only where runs execute
    applies too. A landing configuration that cannot be read leaves the fields empty (the
    runs report the problem). ``INGEST_DAGSTER__CURATED_ROOT`` is part of the ``[dagster]``
    settings (read at load).
    """
    landing = _landing_config(settings)
    spark = landing.spark if landing is not None else None
    return {
        "landing": LandingResource(landing_conf=settings.landing_conf,
                                   root=env_or("INGEST_LANDING__ROOT", landing.root if landing else None),
                                   agent=env_or("INGEST_LANDING__AGENT", landing.agent if landing else None),
                                   agent_token=env_or("INGEST_AGENT_TOKEN", None)),
        "spark": SparkResource(landing_conf=settings.landing_conf,
                               master=env_or("INGEST_SPARK__MASTER", spark.master if spark else None),
                               remote=env_or("INGEST_SPARK__REMOTE", spark.remote if spark else None)),
        "curated": CuratedResource(root=env_or("INGEST_DAGSTER__CURATED_ROOT", settings.curated_root)),
    }


def _landing_config(settings: OrchestrationSettings) -> LandingConfig | None:
    try:
        return load_landing_config(settings.landing_conf)
    except ConfigError as err:
        logging.getLogger(__name__).warning("the landing resource shows no values: %s", err)
        return None


def build_definitions(settings: OrchestrationSettings, specs: list[ChannelSpec],
                      resources: dict[str, dg.ConfigurableResource] | None = None) -> dg.Definitions:
    per_channel = [build_channel_definitions(spec, settings) for spec in specs]
    return dg.Definitions.merge(*per_channel, dg.Definitions(resources=resources or build_resources(settings)))


def definitions_from_conf() -> dg.Definitions:
    """The definitions of the configuration in ``INGEST_CONF_DIR`` (default ``conf``)."""
    settings = load_orchestration_settings()
    return build_definitions(settings, load_channel_specs(settings.agent_conf))
