"""A landing that completes a batch an earlier landing wrote but could not commit the take of
(killed between its table commit and its take commit): the asset event of the landing reports the
events of that batch (the table held them already; this run made them final), not 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..orchestrate.helpers import events_at, fill, hour_ms, load_channel_specs
from .conftest import DAGS
from .helpers import airflow_setup, asset_events, run_dag

pytestmark = pytest.mark.integration

_DAG = '''
from datetime import UTC, datetime

from airflow.sdk import DAG

from ingest_toolkit.airflow import LandChannelOperator

with DAG(dag_id="land_after_a_crash", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    LandChannelOperator(task_id="land", channel="events")
'''


def test_the_asset_event_counts_the_batch_a_landing_completed(tmp_path: Path, airflow_db: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    setup = airflow_setup(tmp_path)
    landing = setup.conf / "landing.toml"
    landing.write_text(landing.read_text().replace("max_events = 1000\n", 'max_events = 1000\nformat = "delta"\n'))
    monkeypatch.setenv("INGEST_CONF_DIR", str(setup.conf))
    from ingest_toolkit.channel import FileChannel

    channel = FileChannel(**load_channel_specs(setup.conf / "agent.toml")[0].settings)
    try:
        fill(channel, events_at(250, hour_ms("2026-11-20T08:00:00+00:00"), step_ms=10_000))
    finally:
        channel.close()
    crashed = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "land", "--conf", str(landing),
                              "--channel", "events", "--channel-conf", str(setup.conf / "agent.toml")],
                             env={**os.environ, "INGEST_LAND_FAULT": "before_commit"}, capture_output=True,
                             text=True, timeout=300)
    assert crashed.returncode == -9, crashed.stderr[-3000:]  # the table holds the batch, the take is open

    (DAGS / "land_after_a_crash.py").write_text(_DAG)
    try:
        done = run_dag("land_after_a_crash")
    finally:
        (DAGS / "land_after_a_crash.py").unlink()
    assert done.tasks == {"land": "success"}, done.tasks
    landed = done.xcom["land"]
    assert (landed["events"], landed["redelivered"], landed["taken"], landed["backlog_after"]) == (0, 250, 250, 0)
    event = asset_events("ingest_toolkit.events.landed")[-1]
    assert (event["events"], event["written"], event["redelivered"]) == (250, 0, 250)
    assert event["partitions"] == ["event_date=2026-11-20/event_hour=08"]
