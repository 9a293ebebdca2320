"""The example DAGs landing into a Delta and an Iceberg table under ``dag.test()``: a real channel, a
real Airflow metadata database, no Spark at all (the tables are written and read by delta-rs and
PyIceberg). The ingest DAG lands every event once and its checks pass (``landed_reconciles`` against
the batch its own land task committed), the maintenance DAG compacts the table and its files check
passes; the land task's XCom and asset event name the format, the table version and batch number."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest_toolkit.land.config import load_landing_config
from ingest_toolkit.land.tables.reading import files_per_partition, open_reader

from ..orchestrate.helpers import events_at, fill, hour_ms, load_channel_specs
from .helpers import airflow_setup, asset_events, run_dag

pytestmark = pytest.mark.integration

LANDED_CHECKS = ["landed_reconciles", "landed_no_duplicate_event_ids", "landed_files_per_partition"]


@pytest.fixture(params=["delta", "iceberg"])
def table_format(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _conf(root: Path, table_format: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    setup = airflow_setup(root, batches_per_run=3)  # three take transactions of 100: three files in the hour
    landing = setup.conf / "landing.toml"
    landing.write_text(landing.read_text().replace(
        "max_events = 1000\n", f'max_events = 100\nformat = "{table_format}"\n'
                               f'iceberg_catalog = "sqlite:///{root}/catalog.db"\n'))
    monkeypatch.setenv("INGEST_CONF_DIR", str(setup.conf))
    from ingest_toolkit.channel import FileChannel

    channel = FileChannel(**load_channel_specs(setup.conf / "agent.toml")[0].settings)
    try:
        fill(channel, events_at(250, hour_ms("2026-11-20T08:00:00+00:00"), step_ms=10_000))  # 08:00 .. 08:41
    finally:
        channel.close()
    return landing


def test_ingest_and_maintenance_dags_on_a_table_format(tmp_path: Path, table_format: str, airflow_db: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    landing = _conf(tmp_path, table_format, monkeypatch)
    ingest = run_dag("ingest_events")
    assert ingest.state == "success", ingest.tasks
    landed = ingest.xcom["land"]
    assert (landed["format"], landed["spark_started"]) == (table_format, False)
    config = load_landing_config(landing)
    reader = open_reader(config, "events")
    assert (landed["events"], landed["backlog_after"]) == (250, 0)
    assert landed["batch_number"] == reader.batch_number(_channel_id(landing)) == 3
    assert str(landed["table_version"]) == str(reader.version())
    event = asset_events("ingest_toolkit.events.landed")[-1]
    assert (event["format"], event["batch_number"]) == (table_format, landed["batch_number"])
    reconciled = ingest.xcom["landed_reconciles"]
    assert reconciled["passed"], reconciled["description"]
    assert reconciled["metadata"]["last_landing_batch"] == landed["batch_number"]
    assert all(ingest.xcom[check]["passed"] for check in LANDED_CHECKS), {c: ingest.xcom[c] for c in LANDED_CHECKS}

    maintained = run_dag("maintain_events")
    assert maintained.state == "success", maintained.tasks
    done = maintained.xcom["maintain"]
    assert done["format"] == table_format and done["max_files_per_partition_after"] == 1
    assert max(files_per_partition(reader.files()).values()) == 1
    assert maintained.xcom["landed_files_per_partition"]["passed"]
    ids = [i for _p, chunk in reader.event_ids() for i in chunk.to_pylist()]
    assert len(ids) == len(set(ids)) == landed["events"]


def _channel_id(landing: Path) -> str:
    from ingest_toolkit.channel.checkpoint import read_checkpoint_meta

    spec = load_channel_specs(landing.parent / "agent.toml")[0]
    info = read_checkpoint_meta(spec.checkpoint_dir)
    assert info is not None
    return info.channel_id.replace("-", "")
