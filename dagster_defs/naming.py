"""Names of the per-channel definitions, in one place so that tests, the demo and docs agree."""

from __future__ import annotations

import re

import dagster as dg

__all__ = ["channel_key", "checks_job_name", "curated_job_name", "curated_key", "curated_op_name", "ident",
           "ensure_pool_limits", "landed_key", "landing_job_name", "landing_op_name", "pool_name"]


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


def pool_name(channel: str) -> str:
    return f"landing-{channel}"


def ensure_pool_limits(instance: dg.DagsterInstance, channels: list[str], limit: int = 1) -> None:
    """Create the landing pools with ``limit`` slots (``dagster instance concurrency set
    landing-<channel> 1`` does the same), so that the very first queued runs are limited too."""
    for channel in channels:
        info = instance.event_log_storage.get_concurrency_info(pool_name(channel))
        if info.slot_count != limit:
            instance.event_log_storage.set_concurrency_slots(pool_name(channel), limit)


def landing_job_name(channel: str) -> str:
    return f"land_{ident(channel)}"


def curated_job_name(channel: str) -> str:
    return f"curate_{ident(channel)}"


def checks_job_name(channel: str) -> str:
    return f"check_{ident(channel)}"
