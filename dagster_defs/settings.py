"""The orchestration settings the definitions are built from: :mod:`ingest_toolkit.orchestrate.settings`."""

from __future__ import annotations

from ingest_toolkit.orchestrate.settings import (
    ChannelSpec,
    OrchestrationSettings,
    conf_dir,
    load_orchestration_settings,
)

__all__ = ["ChannelSpec", "OrchestrationSettings", "conf_dir", "load_orchestration_settings"]
