"""The Dagster layer of ingest-toolkit (the ``[dagster]`` extra): a component per channel.

:class:`IngestChannelComponent` is registered for ``dg`` (entry point
``dagster_dg_cli.registry_modules``): ``dg list components`` shows it and ``dg scaffold defs
ingest_toolkit.dagster.IngestChannelComponent events`` writes a ``defs.yaml`` for channel
``events``. An instance turns the orchestrator-neutral functions of
:mod:`ingest_toolkit.orchestrate` into the channel's assets, sensors, schedule, jobs and asset
checks (:mod:`.factory`); nothing here decides anything of its own.
"""

from __future__ import annotations

from .component import IngestChannelComponent

__all__ = ["IngestChannelComponent"]
