"""Names of the per-channel definitions, in one place so that tests, the demo and docs agree."""

from __future__ import annotations

import re

import dagster as dg

__all__ = ["channel_key", "checks_job_name", "curated_job_name", "curated_key", "curated_op_name",
           "curated_pool_name", "curated_sensor_name", "ident", "landed_key", "landing_job_name", "landing_op_name",
           "landing_pool_name", "landing_sensor_name"]


def ident(channel: str) -> str:
    """The channel name as a Dagster identifier (letters, digits, underscores)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", channel)


def channel_key(channel: str) -> dg.AssetKey:
    """The channel itself: an external asset the agent fills; channel checks attach to it."""
    return dg.AssetKey(["channel", ident(channel)])


def landed_key(channel: str) -> dg.AssetKey:
    return dg.AssetKey(["landed", ident(channel)])


def curated_key(channel: str) -> dg.AssetKey:
    return dg.AssetKey(["curated", ident(channel)])


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


def landing_job_name(channel: str) -> str:
    return f"land_{ident(channel)}"


def curated_job_name(channel: str) -> str:
    return f"curate_{ident(channel)}"


def checks_job_name(channel: str) -> str:
    return f"check_{ident(channel)}"
