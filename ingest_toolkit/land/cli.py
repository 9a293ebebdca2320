"""``ingest-toolkit land``: land committed events of one channel into its table (plain Parquet,
Delta Lake or Iceberg: ``[landing] format`` or ``--format``).

Where it takes from is :mod:`ingest_toolkit.land.route`'s decision: an agent given by
``--agent``/``--ports-file``/``[landing] agent``; else the channel in-process when no process
owns it; else the agent that owns it. The first line on stderr says which. The run itself is
:func:`~ingest_toolkit.land.run.land_channel`: an empty channel ends before Spark starts.

While it runs it shows its progress (:mod:`ingest_toolkit.land.progress`): on a terminal a live
footer on stderr (the Spark start as a step of its own, then events landed of the backlog, rate,
batches), otherwise one line per batch on stdout as each batch completes.

``--check`` checks what the run needs (:mod:`ingest_toolkit.land.preflight`: the landing root
writable, Java and Spark, the agent, the channel), one line each, and exits (0 when all passed,
else 1); a run makes each of these checks before its first take and takes nothing when one fails.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..cli_common import is_verbose, stderr_is_terminal, verbose_option
from ..numbers import count
from .config import LandingConfig, load_landing_config
from .preflight import ensure_ready, landing_checks, verdict
from .progress import LandingProgress, LineProgress, TerminalProgress
from .route import Route, ports_file_address, resolve_route
from .run import LandingRun, land_channel
from .spark import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["land_command"]


@click.command("land")
@click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("conf/landing.toml"), show_default=True, help="Landing settings (TOML: [landing], [spark]).")
@click.option("--channel", required=True, help="Channel name: the directory under the landing root, and the "
              "channel to take from.")
@click.option("--max-events", type=click.IntRange(min=1), help="Events per take (default: [landing] max_events).")
@click.option("--format", "table_format", type=click.Choice(["parquet", "delta", "iceberg"]),
              help="The landed table's format (default: [landing] format; docs/landing.md, 'Table formats').")
@click.option("--channel-conf", type=click.Path(dir_okay=False, path_type=Path),
              help="The channel's settings: a [channel] file, or an agent configuration naming it "
                   "(default: [landing] channel_conf, else agent_conf).")
@click.option("--agent", help="Take through this agent (host:port); overrides [landing] agent.")
@click.option("--ports-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Take through the local agent whose ports file this is (host 127.0.0.1), like send's.")
@click.option("--drain", is_flag=True, help="Land batch after batch until the channel's committed backlog is "
              "zero (two batches in flight; see docs/landing.md for when it stops while producers add events).")
@click.option("--check", is_flag=True, help="Check in seconds what the landing needs (the root writable, Java and "
              "Spark usable, the agent reachable, the channel readable), print one line per check and exit; "
              "nothing is taken and Spark is not started. A landing makes each check before its first take.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON document.")
@verbose_option
def land_command(conf_path: Path, channel: str, max_events: int | None, table_format: str | None,
                 channel_conf: Path | None, agent: str | None, ports_file: Path | None, drain: bool,
                 check: bool, as_json: bool) -> None:
    """Take committed events of CHANNEL in one transaction, write them to its table (Parquet, a
    Delta or an Iceberg table), commit the take (exactly once in the landed table, whatever
    crashes; see docs/landing.md)."""
    if agent and ports_file:
        raise click.UsageError("give --agent or --ports-file, not both")
    pairs = (("max_events", max_events), ("agent", agent), ("format", table_format))
    overrides: dict[str, Any] = {k: v for k, v in pairs if v is not None}
    if ports_file is not None:
        overrides["agent"] = ports_file_address(ports_file)
    if channel_conf is not None:
        overrides["channel_conf"] = str(channel_conf)
    config = load_landing_config(conf_path, **overrides)
    route = resolve_route(config, channel)
    click.echo(_announcement(route, agent, ports_file), err=True)
    if check:
        _check(route, as_json)
        return
    ensure_ready(route)  # nothing is taken when a check fails
    with _progress(as_json) as report:
        spark = _Spark(config, report)
        try:
            run = land_channel(route, spark.start, batches=None if drain else 1, overlap=drain, report=report)
        finally:
            spark.stop()
    _report(run, config, as_json)


def _check(route: Route, as_json: bool) -> None:
    """``land --check``: one line per check, then the verdict (exit 1 when a check failed)."""
    checks = landing_checks(route)
    passed, line = verdict(checks)
    if as_json:
        click.echo(json.dumps({"format": "ingest-toolkit/land-check/1", "channel": route.channel, "passed": passed,
                               "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        for item in checks:
            click.echo(item.line())
    if not passed:
        raise click.ClickException(line)
    if not as_json:
        click.echo(line)


def _announcement(route: Route, agent: str | None, ports_file: Path | None) -> str:
    """The first line on stderr: where this landing takes from, and how that was decided."""
    if route.notice:
        return route.notice
    if not route.remote:
        return f"landing channel {route.channel!r} {route.description}: no process owns it"
    given = ("--agent" if agent else f"--ports-file {ports_file}" if ports_file else "[landing] agent")
    return f"landing channel {route.channel!r} through {route.description} (given by {given})"


@contextmanager
def _progress(as_json: bool) -> Iterator[LandingProgress]:
    """The live footer on a terminal, else lines as batches complete (none on stdout for --json)."""
    if stderr_is_terminal():
        with TerminalProgress(print_batches=not as_json) as live:
            yield live
    else:
        yield LineProgress(print_batches=not as_json)


def _report(run: LandingRun, config: LandingConfig, as_json: bool) -> None:
    """The end of the output: the JSON document, or what is left to say (the batch lines were
    printed as the batches completed)."""
    if as_json:
        click.echo(json.dumps(_document(run, run.route.channel, config), indent=2))
        return
    if not run.results:
        spark = "; Spark was not started" if config.format == "parquet" else ""
        click.echo(f"nothing to land: channel {run.route.channel!r} has no committed events "
                   f"({run.route.description}){spark}")
    pending = run.temp_files_pending
    if pending:
        click.echo(f"{count(pending, 'temporary file')} of killed commits under "
                   f"{config.root}/{run.route.channel}/_manifests "
                   f"kept: younger than staging_grace_seconds ({config.staging_grace_seconds:g} s); a later "
                   "landing removes them")


class _Spark:
    """The command's session, started only when there is something to land (a step of its own in
    the progress); stopped at the end unless this process already had one (a caller's session
    keeps running)."""

    def __init__(self, config: LandingConfig, report: LandingProgress) -> None:
        self.config, self.owned, self.report = config, False, report
        self.session: SparkSession | None = None

    def start(self) -> SparkSession:
        from pyspark.sql import SparkSession

        self.owned = SparkSession.getActiveSession() is None
        self.report.spark_starting()
        started = time.monotonic()
        self.session = session = spark_session(self.config.spark, quiet=not is_verbose())  # Spark's log with --verbose
        self.report.spark_started(time.monotonic() - started)
        return session

    def stop(self) -> None:
        if self.session is not None and self.owned:
            self.session.stop()


def _document(run: LandingRun, channel: str, config: LandingConfig) -> dict[str, Any]:
    return {"format": "ingest-toolkit/land/1", "channel": channel, "root": config.root,
            "source": run.route.description, "runs": [r.to_json() for r in run.results],
            "totals": _totals(run)}


def _totals(run: LandingRun) -> dict[str, Any]:
    keys = ("events", "redelivered", "taken", "files", "bytes")
    totals: dict[str, Any] = {k: sum(getattr(r, k) for r in run.results) for k in keys}
    totals["duration_s"] = round(sum(r.duration_s for r in run.results), 3)
    totals["backlog_after"] = run.backlog_after
    totals["temp_files_pending"] = run.temp_files_pending
    return totals
