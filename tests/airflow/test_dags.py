"""The example DAGs under ``dag.test()``: a real channel, real local Spark, a real Airflow metadata DB."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest

from ingest_toolkit.channel.checkpoint import read_checkpoint_meta

from ..orchestrate.helpers import events_at, fill, hour_ms
from .conftest import DAGS
from .helpers import airflow_setup, asset_events, landed_table, run_dag

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

CHANNEL_CHECKS = ["refcounts_match_recount", "referenced_logs_intact", "drained_logs_deleted", "checkpoint_fresh",
                  "recovery_losses_acknowledged", "backlog_below_capacity", "forward_sinks_reachable"]
LANDED_CHECKS = ["landed_reconciles", "landed_no_duplicate_event_ids", "landed_files_per_partition",
                 "landed_fully_replicated"]
DUPLICATE_CHECKS = ["landed_reconciles", "landed_no_duplicate_event_ids"]  # what a copied landed file fails
T08 = hour_ms("2026-11-20T08:00:00+00:00")


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, airflow_db: Path, spark: SparkSession) -> Path:
    """The configuration the DAGs' tasks read (INGEST_CONF_DIR), under ``tmp_path``."""
    monkeypatch.setenv("INGEST_CONF_DIR", str(airflow_setup(tmp_path).conf))
    return tmp_path


def _fill(root: Path, count: int, start_ms: int = T08, step_ms: int = 40_000) -> list[bytes]:
    from ingest_toolkit.channel import FileChannel

    from ..orchestrate.helpers import load_channel_specs

    spec = load_channel_specs(root / "conf" / "agent.toml")[0]
    events = events_at(count, start_ms, step_ms)
    channel = FileChannel(**spec.settings)
    try:
        fill(channel, events)
    finally:
        channel.close()
    return [e.body for e in events]


def test_ingest_lands_every_event_once_then_curation_builds_two_hours(conf: Path) -> None:
    bodies = _fill(conf, 250)  # 08:00 .. 10:46 UTC, one every 40 s: 90 + 90 + 70 per hour
    ingest = run_dag("ingest_events")
    assert ingest.state == "success", ingest.tasks
    assert set(ingest.tasks.values()) == {"success"}, ingest.tasks
    assert ingest.xcom["wait_for_backlog"]["trigger"] == "backlog"
    assert "committed backlog 250 events (threshold 100)" in ingest.xcom["wait_for_backlog"]["reason"]
    landed = ingest.xcom["land"]
    assert landed["events"] == 250 and landed["backlog_after"] == 0
    assert landed["partitions"] == [f"event_date=2026-11-20/event_hour={h}" for h in ("08", "09", "10")]
    event = asset_events("ingest_toolkit.events.landed")[-1]  # what a DAG scheduled on the asset sees
    assert (event["events"], event["partitions"]) == (250, landed["partitions"])
    table = landed_table(conf)
    assert sorted(table.column("body").to_pylist()) == sorted(bodies)  # every event, once
    assert len(set(table.column("event_id").to_pylist())) == 250
    info = read_checkpoint_meta(str(conf / "channel" / "checkpoint"))
    assert info is not None and info.queue_size == 0 and info.takes_committed == 250
    assert {c: ingest.xcom[c]["passed"] for c in CHANNEL_CHECKS + LANDED_CHECKS} == dict.fromkeys(
        CHANNEL_CHECKS + LANDED_CHECKS, True)

    rows = {}
    for end in ("09", "10"):  # the data intervals [08:00, 09:00) and [09:00, 10:00)
        curate = run_dag("curate_events", datetime.fromisoformat(f"2026-11-20T{end}:00:00+00:00"))
        assert curate.state == "success", curate.tasks
        (hour,) = curate.xcom["curate_hour"]
        rows[hour["window_utc"]] = hour["rows"]
        assert curate.xcom["curated_no_duplicate_event_ids"]["passed"] is True
        assert hour["columns_added"] == (["n"] if end == "09" else []) and hour["rescued_rows"] == 0
        judged = {c: curate.xcom[c] for c in ("curated_schema_drift", "curated_rescued_below_threshold",
                                              "curated_rows_discarded", "curated_covers_landed")}
        assert all(v["passed"] for v in judged.values()), judged
        assert judged["curated_rescued_below_threshold"]["metadata"]["hours_built"] == 1  # the upstream task's hour
        assert judged["curated_covers_landed"]["metadata"]["first_partition_utc"] == "2026-11-01T00:00:00+00:00"
    assert rows == {"2026-11-20T08:00:00+00:00 .. 2026-11-20T09:00:00+00:00": 90,
                    "2026-11-20T09:00:00+00:00 .. 2026-11-20T10:00:00+00:00": 90}
    assert [(e["hours"], e["rows"]) for e in asset_events("ingest_toolkit.events.curated")[-2:]] == [
        ([hour], [90]) for hour in rows]
    hour8 = conf / "curated" / "events" / "event_date=2026-11-20" / "event_hour=08"
    before = sorted(p.name for p in hour8.glob("*.parquet"))
    again = run_dag("curate_events", datetime(2026, 11, 20, 9, tzinfo=UTC))  # a rerun, as a backfill does
    assert again.state == "success" and again.xcom["curate_hour"][0]["rows"] == 90
    assert pq.read_table(hour8).num_rows == 90  # replaced, not appended
    assert sorted(p.name for p in hour8.glob("*.parquet")) != before  # rebuilt
    assert not (conf / "curated" / "events" / "event_date=2026-11-20" / "event_hour=10").exists()


_WARN_DAG = '''
from datetime import UTC, datetime

from airflow.sdk import DAG

from ingest_toolkit.airflow import ChannelCheckOperator

with DAG(dag_id="warn_check", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    ChannelCheckOperator(task_id="backlog_below_capacity", check="backlog_below_capacity", channel="events")
'''


def test_an_error_verdict_fails_its_task_and_a_warning_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              airflow_db: Path, spark: SparkSession) -> None:
    setup = airflow_setup(tmp_path, capacity=1000)
    monkeypatch.setenv("INGEST_CONF_DIR", str(setup.conf))
    (DAGS / "warn_check.py").write_text(_WARN_DAG)
    try:
        _fill(tmp_path, 900, step_ms=10_000)  # 90 % of the capacity: backlog_below_capacity warns
        warned = run_dag("warn_check")
    finally:
        (DAGS / "warn_check.py").unlink()
    assert warned.state == "success" and warned.tasks == {"backlog_below_capacity": "success"}
    verdict = warned.xcom["backlog_below_capacity"]
    assert verdict["passed"] is False and verdict["severity"] == "WARN", verdict
    assert "900 of 1000 slots in use" in verdict["description"]

    assert run_dag("ingest_events").state == "success"
    landed_file = next((tmp_path / "landing" / "events").rglob("*.parquet"))
    shutil.copy(landed_file, landed_file.with_name("copy-" + landed_file.name))  # duplicated rows
    _fill(tmp_path, 150, start_ms=hour_ms("2026-11-20T12:00:00+00:00"))
    broken = run_dag("ingest_events")
    assert broken.state == "failed"
    assert broken.tasks["land"] == "success"
    assert {t: broken.tasks[t] for t in DUPLICATE_CHECKS} == dict.fromkeys(DUPLICATE_CHECKS, "failed")
    assert broken.tasks["landed_fully_replicated"] == "success"  # a local root: passes with a note
    assert {t: broken.tasks[t] for t in CHANNEL_CHECKS} == dict.fromkeys(CHANNEL_CHECKS, "success")


def test_a_landing_failure_rolls_the_take_back(conf: Path) -> None:
    bodies = _fill(conf, 250)
    blocked = conf / "landing" / "events" / "event_date=2026-11-20" / "event_hour=09"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the landing puts a partition directory")
    failed = run_dag("ingest_events")
    assert failed.state == "failed"
    assert failed.tasks["wait_for_backlog"] == "success" and failed.tasks["land"] == "failed"
    assert {failed.tasks[t] for t in CHANNEL_CHECKS + LANDED_CHECKS} == {"upstream_failed"}
    from ingest_toolkit.channel import FileChannel

    from ..orchestrate.helpers import load_channel_specs

    channel = FileChannel(**load_channel_specs(conf / "conf" / "agent.toml")[0].settings)
    try:
        assert len(channel) == 250 and channel.stats()["takes_committed"] == 0
        with channel.transaction() as tx:
            assert [e.body for e in tx.take(250)] == bodies  # all back, in order
            tx.rollback()
    finally:
        channel.close()
