"""The Dagster part of the demo: landing, curated partitions and checks on a persistent instance."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
from pyarrow.fs import FileSelector, FileType
from rich.console import Console
from rich.table import Table

from ingest_toolkit.channel.checkpoint import read_checkpoint_meta
from ingest_toolkit.curate import landed_source, open_curated
from ingest_toolkit.curate.columns import RESCUED
from ingest_toolkit.curate.tables import CuratedTable
from ingest_toolkit.dagster.curated import partition_keys_for_hours
from ingest_toolkit.dagster.naming import (
    checks_job_name,
    curated_job_name,
    curated_key,
    curated_op_name,
    landing_job_name,
    landing_op_name,
)
from ingest_toolkit.dagster.partitions import hourly_partitions
from ingest_toolkit.land.config import LandingConfig
from ingest_toolkit.land.storage import HadoopStorage, Location, local_path
from ingest_toolkit.numbers import count, number
from ingest_toolkit.orchestrate.curation import hour_of_landed_dir
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings

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
    curated_format: str = "parquet"
    preview: Table | None = None  # three rows of the curated table


def run_pipeline(console: Console) -> Outcome:
    """Land every channel (through the agent that owns it), curate the hours that got data, run
    all checks; on the instance of ``DAGSTER_HOME`` and the settings of ``INGEST_CONF_DIR``.
    Spark runs in this process already (the runs' SparkResource reuses the session)."""
    from ingest_toolkit.land import load_landing_config
    from ingest_toolkit.orchestrate.settings import load_channel_specs, load_orchestration_settings

    from .definitions import defs as load_defs

    settings = load_orchestration_settings()
    specs = load_channel_specs(settings.agent_conf)
    defs = load_defs()  # the code location: one component instance per channel (dagster_defs/defs/)
    landing = load_landing_config(settings.landing_conf)
    outcome = Outcome()
    _clear_remote([f"{r.rstrip('/')}/{s.name}" for r in (landing.root, settings.curated_root) for s in specs])
    with dg.DagsterInstance.get() as instance:
        for spec in specs:
            _land(defs, instance, spec, outcome, console)
            _wait_for_checkpoint(spec, time.time_ns())
            _curate(defs, instance, spec, settings, landing, outcome, console)
            outcome.checks += _checks(defs, instance, spec)
    return outcome


def _land(defs: dg.Definitions, instance: dg.DagsterInstance, spec: ChannelSpec, outcome: Outcome,
          console: Console) -> None:
    job = defs.resolve_job_def(landing_job_name(spec.name))
    result = job.execute_in_process(instance=instance, run_config={
        **_QUIET, "ops": {landing_op_name(spec.name): {"config": {"batches": 1000}}}})
    meta = result.asset_materializations_for_node(landing_op_name(spec.name))[0].metadata
    outcome.landed_events += int(meta["events"].value)  # type: ignore[arg-type]
    outcome.landing_runs += 1
    events, files, takes = (int(meta[key].value) for key in ("events", "files", "take_transactions"))  # type: ignore[arg-type]
    console.print(f"   landed channel {spec.name}: {count(events, 'event')}, {count(files, 'file')}, "
                  f"{count(takes, 'take')} from {meta['source'].value}, "
                  f"backlog after {number(int(meta['backlog_after'].value))} (run {result.run_id[:8]})")  # type: ignore[arg-type]


def _wait_for_checkpoint(spec: ChannelSpec, after_ns: int, timeout: float = 30.0) -> None:
    """The channel checks judge checkpoint.meta: wait for one written after the landing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = read_checkpoint_meta(spec.checkpoint_dir)
        if info is not None and info.written_unix_ns > after_ns:
            return
        time.sleep(0.2)


def _clear_remote(uris: list[str]) -> None:
    """The demo's own tables on HDFS (``--hdfs``), deleted like var/landing is locally."""
    for uri in uris:
        if local_path(uri) is None:
            HadoopStorage(uri, _spark()).delete("")


def landed_partition_keys(landed: Path | Location, settings: OrchestrationSettings) -> list[str]:
    """The curated partitions that overlap the hour directories of a landed table (local, or a
    Location on HDFS)."""
    if isinstance(landed, Path):
        dirs = [f"{d.name}/{h.name}" for d in landed.glob("event_date=*") for h in d.glob("event_hour=*")]
    else:
        infos = landed.fs.get_file_info(FileSelector(landed.path, allow_not_found=True, recursive=True))
        dirs = [i.path for i in infos if i.type == FileType.Directory]
    hours = [h for h in map(hour_of_landed_dir, dirs) if h is not None]
    return partition_keys_for_hours(hourly_partitions(settings), sorted(hours))


def _curate(defs: dg.Definitions, instance: dg.DagsterInstance, spec: ChannelSpec, settings: OrchestrationSettings,
            landing: LandingConfig, outcome: Outcome, console: Console) -> None:
    local = local_path(landing.root)
    curated = local_path(settings.curated_root)
    outcome.landed_dir = str(local / spec.name) if local else f"{landing.root.rstrip('/')}/{spec.name}"
    outcome.curated_dir = str(curated / spec.name) if curated else f"{settings.curated_root.rstrip('/')}/{spec.name}"
    job = defs.resolve_job_def(curated_job_name(spec.name))
    hours = [entry.hour for entry in landed_source(landing, spec.name, _spark()).hours(counts=False).values()]
    for key in partition_keys_for_hours(hourly_partitions(settings), hours):
        result = job.execute_in_process(instance=instance, partition_key=key, run_config=_QUIET)
        meta = result.asset_materializations_for_node(curated_op_name(spec.name))[0].metadata
        added = meta["columns_added"].value
        rows, columns, rescued = (int(meta[k].value) for k in ("rows", "columns", "rescued_rows"))  # type: ignore[arg-type]
        console.print(f"   curated {spec.name} partition {key}: {count(rows, 'row')}, {count(columns, 'typed column')}"
                      + (f" (new: {', '.join(added)})" if added else "")  # type: ignore[arg-type]
                      + f", {number(rescued)} with rescued data")
        outcome.partitions.append(key)
    _curate_alike(defs, instance, spec, outcome.partitions, console)
    table = open_curated(settings.curated.for_channel(spec.name).table_format(landing.format), settings.curated_root,
                         spec.name, landing, _spark())
    outcome.curated_format = table.format
    outcome.preview = _preview(table)


# Where a component instance would read or write other tables than the default ones.
_OWN_TABLES = ("landing_conf", "landing_root", "table_format", "curated_root", "dagster_conf")


def _curate_alike(defs: dg.Definitions, instance: dg.DagsterInstance, spec: ChannelSpec, keys: list[str],
                  console: Console) -> None:
    """The same hours for every other curated asset of the code location over the same tables (the
    fleet's aggregator instance of channel ``events``, dagster_defs/defs/agg_a_events): the UI loads
    those definitions too, and without it showed their hours as "missing" right after the demo
    although their table is the one just curated. Building them again replaces the partitions with
    the same rows."""
    for key in defs.resolve_all_asset_keys():
        origin = defs.resolve_assets_def(key).metadata_by_key[key].get("dagster/component_origin")
        component = getattr(origin, "instance", None)
        if (key == curated_key(spec.name) or not key.path[-1].endswith("_curated") or component is None
                or getattr(component, "channel", None) != spec.name
                or any(getattr(component, name, None) is not None for name in _OWN_TABLES)):
            continue
        node = key.path[-1].removesuffix("_curated")
        job = defs.resolve_job_def(curated_job_name(node))
        for partition in keys:
            result = job.execute_in_process(instance=instance, partition_key=partition, run_config=_QUIET,
                                            raise_on_error=False)
            state = "built" if result.success else "FAILED (see its run in the UI)"
            console.print(f"   curated {node} partition {partition} (the same table, another instance): {state}")


def _preview(table: CuratedTable, rows: int = 3) -> Table | None:
    """The first ``rows`` rows of the curated table: its typed columns (the landed ones but
    event_id and event_time left out)."""
    schema = table.schema()
    data = table.read_arrow()
    if schema is None or data.num_rows == 0:
        return None
    columns = ["event_id", "event_time", *(c.name for c in schema.columns), RESCUED]
    columns = [c for c in columns if c in data.column_names]
    first = data.sort_by([("event_time", "ascending"), ("event_id", "ascending")]).slice(0, rows).select(columns)
    view = Table(title=f"curated table ({table.format}): {rows} of {data.num_rows} rows, typed columns")
    types = {c.name: c.type for c in schema.columns}
    for name in columns:
        view.add_column(f"{name}\n{types.get(name, str(first.schema.field(name).type))}", overflow="fold")
    for row in first.to_pylist():
        view.add_row(*("" if row[c] is None else str(row[c]) for c in columns))
    return view


def _spark() -> object:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


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
