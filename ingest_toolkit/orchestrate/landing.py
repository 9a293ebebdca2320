"""A landing run of one configured channel, for an orchestrator's task: route, token, run, summary.

:func:`land` is what a landing task runs: it finds how to reach the channel
(:func:`channel_route`: the configured agent; else in-process when no process owns it; else the
agent that owns it), lands up to ``batches`` take transactions with
:func:`~ingest_toolkit.land.run.land_channel` (Spark started only when there is something to
land), and returns the :class:`~ingest_toolkit.land.run.LandingRun`. :func:`landing_lines` are
the log lines of a run, :func:`landing_metadata` its summary as plain values (the landed hours in
``partitions`` drive the curation of those hours).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..numbers import byte_size
from .settings import ChannelSpec
from .verdict import PathValue, TextValue

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..land.config import LandingConfig
    from ..land.route import Route
    from ..land.run import LandingRun

__all__ = ["agent_status", "agent_token", "channel_route", "land", "landing_lines", "landing_metadata"]


def channel_route(spec: ChannelSpec, config: LandingConfig) -> Route:
    """How a run reaches the channel: the configured agent; else in-process when no process
    owns it; else the agent that owns it. A channel owned by a process whose endpoint cannot
    be found (or trusted) is a ConfigError naming the fix."""
    from ..channel_conf import NamedChannel
    from ..land.route import resolve_route

    origin = f"{spec.agent_conf or 'the agent configuration'} [channels.{spec.name}]"
    named = NamedChannel(spec.settings, origin, Path(spec.agent_conf) if spec.agent_conf else None)
    return resolve_route(config, spec.name, named)


def agent_token(config: LandingConfig, given: str | None = None) -> str | None:
    """``given`` (a token the orchestrator holds as a secret), else the variable ``[landing]
    agent_token_env`` names (or the owner agent's ``token_env``), else ``INGEST_AGENT_TOKEN``,
    read now (run time)."""
    if given is None:
        return os.environ.get(config.agent_token_env or "INGEST_AGENT_TOKEN")
    return given


def agent_status(spec: ChannelSpec, config: LandingConfig, token: str | None = None) -> dict[str, Any] | None:
    """The channel's live status from the agent the landing takes through (configured, or the
    channel's owner); None when a landing would open the channel in-process or the owner's
    endpoint is unknown (callers then read ``checkpoint.meta``). Raises IngestError when the
    agent does not answer."""
    from ..land.config import agent_client

    try:
        route = channel_route(spec, config)
    except ConfigError:
        return None
    if not route.remote:
        return None
    with agent_client(route.config, token=agent_token(route.config, token)) as client:
        return client.status(spec.name)


def land(spec: ChannelSpec, config: LandingConfig, start_spark: Callable[[], SparkSession], *, batches: int,
         token: str | None = None, notice: Callable[[str], None] | None = None) -> LandingRun:
    """Land channel ``spec`` (up to ``batches`` take transactions); ``notice`` receives the route's
    one-line notice (which agent it takes through) when there is one. Raises LandingError or
    ConfigError; batches that completed before a failure stay landed."""
    from ..land.run import land_channel

    route = channel_route(spec, config)
    if route.notice and notice is not None:
        notice(route.notice)
    return land_channel(route, start_spark, batches=batches, token=agent_token(route.config, token))


def landing_lines(run: LandingRun, channel: str) -> list[str]:
    """One log line per take transaction of ``run``, or one that says nothing was landed."""
    if not run.results:
        return [f"channel {channel} has no committed events ({run.route.description}): nothing to land, Spark was "
                "not started"]
    return [f"took {r.taken} events of channel {channel}, landed {r.events} in {r.files} files (batch {r.batch_id}, "
            f"{r.redelivered} already landed), backlog after: {r.backlog_after}" for r in run.results]


def landing_metadata(run: LandingRun, root: str, channel: str) -> dict[str, Any]:
    """What a landing run did, as plain values (counts per run are text: not plotted). The table:
    ``format``, ``table_uri``, and of the run's last committed batch ``table_version`` (the Delta
    version, Iceberg snapshot id or Parquet commit number it produced), ``batch_number`` (the
    channel's batch number in the table) and ``last_batch_events``; ``table_versions`` lists
    every batch's version."""
    results = run.results
    # Every hour the taken events are in, those of batches an earlier run landed (redelivered)
    # included: the curation of those hours reads them from here.
    partitions = sorted({p for r in results for p in r.partitions})
    last = results[-1] if results else None
    return {
        "events": sum(r.events for r in results), "taken": sum(r.taken for r in results),
        "bytes": sum(r.bytes for r in results), "size": TextValue(byte_size(sum(r.bytes for r in results))),
        "files": TextValue(sum(r.files for r in results)),
        "batch_id": (last.batch_id if last else None) or "", "batch_ids": [r.batch_id for r in results if r.batch_id],
        "take_transactions": TextValue(len(results)),
        "redelivered": sum(r.redelivered for r in results),
        "backlog_after": run.backlog_after, "source": run.route.description, "spark_started": run.spark_started,
        "temp_files_pending": run.temp_files_pending,
        "root": PathValue(f"{root}/{channel}"),
        "manifest": str((last.manifest_uri if last else None) or ""), "partitions": partitions,
        **_table_metadata(run, root, channel)}


def _table_metadata(run: LandingRun, root: str, channel: str) -> dict[str, Any]:
    """The table the run committed to and what its last committed batch produced."""
    table_format = run.route.config.format
    committed = [r for r in run.results if r.table_version is not None]
    last = committed[-1] if committed else None
    version: Any = None if last is None else last.table_version
    if table_format == "iceberg" and version is not None:  # snapshot ids are not ordered: shown, not plotted
        version = TextValue(version)
    return {"format": table_format, "table_uri": PathValue((last.table_uri if last else None) or f"{root}/{channel}"),
            "table_version": version, "table_versions": [r.table_version for r in committed],
            "batch_number": last.batch_number if last is not None else None,
            "last_batch_events": last.events if last is not None else 0}
