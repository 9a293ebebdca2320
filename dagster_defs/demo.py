"""The main job in one command: ``python -m dagster_defs.demo`` (from the repository root).

1. Clears the demo's data directories (channel, agent state, spool, landed and curated tables;
   the Dagster history under ``var/dagster`` is kept), then drops sample files into the spool
   directory: each written next to it and renamed in, so the agent never reads half a file.
2. Starts the agent (``ingest-toolkit agent --conf conf/agent.toml``, ephemeral ports read from
   its ports file) and waits until every line is committed to the channel.
3. With a persistent Dagster instance in ``var/dagster`` (``DAGSTER_HOME``): lands the channel
   through the agent's gRPC API (leased takes), builds the curated hourly partitions that
   received data, and runs every asset check, while the agent is live.
4. Stops the agent with SIGTERM (clean: sources stopped, channels checkpointed), prints where the
   Parquet is and a table of the check results, and exits 1 if any check failed.

Afterwards ``DAGSTER_HOME=$PWD/var/dagster .venv/bin/dg dev`` shows the same runs and checks.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ingest_toolkit.cli_common import output_console

from .demo_pipeline import check_table, run_pipeline
from .demo_steps import Agent, DemoPaths, clear, prepare_instance, wait_ingested, write_spool_files

__all__ = ["main"]

console = output_console()  # piped: nothing wraps, so no check name or path is broken mid-word


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dagster_defs.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=5, help="sample files dropped into the spool (default 5)")
    parser.add_argument("--lines", type=int, default=2000, help="events per file (default 2000)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for ingestion (default 120)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    started = time.monotonic()
    paths = DemoPaths.from_conf(Path.cwd())
    clear(paths)
    instance_dir = prepare_instance(paths)
    console.print(f"[bold]1.[/] spool: {args.files} files x {args.lines} events -> {paths.spool}")
    total = write_spool_files(paths.spool, args.files, args.lines)
    agent = Agent.start(paths, console)
    try:
        console.print(f"[bold]2.[/] agent pid {agent.pid}, gRPC {agent.address}; waiting for the spool")
        wait_ingested(agent, paths, total, args.timeout)
        console.print(f"[bold]3.[/] Dagster (DAGSTER_HOME={instance_dir}): landing, curated partitions, checks")
        outcome = run_pipeline(paths, agent.address, console)
    finally:
        code = agent.stop()
        console.print(f"[bold]4.[/] agent stopped (exit code {code})")
    console.print(check_table(outcome.checks))
    console.print(f"landed Parquet:  {outcome.landed_dir}  ({outcome.landed_events} events, "
                  f"{outcome.landing_runs} landing run(s))")
    console.print(f"curated Parquet: {outcome.curated_dir}  (partitions {', '.join(outcome.partitions)})")
    console.print(f"Dagster UI on this state: DAGSTER_HOME={instance_dir} .venv/bin/dg dev")
    failed = [c for c in outcome.checks if not c.passed]
    console.print(f"{len(outcome.checks) - len(failed)} of {len(outcome.checks)} checks passed "
                  f"in {time.monotonic() - started:.0f} s" + (f"; FAILED: {', '.join(c.name for c in failed)}"
                                                              if failed else ""))
    return 1 if failed or code not in (0, None) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
