"""The Airflow assets of a channel's tables: downstream DAGs schedule on them.

``schedule=[landed_asset("events")]`` runs a DAG after every landing of channel ``events``; the
asset event's extra holds what the landing did (events, landed hours in ``partitions``, the
table's location). The names are fixed per channel, so a DAG file needs no configuration to
refer to them.
"""

from __future__ import annotations

from airflow.sdk import Asset

__all__ = ["curated_asset", "landed_asset"]


def landed_asset(channel: str) -> Asset:
    """The landed table of ``channel`` (``<landing root>/<channel>``)."""
    return Asset(name=f"ingest_toolkit.{channel}.landed", uri=f"ingest-toolkit://{channel}/landed",
                 group="ingest_toolkit")


def curated_asset(channel: str) -> Asset:
    """The hourly curated table of ``channel`` (``<curated_root>/<channel>``)."""
    return Asset(name=f"ingest_toolkit.{channel}.curated", uri=f"ingest-toolkit://{channel}/curated",
                 group="ingest_toolkit")
