"""Names of the per-channel definitions, in one place so that tests, the demo and docs agree.

Asset keys name the channel *and* the stage in one component (``events_channel``,
``events_landed``, ``events_curated``): the asset graph labels a node with the last component of
its key, and keys like ``landed/events`` showed three nodes called ``events``. The stage is also
the asset's group (``channels``, ``landing``, ``curated``), and the op of an asset is named like
its key (run configuration goes under ``ops: {events_landed: ...}``).
"""

from __future__ import annotations

import re

import dagster as dg

__all__ = ["channel_key", "checks_job_name", "curated_job_name", "curated_key", "curated_op_name",
           "curated_pool_name", "curated_sensor_name", "ident", "landed_key", "landing_job_name", "landing_op_name",
           "landing_pool_name", "landing_sensor_name", "maintenance_job_name", "maintenance_key", "maintenance_op_name",
           "maintenance_schedule_name", "observer_sensor_name"]


def ident(channel: str) -> str:
    """The channel name as a Dagster identifier (letters, digits, underscores)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", channel)


def channel_key(channel: str) -> dg.AssetKey:
    """The channel itself: an observable source asset the agent fills; channel checks attach to it."""
    return dg.AssetKey([f"{ident(channel)}_channel"])


def landed_key(channel: str) -> dg.AssetKey:
    """The landed table (Parquet by event date/hour) of the channel."""
    return dg.AssetKey([f"{ident(channel)}_landed"])


def curated_key(channel: str) -> dg.AssetKey:
    """The hourly curated table of the channel."""
    return dg.AssetKey([f"{ident(channel)}_curated"])


def landing_op_name(channel: str) -> str:
    """The op of the landing asset (run config goes under ``ops: {<this>: {config: ...}}``)."""
    return landed_key(channel).to_python_identifier()


def curated_op_name(channel: str) -> str:
    return curated_key(channel).to_python_identifier()


def landing_pool_name(channel: str) -> str:
    """The concurrency pool of the landing asset: one landing run of a channel at a time."""
    return f"landing-{channel}"


def curated_pool_name(channel: str) -> str:
    """The concurrency pool of the curated asset: no two runs swap the same partition at once."""
    return f"curated-{channel}"


def landing_sensor_name(channel: str) -> str:
    return f"landing_sensor_{ident(channel)}"


def curated_sensor_name(channel: str) -> str:
    return f"curated_sensor_{ident(channel)}"


def observer_sensor_name(channel: str) -> str:
    """The sensor that records the channel's state as observations of its asset."""
    return f"channel_observer_{ident(channel)}"


def landing_job_name(channel: str) -> str:
    return f"land_{ident(channel)}"


def curated_job_name(channel: str) -> str:
    return f"curate_{ident(channel)}"


def checks_job_name(channel: str) -> str:
    return f"check_{ident(channel)}"


def maintenance_key(channel: str) -> dg.AssetKey:
    """The upkeep of the landed table (Delta, Iceberg): compaction and retention."""
    return dg.AssetKey([f"{ident(channel)}_landed_maintenance"])


def maintenance_op_name(channel: str) -> str:
    return maintenance_key(channel).to_python_identifier()


def maintenance_job_name(channel: str) -> str:
    return f"maintain_{ident(channel)}"


def maintenance_schedule_name(channel: str) -> str:
    return f"maintenance_schedule_{ident(channel)}"
