"""Landing, curated backfill and data checks with real Spark, a real channel and a real instance."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.channel.checkpoint import read_checkpoint_meta
from ingest_toolkit.curate import CuratedSettings
from ingest_toolkit.dagster.factory import build_definitions
from ingest_toolkit.dagster.instance import write_instance_yaml
from ingest_toolkit.dagster.naming import (
    checks_job_name,
    curated_key,
    curated_op_name,
    curated_sensor_name,
    landed_key,
    landing_op_name,
)
from ingest_toolkit.land import LandingConfig
from ingest_toolkit.land.batches import build_table, event_id
from ingest_toolkit.orchestrate.curation import build_curated_partition

from .helpers import Setup, events_at, fill, hour_ms, make_setup

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HOURS = ["2026-11-20-08:00", "2026-11-20-09:00", "2026-11-20-10:00"]
START = "2026-11-20-00:00"  # the events are of 2026-11-20; definitions built before they land start there
H08, H10 = "event_date=2026-11-20/event_hour=08", "event_date=2026-11-20/event_hour=10"


def _fill_two_hours(setup: Setup) -> None:
    """150 events in 08:xx and 100 in 10:xx UTC; 09:xx stays empty."""
    channel = setup.open()
    fill(channel, events_at(150, hour_ms("2026-11-20T08:00:00+00:00"), step_ms=20_000))
    fill(channel, events_at(100, hour_ms("2026-11-20T10:05:00+00:00"), step_ms=30_000))
    channel.close()


def _check_results(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, dg.AssetCheckEvaluation]:
    result = defs.resolve_job_def(checks_job_name("events")).execute_in_process(instance=instance,
                                                                              raise_on_error=False)
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _warnings(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id) if e.level == logging.WARNING]


def test_land_backfill_curated_and_check(tmp_path: Path, spark: SparkSession) -> None:
    setup = make_setup(tmp_path, partitions_start=START)
    _fill_two_hours(setup)
    defs = build_definitions(setup.settings, [setup.spec])
    with dg.instance_for_test() as instance:  # an instance without pool limits
        landed = dg.materialize([defs.resolve_assets_def(landed_key("events"))], instance=instance,
                                run_config={"ops": {landing_op_name("events"): {
                                    "config": {"batches": 5}}}})
        meta = landed.asset_materializations_for_node(landing_op_name("events"))[0].metadata
        assert meta["events"].value == 250 and meta["backlog_after"].value == 0
        assert meta["take_transactions"].value == "1" and str(meta["source"].value).startswith("in-process")
        assert int(meta["files"].value) >= 2 and meta["bytes"].value > 0 and meta["batch_id"].value
        assert meta["partitions"].value == [H08, H10]  # what the curated sensor curates
        assert meta["pool"].value == "landing-events" and meta["pool_limit"].value == "none"
        # Constants are text, so the asset page does not plot them as flat lines.
        assert {k for k, v in meta.items() if isinstance(v, dg.TextMetadataValue)} >= {
            "pool_limit", "files", "take_transactions"}
        assert any("sets no limit for pool landing-events" in w for w in _warnings(instance, landed.run_id))
        info = read_checkpoint_meta(setup.spec.checkpoint_dir)
        assert info is not None and info.queue_size == 0 and info.takes_committed == 250
        landing_root = tmp_path / "landing" / "events"
        assert sorted(p.name for p in (landing_root / "event_date=2026-11-20").iterdir()) == [
            "event_hour=08", "event_hour=10"]

        curated = defs.resolve_assets_def(curated_key("events"))
        rows = {}
        for key in HOURS:  # one run per partition, as the curated sensor requests them
            run = dg.materialize([curated], partition_key=key, instance=instance)
            rows[key] = run.asset_materializations_for_node(curated_op_name("events"))[0].metadata["rows"].value
        assert rows == {HOURS[0]: 150, HOURS[1]: 0, HOURS[2]: 100}
        # A range in one run, as a backfill launches it (single-run policy); the real backfill through
        # the daemon is in test_definitions.py.
        ranged = dg.materialize([curated], instance=instance, tags={
            "dagster/asset_partition_range_start": HOURS[0], "dagster/asset_partition_range_end": HOURS[2]})
        materialized = ranged.asset_materializations_for_node(curated_op_name("events"))
        assert sorted(m.partition for m in materialized) == HOURS  # type: ignore[type-var]
        # Each partition's materialization holds its own hour, not the whole run's figures.
        assert {m.partition: m.metadata["rows"].value for m in materialized} == rows
        assert {m.partition: m.metadata["path"].value.rsplit("/", 1)[-1] for m in materialized} == {
            HOURS[0]: "event_hour=08", HOURS[1]: "event_hour=09", HOURS[2]: "event_hour=10"}
        assert all("rows_by_partition" not in m.metadata and "rows_total" not in m.metadata for m in materialized)
        # The sensor sees the landing; every hour it wrote was curated by a run started after it.
        sensor = defs.resolve_sensor_def(curated_sensor_name("events"))
        tick = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        assert isinstance(tick, dg.SensorResult) and not tick.run_requests
        assert tick.skip_reason and "already curated after them: ['2026-11-20-08:00', '2026-11-20-10:00']" in \
            tick.skip_reason.skip_message
        empty = tmp_path / "curated" / "events" / "event_date=2026-11-20" / "event_hour=09"
        assert empty.is_dir()  # an empty hour is an empty partition, not an error
        again = dg.materialize([curated], partition_key=HOURS[0], instance=instance)
        assert again.asset_materializations_for_node(curated_op_name("events"))[0].metadata["rows"].value == 150
        hour8 = tmp_path / "curated" / "events" / "event_date=2026-11-20" / "event_hour=08"
        assert pq.read_table(hour8).num_rows == 150  # replaced, not appended
        assert not list((tmp_path / "curated" / "events" / "_staging").iterdir())

        checks = _check_results(defs, instance)
        assert {name: e.passed for name, e in checks.items()} == {
            "refcounts_match_recount": True, "referenced_logs_intact": True, "drained_logs_deleted": True,
            "checkpoint_fresh": True, "recovery_losses_acknowledged": True,
            "backlog_below_capacity": True, "forward_sinks_reachable": True, "landed_reconciles": True,
            "landed_no_duplicate_event_ids": True,
            "landed_files_per_partition": True, "landed_fully_replicated": True,
            "curated_no_duplicate_event_ids": True, "curated_covers_landed": True, "curated_schema_drift": True,
            "curated_rescued_below_threshold": True, "curated_rows_discarded": True}, {
            n: e.description for n, e in checks.items()}
        assert checks["landed_reconciles"].metadata["takes_committed"].value == 250
        typed = pq.read_table(hour8)  # the JSON bodies ({"n": i}) as a typed column
        assert typed.schema.field("n").type == pa.int64() and sorted(typed.column("n").to_pylist()) == list(range(150))

        # Another consumer takes from the channel: takes_committed no longer equals the manifests.
        channel = setup.open()
        fill(channel, events_at(10, hour_ms("2026-11-20T10:30:00+00:00")))
        with channel.transaction() as tx:
            assert len(tx.take(10)) == 10
        channel.close()
        stolen = _check_results(defs, instance)["landed_reconciles"]
        assert not stolen.passed
        assert "the channel committed takes of 260 events" in (stolen.description or "")
        assert "the manifests record 250" in (stolen.description or "")
        assert stolen.metadata["takes_current"].value is True

        # Break the tables: a landed file and a curated file copied next to themselves.
        landed_file = next((landing_root / "event_date=2026-11-20" / "event_hour=10").glob("*.parquet"))
        shutil.copy(landed_file, landed_file.with_name("copy-" + landed_file.name))
        curated_file = next(hour8.glob("*.parquet"))
        shutil.copy(curated_file, curated_file.with_name("copy-" + curated_file.name))
        broken = _check_results(defs, instance)
        assert not broken["landed_no_duplicate_event_ids"].passed
        assert not broken["curated_no_duplicate_event_ids"].passed
        assert broken["curated_no_duplicate_event_ids"].metadata["extra_rows"].value == 150
        assert not broken["landed_reconciles"].passed
        assert "landed table holds 350 rows" in (broken["landed_reconciles"].description or "")


def test_failing_landing_leaves_the_events_in_the_channel(tmp_path: Path, spark: SparkSession) -> None:
    """A failure *after* the take (the 08:00 partition directory is a file, so the landed files
    cannot be moved into it): the take is rolled back and the events are back in order."""
    setup = make_setup(tmp_path)
    _fill_two_hours(setup)
    blocked = tmp_path / "landing" / "events" / "event_date=2026-11-20" / "event_hour=08"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the landing puts a partition directory")
    defs = build_definitions(setup.settings, [setup.spec])
    with dg.instance_for_test() as instance:
        result = dg.materialize([defs.resolve_assets_def(landed_key("events"))], instance=instance,
                                raise_on_error=False)
    assert not result.success
    error = _landing_error(result)
    assert "The take was rolled back; the events are still in the channel" in error, error
    assert "while taking events" not in error and "nothing was taken" not in error, error  # it failed after the take
    channel = setup.open()
    try:
        assert len(channel) == 250
        assert channel.stats()["takes_committed"] == 0
        with channel.transaction() as tx:
            events = tx.take(250)
            tx.rollback()
    finally:
        channel.close()
    expected = events_at(150, hour_ms("2026-11-20T08:00:00+00:00"), step_ms=20_000) + events_at(
        100, hour_ms("2026-11-20T10:05:00+00:00"), step_ms=30_000)
    assert [(e.headers, e.body) for e in events] == [(e.headers, e.body) for e in expected]  # same order


def _landing_error(result: dg.ExecuteInProcessResult) -> str:
    """The message of the LandingError under Dagster's step failure."""
    (failure,) = result.get_step_failure_events()
    error = failure.step_failure_data.error
    messages = []
    while error is not None:
        messages.append(f"{error.cls_name}: {error.message}")
        error = error.cause
    found = [m for m in messages if m.startswith("LandingError")]
    assert found, messages
    return found[0]


def test_pool_limited_instance_records_its_limit_without_warning(tmp_path: Path, spark: SparkSession) -> None:
    setup = make_setup(tmp_path)
    setup.open().close()
    write_instance_yaml(tmp_path / "dagster", REPO / "conf")
    defs = build_definitions(setup.settings, [setup.spec])
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster")) as instance:
        landed = dg.materialize([defs.resolve_assets_def(landed_key("events"))], instance=instance)
        meta = landed.asset_materializations_for_node(landing_op_name("events"))[0].metadata
        assert meta["pool_limit"].value == "1" and meta["taken"].value == 0 and meta["partitions"].value == []
        assert not [w for w in _warnings(instance, landed.run_id) if "pool" in w]


def _write_landed(path: Path, batch_id: str, ingest_us: int, count: int, pad: int = 0) -> None:
    """``count`` landed rows of one channel identity (seq 1..count) as one batch writes them."""
    table = build_table([Event(body=json.dumps({"batch": batch_id, "n": i, "pad": "x" * pad}).encode(),
                               headers={"timestamp": str(hour_ms("2026-11-20T08:00:00+00:00") + i * 1000)})
                         for i in range(count)], channel_id=b"\x01" * 16, batch_id=batch_id, ingest_time_us=ingest_us)
    seqs = list(range(1, count + 1))
    table = table.set_column(table.schema.get_field_index("seq"), "seq", pa.array(seqs, table.schema.field("seq").type))
    ids = [event_id(b"\x01" * 16, seq) for seq in seqs]
    table = table.set_column(table.schema.get_field_index("event_id"), "event_id", pa.array(ids, pa.string()))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.drop_columns(["event_date", "event_hour"]), path)


def test_curated_keeps_the_earliest_landed_duplicate(tmp_path: Path, spark: SparkSession) -> None:
    """The same events landed twice (a file copied back, a replayed batch): the curated hour keeps,
    per event_id, the row with the smallest ingest_time, whatever order Spark reads the files in."""
    hour = tmp_path / "landed" / "events" / "event_date=2026-11-20" / "event_hour=08"
    # Spark reads the larger file first (it packs splits by size), so "first seen" would be the later copy.
    _write_landed(hour / "a-later.parquet", "b-later", ingest_us=2_000_000_000_000_000, count=50, pad=2000)
    _write_landed(hour / "z-earlier.parquet", "b-earlier", ingest_us=1_000_000_000_000_000, count=50)
    window = dg.HourlyPartitionsDefinition(start_date="2026-01-01-00:00").time_window_for_partition_key(HOURS[0])
    for _ in range(2):  # a rebuild keeps the same rows
        landing = LandingConfig.build(root=str(tmp_path / "landed"))
        result = build_curated_partition(spark, landing, str(tmp_path / "curated"), "events", window.start,
                                         window.end, CuratedSettings(parser="none").for_channel("events"))
        assert result.rows == 50 and result.duplicates_dropped == 50
        table = pq.read_table(tmp_path / "curated" / "events" / "event_date=2026-11-20" / "event_hour=08")
        assert set(table.column("batch_id").to_pylist()) == {"b-earlier"}
        assert [json.loads(b)["batch"] for b in table.column("body").to_pylist()] == ["b-earlier"] * 50


def test_curated_partition_in_a_half_hour_zone_keeps_its_half_hours(tmp_path: Path, spark: SparkSession) -> None:
    """Asia/Kolkata: partition 14:00 IST is 08:30-09:30 UTC, so it takes the second half of the
    landed 08:xx hour (events every 20 s from 08:00: 60 of them) and nothing of 10:xx."""
    setup = make_setup(tmp_path, timezone="Asia/Kolkata", partitions_start=START)
    _fill_two_hours(setup)
    defs = build_definitions(setup.settings, [setup.spec])
    with dg.instance_for_test() as instance:
        dg.materialize([defs.resolve_assets_def(landed_key("events"))], instance=instance)
        run = dg.materialize([defs.resolve_assets_def(curated_key("events"))], partition_key="2026-11-20-14:00",
                             instance=instance)
    meta = run.asset_materializations_for_node(curated_op_name("events"))[0].metadata
    assert meta["rows"].value == 60
    assert meta["window_utc"].value == "2026-11-20T08:30:00+00:00 .. 2026-11-20T09:30:00+00:00"
    table = pq.read_table(tmp_path / "curated" / "events" / "event_date=2026-11-20" / "event_hour=08")
    times = sorted(table.column("event_time").to_pylist())
    assert times[0].isoformat().startswith("2026-11-20T08:30:00") and len(times) == 60
