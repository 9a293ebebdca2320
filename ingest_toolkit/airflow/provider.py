"""What Airflow's providers manager reads (the ``apache_airflow_provider`` entry point): the
``ingest_agent`` connection type and its hook, so the UI offers the agent connection's form."""

from __future__ import annotations

from typing import Any

__all__ = ["get_provider_info"]


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "ingest-toolkit",
        "name": "Ingest Toolkit",
        "description": "Landing, curation and checks of ingest-toolkit file channels (ingest_toolkit.airflow).",
        "connection-types": [{"connection-type": "ingest_agent",
                              "hook-class-name": "ingest_toolkit.airflow.hooks.IngestAgentHook"}],
    }
