"""The Dagster instance the definitions expect: ``conf/dagster.yaml`` and one limit per pool.

Dagster reads an instance's configuration only from ``$DAGSTER_HOME/dagster.yaml`` (with
DAGSTER_HOME unset, ``dg dev`` uses a temporary home and reads ``dagster.yaml`` from the
directory it starts in, which for this project is the repository root). The checked-in
``conf/dagster.yaml`` is therefore *copied* into an instance directory (:func:`write_instance_yaml`;
the demo does it for its own instance, ``var/demo/dagster``).

The pools (``landing-<c>``, ``curated-<c>``) only prevent wasted work and contention: the
landed table stays exactly-once without them (in-process takes are serialized by the channel's
directory lock, remote takes are disjoint, and the landing protocol is safe with concurrent
landers). An instance without a limit is therefore allowed, and reported by the assets
(:func:`pool_limit`) instead of failing their runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg

from ingest_toolkit.errors import ConfigError
from ingest_toolkit.orchestrate.settings import conf_dir

from .naming import curated_pool_name, landing_pool_name

__all__ = ["INSTANCE_YAML", "ensure_pool_limits", "instance_yaml_source", "pool_limit", "write_instance_yaml"]

INSTANCE_YAML = "dagster.yaml"


def instance_yaml_source(conf: Path | None = None) -> Path:
    """The checked-in instance configuration: ``<conf dir>/dagster.yaml``."""
    return (conf or conf_dir()) / INSTANCE_YAML


def write_instance_yaml(home: Path, conf: Path | None = None) -> Path:
    """Copy ``<conf dir>/dagster.yaml`` to ``home/dagster.yaml`` (home created if needed)."""
    source = instance_yaml_source(conf)
    if not source.is_file():
        raise ConfigError(f"{source} does not exist: it is the Dagster instance configuration (pool limits) "
                          "copied into DAGSTER_HOME", key="dagster.yaml")
    home.mkdir(parents=True, exist_ok=True)
    target = home / INSTANCE_YAML
    shutil.copyfile(source, target)
    return target


def ensure_pool_limits(instance: dg.DagsterInstance, channels: list[str], limit: int = 1) -> None:
    """Create the landing and curated pools of ``channels`` with ``limit`` slots (what ``dagster
    instance concurrency set landing-<c> 1`` does), so that the first runs queued together are
    limited too (see the gap described in ``conf/dagster.yaml``)."""
    for channel in channels:
        for pool in (landing_pool_name(channel), curated_pool_name(channel)):
            if instance.event_log_storage.get_concurrency_info(pool).slot_count != limit:
                instance.event_log_storage.set_concurrency_slots(pool, limit)


def pool_limit(instance: dg.DagsterInstance, pool: str) -> int | None:
    """The limit ``instance`` applies to ``pool``: its own, or the instance's default; None when
    the pool is unlimited (an instance configured without ``conf/dagster.yaml``)."""
    return instance.event_log_storage.get_concurrency_info(pool).limit
