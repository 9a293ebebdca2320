"""A landing task that starts Spark, in a process of its own (``airflow dags test``, as a worker
runs it): nothing of the JVM's start reaches the task's stderr, which Airflow's task log records
line by line at ERROR. The JVM's ``WARNING: Using incubator modules`` notice was such a line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..orchestrate.helpers import events_at, fill, hour_ms, load_channel_specs
from .conftest import DAGS
from .helpers import airflow_setup

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_DAG = '''
from datetime import UTC, datetime

from airflow.sdk import DAG

from ingest_toolkit.airflow import LandChannelOperator

with DAG(dag_id="land_with_spark", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    LandChannelOperator(task_id="land", channel="events")
'''


def test_a_landing_tasks_stderr_has_no_line_of_the_jvms_start(tmp_path: Path, airflow_db: Path) -> None:
    setup = airflow_setup(tmp_path)
    landing = setup.conf / "landing.toml"
    landing.write_text(landing.read_text() + '[spark.conf]\n"spark.driver.memory" = "512m"\n')
    from ingest_toolkit.channel import FileChannel

    channel = FileChannel(**load_channel_specs(setup.conf / "agent.toml")[0].settings)
    try:
        fill(channel, events_at(50, hour_ms("2026-11-20T08:00:00+00:00")))
    finally:
        channel.close()
    (DAGS / "land_with_spark.py").write_text(_DAG)
    try:
        done = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "land_with_spark"],
                              env={**os.environ, "INGEST_CONF_DIR": str(setup.conf)}, capture_output=True,
                              text=True, timeout=600)
    finally:
        (DAGS / "land_with_spark.py").unlink()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "took 50 events of channel events, landed 50" in done.stdout + done.stderr
    assert (tmp_path / "landing" / "events" / "event_date=2026-11-20" / "event_hour=08").is_dir()  # Spark wrote it
    assert "Using incubator modules" not in done.stderr + done.stdout
