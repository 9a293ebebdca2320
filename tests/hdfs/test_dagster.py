"""The Dagster code location against an HDFS root: the landing asset, the sensor retrying a run
that failed while the NameNode was down, the hourly curated asset reading and writing
on HDFS, and every asset check (refcounts, drained logs, freshness, backlog, reconciliation,
duplicates) passing, then failing once a landed file is copied next to itself on HDFS."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pytest

from ingest_toolkit.channel.checkpoint import read_checkpoint_meta
from ingest_toolkit.dagster.factory import build_definitions
from ingest_toolkit.dagster.naming import (
    checks_job_name,
    curated_key,
    curated_op_name,
    ident,
    landing_job_name,
    landing_op_name,
)
from ingest_toolkit.hdfs import MiniHdfs

from ..dagster.helpers import events_at, fill, hour_ms, make_setup
from .helpers import HdfsFiles

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration
HOURS = ["2026-11-20-08:00", "2026-11-20-09:00", "2026-11-20-10:00"]


def _sensor(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def(f"landing_sensor_{ident('events')}")
    result = sensor(dg.build_sensor_context(cursor=cursor, instance=instance, definitions=defs))
    assert isinstance(result, dg.SensorResult)
    return result


def _error_of(result: dg.ExecuteInProcessResult) -> str:
    (failure,) = result.get_step_failure_events()
    error = failure.step_failure_data.error
    while error is not None and error.cls_name != "LandingError":
        error = error.cause
    assert error is not None
    return error.message.strip()


def test_dagster_on_hdfs_landing_sensor_retry_curated_and_every_check(
        tmp_path: Path, healthy_hdfs: MiniHdfs, hdfs_root: str, files: HdfsFiles, spark: SparkSession) -> None:
    curated_root = hdfs_root.rsplit("/", 1)[0] + "/curated"
    setup = make_setup(tmp_path, sensor_min_backlog=10, sensor_retry_seconds=0, curated_root=curated_root,
                       partitions_start="2026-11-20-00:00")
    (setup.conf / "landing.toml").write_text(f'[landing]\nroot = "{hdfs_root}"\nmax_events = 1000\n\n'
                                             '[spark]\nmaster = "local[2]"\n')
    channel = setup.open()
    fill(channel, events_at(150, hour_ms("2026-11-20T08:00:00+00:00"), step_ms=20_000))
    fill(channel, events_at(100, hour_ms("2026-11-20T10:05:00+00:00"), step_ms=30_000))
    channel.close()
    defs = build_definitions(setup.settings, [setup.spec])
    land = defs.resolve_job_def(landing_job_name("events"))
    with dg.instance_for_test() as instance:
        first = _sensor(defs, instance, None)
        (request,) = first.run_requests or []
        healthy_hdfs.stop_namenode()  # the run fails before it takes anything: the state stays the same
        failed = land.execute_in_process(instance=instance, tags={"dagster/run_key": request.run_key},
                                         raise_on_error=False)
        assert not failed.success
        message = _error_of(failed)
        assert "\n" not in message and "does not answer" in message and healthy_hdfs.uri in message, message
        assert "nothing was taken" in message
        info = read_checkpoint_meta(setup.spec.checkpoint_dir)
        assert info is not None and info.queue_size == 250 and info.takes_committed == 0
        # The sensor asks again: opening the channel in-process gave it a new state (a new run key);
        # an unchanged state gets "<key>-retry1" (tests/dagster/test_sensor_retry.py).
        retry = _sensor(defs, instance, first.cursor)
        healthy_hdfs.start_namenode()
        (again,) = retry.run_requests or []
        assert again.run_key != request.run_key, retry.skip_reason
        landed = land.execute_in_process(instance=instance, tags={"dagster/run_key": again.run_key})
        meta = landed.asset_materializations_for_node(landing_op_name("events"))[0].metadata
        assert meta["events"].value == 250 and meta["backlog_after"].value == 0
        assert meta["temp_files_pending"].value == 0
        assert str(meta["manifest"].value).startswith(f"{hdfs_root}/events/_manifests/")
        after = _sensor(defs, instance, retry.cursor)
        assert not after.run_requests  # a new state (takes committed) below the threshold

        curated = defs.resolve_assets_def(curated_key("events"))
        rows = {}
        for key in [*HOURS, HOURS[0]]:  # the last one rebuilds 08:00 (replaced, not appended)
            run = dg.materialize([curated], partition_key=key, instance=instance)
            rows[key] = run.asset_materializations_for_node(curated_op_name("events"))[0].metadata["rows"].value
        assert rows == {HOURS[0]: 150, HOURS[1]: 0, HOURS[2]: 100}
        hour8 = spark.read.parquet(f"{curated_root}/events/event_date=2026-11-20/event_hour=08")
        assert hour8.count() == 150 and hour8.select("event_id").distinct().count() == 150
        assert files.store(curated_root).list_dir("events/_staging") == []

        checks = _checks(defs, instance)
        assert {n: e.passed for n, e in checks.items()} == {
            "refcounts_match_recount": True, "referenced_logs_intact": True, "drained_logs_deleted": True,
            "checkpoint_fresh": True,
            "recovery_losses_acknowledged": True,
            "backlog_below_capacity": True, "forward_sinks_reachable": True, "landed_reconciles": True,
            "landed_no_duplicate_event_ids": True,
            "landed_files_per_partition": True, "landed_fully_replicated": True,
            "curated_no_duplicate_event_ids": True, "curated_covers_landed": True, "curated_schema_drift": True,
            "curated_rescued_below_threshold": True, "curated_rows_discarded": True}, {
            n: e.description for n, e in checks.items()}
        assert checks["landed_reconciles"].metadata["landed_rows"].value == 250
        assert checks["landed_reconciles"].metadata["takes_committed"].value == 250

        store = files.store(hdfs_root)
        landed_file = next(f.path for f in store.list_files("events/event_date=2026-11-20/event_hour=10"))
        copy = f"events/event_date=2026-11-20/event_hour=10/copy-{landed_file}"
        store.create_exclusive(copy, store.read_bytes(f"events/event_date=2026-11-20/event_hour=10/{landed_file}"))
        broken = _checks(defs, instance)
        assert not broken["landed_no_duplicate_event_ids"].passed and not broken["landed_reconciles"].passed
        assert broken["landed_no_duplicate_event_ids"].metadata["extra_rows"].value == 100


def _checks(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, dg.AssetCheckEvaluation]:
    result = defs.resolve_job_def(checks_job_name("events")).execute_in_process(instance=instance,
                                                                              raise_on_error=False)
    return {e.check_name: e for e in result.get_asset_check_evaluations()}
