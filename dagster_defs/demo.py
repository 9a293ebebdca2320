"""The main job in one command: ``python -m dagster_defs.demo`` (from the repository root).

Everything it writes is under ``var/demo`` (its own configuration, channel, agent state, spool,
landed and curated tables, Dagster instance, agent log; see :mod:`dagster_defs.demo_steps`), and
it deletes nothing else, so an agent running from ``conf/agent.toml`` and its data are never
touched.

1. Deletes ``var/demo`` (refusing, with nothing deleted, when a live process holds a lock in
   it), writes ``var/demo/conf`` from ``conf/`` (every path in the tree, ephemeral ports), then
   drops sample files into the demo's spool directory: each written next to it and renamed in,
   so the agent never reads half a file.
2. Starts the demo's agent (``ingest-toolkit agent --conf var/demo/conf/agent.toml``, ports read
   from its ports file) and, while it ingests, the Spark session (before this process opens a
   gRPC channel: see ``ingest_toolkit.rpc._fork``); waits until every line is committed.
3. With a Dagster instance in ``var/demo/dagster`` (``DAGSTER_HOME``), recreated with the data:
   lands the channel through the agent that owns it (leased gRPC takes), builds the curated hourly
   partitions that received data, and runs every asset check, while the agent is live.
4. Stops the agent with SIGTERM (clean: sources stopped, channels checkpointed), prints where the
   Parquet is and a table of the check results, and exits 1 if any check failed.

Afterwards ``INGEST_CONF_DIR=var/demo/conf DAGSTER_HOME=$PWD/var/demo/dagster .venv/bin/dg dev``
shows the same runs and checks.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ingest_toolkit.cli_common import output_console
from ingest_toolkit.errors import IngestError
from ingest_toolkit.extras import extra_for
from ingest_toolkit.numbers import count

try:
    from .demo_pipeline import Outcome, check_table, run_pipeline
    from .demo_steps import (
        Agent,
        DemoPaths,
        clear,
        pin_replication,
        prepare_instance,
        use_demo_configuration,
        wait_ingested,
        write_demo_conf,
        write_spool_files,
    )
except ImportError as err:  # an install without the [dagster] extra: one line, nothing touched
    missing = extra_for(err, "python -m dagster_defs.demo")
    if missing is None:
        raise
    sys.exit(f"error: {missing} (from a checkout: pip install -e '.[dagster]')")

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["main"]

console = output_console()  # piped: nothing wraps, so no check name or path is broken mid-word


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dagster_defs.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=5, help="sample files dropped into the spool (default 5)")
    parser.add_argument("--lines", type=int, default=2000, help="events per file (default 2000)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for ingestion (default 120)")
    parser.add_argument("--hdfs", metavar="URI", help="land into this HDFS (e.g. hdfs://127.0.0.1:8020, started with "
                        "'ingest-toolkit hdfs start'): the landed and curated tables go under URI/demo/ (cleared "
                        "first) instead of var/demo/")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 when every check passed, 1 otherwise or when it stopped (one line says why)."""
    args = _args(argv)
    try:
        return _run(args, time.monotonic())
    except IngestError as err:
        console.print(f"[red]demo stopped:[/] {err}", highlight=False)
        return 1


def _run(args: argparse.Namespace, started: float) -> int:
    paths = DemoPaths.from_conf(Path.cwd(), args.hdfs)
    clear(paths)
    write_demo_conf(paths)
    use_demo_configuration(paths)
    instance_dir = prepare_instance(paths)
    console.print(f"[bold]1.[/] everything in {paths.tree}; spool: {count(args.files, 'file')} x "
                  f"{count(args.lines, 'event')}")
    total = write_spool_files(paths.spool, args.files, args.lines)
    agent = Agent.start(paths, console)
    spark: SparkSession | None = None
    try:
        console.print(f"[bold]2.[/] agent pid {agent.pid}, gRPC {agent.address}; starting Spark, waiting for the spool")
        spark = _start_spark(paths)
        wait_ingested(agent, paths, total, args.timeout)
        console.print(f"[bold]3.[/] Dagster (DAGSTER_HOME={instance_dir}): landing, curated partitions, checks")
        outcome = run_pipeline(console)
    finally:
        code = agent.stop()
        console.print(f"[bold]4.[/] agent stopped (exit code {code})")
        if spark is not None:
            spark.stop()
    return _report(paths, outcome, code, started)


def _start_spark(paths: DemoPaths) -> SparkSession:
    """The session the runs reuse, started before this process's first gRPC channel. On HDFS its
    client writes with the cluster's replication (a file gets its writer's, 3 by default)."""
    from ingest_toolkit.land import load_landing_config, spark_session

    spark = spark_session(load_landing_config(paths.conf / "landing.toml").spark)
    if paths.remote_root:
        _use_cluster_replication(paths, spark)
    return spark


def _use_cluster_replication(paths: DemoPaths, spark: SparkSession) -> None:
    """The cluster's replication for the session's client, and in the demo's landing.toml for
    ``dg dev`` on the demo's state (before anything opened the cluster: see the function used)."""
    from ingest_toolkit.land.storage.hadoop_replication import use_cluster_replication

    replication = use_cluster_replication(paths.remote_root or "", spark)
    pin_replication(paths, replication)
    console.print(f"   HDFS files are written with replication {replication}")


def _report(paths: DemoPaths, outcome: Outcome, code: int | None, started: float) -> int:
    console.print(check_table(outcome.checks))
    console.print(f"landed Parquet:  {outcome.landed_dir}  ({count(outcome.landed_events, 'event')}, "
                  f"{count(outcome.landing_runs, 'landing run')})")
    console.print(f"curated {outcome.curated_format}: {outcome.curated_dir}  (partitions "
                  f"{', '.join(outcome.partitions)})")
    if outcome.preview is not None:
        console.print(outcome.preview)
    relative = paths.tree.relative_to(paths.root) if paths.root in paths.tree.parents else paths.tree
    console.print(f"Dagster UI on this state: INGEST_CONF_DIR={relative}/conf DAGSTER_HOME={paths.dagster_home} "
                  ".venv/bin/dg dev")
    console.print(f"its channel: .venv/bin/ingest-toolkit channel inspect --conf {relative}/conf/agent.toml "
                  f"--channel {next(iter(paths.channels))}")
    failed = [c for c in outcome.checks if not c.passed]
    console.print(f"{len(outcome.checks) - len(failed)} of {len(outcome.checks)} checks passed "
                  f"in {time.monotonic() - started:.0f} s" + (f"; FAILED: {', '.join(c.name for c in failed)}"
                                                              if failed else ""))
    return 1 if failed or code not in (0, None) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
