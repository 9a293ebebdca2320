"""The Dagster part of the demo: landing, curated partitions and checks on a persistent instance."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
from rich.console import Console
from rich.table import Table

from ingest_toolkit.channel.checkpoint import read_checkpoint_meta

from .curated import hour_of_landed_dir, partition_keys_for_hours
from .naming import checks_job_name, curated_job_name, curated_op_name, landing_job_name, landing_op_name
from .partitions import hourly_partitions
from .settings import ChannelSpec, OrchestrationSettings
from .storage import local_path

__all__ = ["CheckRow", "Outcome", "check_table", "landed_partition_keys", "run_pipeline"]

# Runs log to the instance (visible in the UI); the terminal shows warnings and errors only.
_QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass(frozen=True)
class CheckRow:
    name: str
    asset: str
    passed: bool
    severity: str
    description: str


@dataclass
class Outcome:
    landed_dir: str = ""
    curated_dir: str = ""
    landed_events: int = 0
    landing_runs: int = 0
    partitions: list[str] = field(default_factory=list)
    checks: list[CheckRow] = field(default_factory=list)


def run_pipeline(paths: object, agent_address: str, console: Console) -> Outcome:
    """Land every channel through the agent, curate the hours that got data, run all checks."""
    from ingest_toolkit.land import load_landing_config, spark_session

    from .channels import load_channel_specs
    from .factory import definitions_from_conf
    from .settings import load_orchestration_settings

    os.environ["INGEST_LANDING__AGENT"] = agent_address  # the landing resource takes through the agent
    settings = load_orchestration_settings()
    specs = load_channel_specs(settings.agent_conf)
    defs = definitions_from_conf()
    landing = load_landing_config(settings.landing_conf)
    spark = spark_session(landing.spark)  # started once; the runs' SparkResource reuses it
    outcome = Outcome()
    try:
        with dg.DagsterInstance.get() as instance:
            for spec in specs:
                _land(defs, instance, spec, outcome, console)
                _wait_for_checkpoint(spec, time.time_ns())
                _curate(defs, instance, spec, settings, landing.root, outcome, console)
                outcome.checks += _checks(defs, instance, spec)
    finally:
        spark.stop()
    return outcome


def _land(defs: dg.Definitions, instance: dg.DagsterInstance, spec: ChannelSpec, outcome: Outcome,
          console: Console) -> None:
    job = defs.resolve_job_def(landing_job_name(spec.name))
    result = job.execute_in_process(instance=instance, run_config={
        **_QUIET, "ops": {landing_op_name(spec.name): {"config": {"batches": 1000}}}})
    meta = result.asset_materializations_for_node(landing_op_name(spec.name))[0].metadata
    outcome.landed_events += int(meta["events"].value)  # type: ignore[arg-type]
    outcome.landing_runs += 1
    console.print(f"   landed channel {spec.name}: {meta['events'].value} events, {meta['files'].value} files, "
                  f"{meta['take_transactions'].value} take(s) via {meta['source'].value}, "
                  f"backlog after {meta['backlog_after'].value} (run {result.run_id[:8]})")


def _wait_for_checkpoint(spec: ChannelSpec, after_ns: int, timeout: float = 30.0) -> None:
    """The channel checks judge checkpoint.meta: wait for one written after the landing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = read_checkpoint_meta(spec.checkpoint_dir)
        if info is not None and info.written_unix_ns > after_ns:
            return
        time.sleep(0.2)


def landed_partition_keys(landed: Path, settings: OrchestrationSettings) -> list[str]:
    """The curated partitions that overlap the hour directories of a local landed table."""
    dirs = [f"{day.name}/{hour.name}" for day in landed.glob("event_date=*") for hour in day.glob("event_hour=*")]
    hours = [h for h in map(hour_of_landed_dir, dirs) if h is not None]
    return partition_keys_for_hours(hourly_partitions(settings), sorted(hours))


def _curate(defs: dg.Definitions, instance: dg.DagsterInstance, spec: ChannelSpec, settings: OrchestrationSettings,
            landing_root: str, outcome: Outcome, console: Console) -> None:
    landed = (local_path(landing_root) or Path(landing_root)) / spec.name
    curated = Path(settings.curated_root).resolve() / spec.name
    outcome.landed_dir, outcome.curated_dir = str(landed), str(curated)
    job = defs.resolve_job_def(curated_job_name(spec.name))
    for key in landed_partition_keys(landed, settings):
        result = job.execute_in_process(instance=instance, partition_key=key, run_config=_QUIET)
        rows = result.asset_materializations_for_node(curated_op_name(spec.name))
        console.print(f"   curated {spec.name} partition {key}: {rows[0].metadata['rows'].value} rows")
        outcome.partitions.append(key)


def _checks(defs: dg.Definitions, instance: dg.DagsterInstance, spec: ChannelSpec) -> list[CheckRow]:
    job = defs.resolve_job_def(checks_job_name(spec.name))
    result = job.execute_in_process(instance=instance, run_config=_QUIET, raise_on_error=False)
    return [CheckRow(e.check_name, e.asset_key.to_user_string(), e.passed, e.severity.value, e.description or "")
            for e in result.get_asset_check_evaluations()]


def check_table(rows: list[CheckRow]) -> Table:
    table = Table(title="asset checks", show_lines=False)
    for column in ("asset", "check", "result", "what it saw"):  # names never wrap; the text wraps at words
        table.add_column(column, no_wrap=column != "what it saw")
    for row in sorted(rows, key=lambda r: (r.asset, r.name)):
        verdict = "[green]passed[/]" if row.passed else (
            "[yellow]WARN[/]" if row.severity == "WARN" else "[red]FAILED[/]")
        table.add_row(row.asset, row.name, verdict, row.description)
    return table
