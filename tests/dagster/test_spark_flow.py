"""Landing, curated backfill and data checks with real Spark, a real channel and a real instance."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pyarrow.parquet as pq
import pytest

from dagster_defs.factory import build_definitions
from dagster_defs.naming import checks_job_name, curated_key, landed_key
from ingest_toolkit.channel.checkpoint import read_checkpoint_meta

from .helpers import Setup, events_at, fill, hour_ms, make_setup

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

HOURS = ["2026-11-20-08:00", "2026-11-20-09:00", "2026-11-20-10:00"]


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


def test_land_backfill_curated_and_check(tmp_path: Path, spark: SparkSession) -> None:
    setup = make_setup(tmp_path)
    _fill_two_hours(setup)
    defs = build_definitions(setup.settings, [setup.spec])
    with dg.instance_for_test() as instance:
        landed = dg.materialize([defs.resolve_assets_def(landed_key("events"))], instance=instance,
                                run_config={"ops": {"landed__events": {
                                    "config": {"batches": 5}}}})
        meta = landed.asset_materializations_for_node("landed__events")[0].metadata
        assert meta["events"].value == 250 and meta["backlog_after"].value == 0
        assert meta["take_transactions"].value == 1 and meta["source"].value == "in-process"
        assert meta["files"].value >= 2 and meta["bytes"].value > 0 and meta["batch_id"].value
        info = read_checkpoint_meta(setup.spec.checkpoint_dir)
        assert info is not None and info.queue_size == 0 and info.takes_committed == 250
        landing_root = tmp_path / "landing" / "events"
        assert sorted(p.name for p in (landing_root / "event_date=2026-11-20").iterdir()) == [
            "event_hour=08", "event_hour=10"]

        curated = defs.resolve_assets_def(curated_key("events"))
        rows = {}
        for key in HOURS:  # a backfill of three partitions, one run each (as the UI launches it)
            run = dg.materialize([curated], partition_key=key, instance=instance)
            rows[key] = run.asset_materializations_for_node("curated__events")[0].metadata["rows"].value
        assert rows == {HOURS[0]: 150, HOURS[1]: 0, HOURS[2]: 100}
        empty = tmp_path / "curated" / "events" / "event_date=2026-11-20" / "event_hour=09"
        assert empty.is_dir()  # an empty hour is an empty partition, not an error
        again = dg.materialize([curated], partition_key=HOURS[0], instance=instance)
        assert again.asset_materializations_for_node("curated__events")[0].metadata["rows"].value == 150
        hour8 = tmp_path / "curated" / "events" / "event_date=2026-11-20" / "event_hour=08"
        assert pq.read_table(hour8).num_rows == 150  # replaced, not appended
        assert not list((tmp_path / "curated" / "events" / "_staging").iterdir())

        checks = _check_results(defs, instance)
        assert {name: e.passed for name, e in checks.items()} == {
            "refcounts_match_recount": True, "drained_logs_deleted": True, "checkpoint_fresh": True,
            "backlog_below_capacity": True, "landed_reconciles": True, "landed_no_duplicate_event_ids": True,
            "curated_no_duplicate_event_ids": True}, {n: e.description for n, e in checks.items()}
        assert checks["landed_reconciles"].metadata["takes_committed"].value == 250

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
    setup = make_setup(tmp_path)
    _fill_two_hours(setup)
    (tmp_path / "landing").write_text("a file where the landing root should be a directory")
    defs = build_definitions(setup.settings, [setup.spec])
    with dg.instance_for_test() as instance:
        result = dg.materialize([defs.resolve_assets_def(landed_key("events"))], instance=instance,
                                raise_on_error=False)
    assert not result.success
    channel = setup.open()
    try:
        assert len(channel) == 250
        assert channel.stats()["takes_committed"] == 0
    finally:
        channel.close()
