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
    assert "7 of 7 checks passed" in output
    assert "via agent 127.0.0.1:" in output  # the landing took through the agent's gRPC API
    landed = pq.read_table(tmp_path / "var" / "landing" / "events")
    assert landed.num_rows == 1200
    assert len(set(landed.column("event_id").to_pylist())) == 1200
    assert (tmp_path / "var" / "dagster" / "dagster.yaml").exists()
    assert not (tmp_path / "var" / "agent" / "ports.json").exists()  # the agent stopped cleanly
