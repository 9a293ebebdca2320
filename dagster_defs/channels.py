"""The channels to orchestrate: :func:`ingest_toolkit.orchestrate.settings.load_channel_specs`."""

from __future__ import annotations

from ingest_toolkit.orchestrate.settings import load_channel_specs

__all__ = ["load_channel_specs"]
