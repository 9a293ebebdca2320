"""The real channels and configuration directories of :mod:`tests.orchestrate.helpers`, for the Dagster tests."""

from __future__ import annotations

from ..orchestrate.helpers import HOUR_MS, Setup, damage_channel, events_at, fill, hour_ms, make_setup, wait_until

__all__ = ["HOUR_MS", "Setup", "damage_channel", "events_at", "fill", "hour_ms", "make_setup", "wait_until"]
