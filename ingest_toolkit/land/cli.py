"""``ingest-toolkit land``: land committed events of one channel as Parquet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from ..cli_common import is_verbose, verbose_option
from ..errors import ConfigError
from ..settings import load_channel_settings
from .config import LandingConfig, agent_client, load_landing_config
from .drain import land_until_empty
from .landing import LandingResult, land_once
from .source import InProcessSource, TakeSource
from .spark import spark_session

__all__ = ["land_command"]


@click.command("land")
@click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("conf/landing.toml"), show_default=True, help="Landing settings (TOML: [landing], [spark]).")
@click.option("--channel", required=True, help="Channel name: the directory under the landing root, and the "
              "channel to take from.")
@click.option("--max-events", type=click.IntRange(min=1), help="Events per take (default: [landing] max_events).")
@click.option("--channel-conf", type=click.Path(dir_okay=False, path_type=Path),
              help="Open the channel in-process with the [channel] table of this TOML file.")
@click.option("--agent", help="Take through this agent (host:port) instead; overrides [landing] agent.")
@click.option("--drain", is_flag=True, help="Land batch after batch until the channel's backlog is empty "
              "(two batches in flight: the next take overlaps the current Spark write).")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON document.")
@verbose_option
def land_command(conf_path: Path, channel: str, max_events: int | None, channel_conf: Path | None,
                 agent: str | None, drain: bool, as_json: bool) -> None:
    """Take committed events of CHANNEL in one transaction, write them as Parquet, commit the take
    (exactly once in the landed table, whatever crashes; see docs/landing.md)."""
    overrides: dict[str, Any] = {k: v for k, v in (("max_events", max_events), ("agent", agent)) if v is not None}
    if channel_conf is not None:
        overrides["channel_conf"] = str(channel_conf)
    config = load_landing_config(conf_path, **overrides)
    with _source(config, channel) as source:
        from pyspark.sql import SparkSession

        owned = SparkSession.getActiveSession() is None  # never stop a session this process already had
        spark = spark_session(config.spark, quiet=not is_verbose())  # Spark's log with --verbose
        try:
            results = land_until_empty(source, config, spark) if drain else [land_once(source, config, spark)]
        finally:
            if owned:
                spark.stop()
    if not as_json:
        for result in results:
            _print_result(result)
    else:
        click.echo(json.dumps({"format": "ingest-toolkit/land/1", "channel": channel, "root": config.root,
                               "runs": [r.to_json() for r in results], "totals": _totals(results)}, indent=2))


def _print_result(r: LandingResult) -> None:
    rate = f"{r.events / r.duration_s:,.0f} events/s" if r.duration_s and r.events else "-"
    click.echo(f"landed {r.events:,} events ({r.redelivered:,} redelivered, already landed) from {r.channel!r}: "
               f"{r.files} files, {r.bytes:,} bytes, batch {r.batch_id or '-'}, {r.duration_s:.2f} s ({rate}); "
               f"backlog {r.backlog_after:,}")


def _totals(results: list[LandingResult]) -> dict[str, Any]:
    keys = ("events", "redelivered", "taken", "files", "bytes")
    totals: dict[str, Any] = {k: sum(getattr(r, k) for r in results) for k in keys}
    totals["duration_s"] = round(sum(r.duration_s for r in results), 3)
    totals["backlog_after"] = results[-1].backlog_after if results else None
    return totals


@contextmanager
def _source(config: LandingConfig, channel: str) -> Iterator[TakeSource]:
    """The agent's gRPC take when ``agent`` is configured, else the channel opened in-process."""
    if config.agent:
        from ..rpc.client import RemoteSource

        with agent_client(config) as client:
            yield RemoteSource(client, channel, config.lease_seconds)
        return
    from ..channel import FileChannel

    ch = FileChannel(**_channel_settings(config, channel))
    try:
        yield InProcessSource(ch, channel)
    finally:
        ch.close()


def _channel_settings(config: LandingConfig, channel: str) -> dict[str, Any]:
    if config.channel_conf:
        return load_channel_settings(Path(config.channel_conf))
    if config.agent_conf and Path(config.agent_conf).exists():
        from ..collect.config import load_agent_config

        channels = load_agent_config(config.agent_conf).channels
        if channel not in channels:
            raise ConfigError(f"{config.agent_conf} has no [channels.{channel}] table; name one of "
                              f"{sorted(channels)} or give --channel-conf", key=f"channels.{channel}")
        return channels[channel].model_dump()
    raise ConfigError("no channel settings for an in-process landing: set [landing] channel_conf or agent_conf, "
                      "give --channel-conf, or set [landing] agent to take through an agent",
                      key="landing.channel_conf")
