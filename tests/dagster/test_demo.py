"""The main job end to end: `python -m dagster_defs.demo` in a scratch copy of conf/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.integration
def test_demo_runs_the_whole_pipeline_through_a_real_agent(tmp_path: Path) -> None:
    shutil.copytree(REPO / "conf", tmp_path / "conf")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INGEST_", "DAGSTER_HOME"))}
    done = subprocess.run([sys.executable, "-m", "dagster_defs.demo", "--files", "3", "--lines", "400"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "8 of 8 checks passed" in output
    assert "via agent 127.0.0.1:" in output  # the landing took through the agent's gRPC API
    landed = pq.read_table(tmp_path / "var" / "landing" / "events")
    assert landed.num_rows == 1200
    assert len(set(landed.column("event_id").to_pylist())) == 1200
    assert (tmp_path / "var" / "dagster" / "dagster.yaml").exists()
    assert not (tmp_path / "var" / "agent" / "ports.json").exists()  # the agent stopped cleanly


def test_the_check_table_piped_keeps_every_name_whole() -> None:
    """Piped, the demo's check table was cut at 80 columns and check names broke mid-word."""
    from dagster_defs import demo
    from dagster_defs.demo_pipeline import CheckRow, check_table

    rows = [CheckRow("curated_no_duplicate_event_ids", "events_with_a_long_channel_name_curated", True, "ERROR",
                     "curated table: 10000 rows in 3 files, every event_id once " * 3)]
    assert not demo.console.is_terminal  # pytest captures stdout: what a pipe gets
    with demo.console.capture() as captured:
        demo.console.print(check_table(rows))
    lines = captured.get().splitlines()
    body = [line for line in lines if "curated_no_duplicate_event_ids" in line]
    assert len(body) == 1 and "events_with_a_long_channel_name_curated" in body[0], lines
    assert len([line for line in lines if line.startswith("│")]) == 1, lines  # the row is one line
