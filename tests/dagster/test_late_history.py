"""Every landed hour is curated (issue 30, item 4): definitions loaded on an empty landing root,
then history landed for hours a day old; the curated sensor must request those hours and the
curated job build them, its checks judging what it built. History older than the partitions
reach fails curated_covers_landed, naming the hours and their events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pendulum
import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.dagster.factory import build_definitions
from ingest_toolkit.dagster.naming import (
    checks_job_name,
    curated_job_name,
    curated_op_name,
    curated_sensor_name,
    landed_key,
    landing_op_name,
)

from .helpers import Setup, fill, make_setup

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def _history(setup: Setup, first: pendulum.DateTime, count: int, span_hours: float) -> None:
    """``count`` JSON events evenly over ``span_hours`` from ``first`` (their timestamp headers)."""
    step_ms = int(span_hours * 3_600_000 / count)
    start_ms = int(first.timestamp() * 1000)
    events = [Event(json.dumps({"n": i, "user": {"id": f"u{i % 9}"}, "ok": i % 2 == 0}).encode(),
                    {"timestamp": str(start_ms + i * step_ms)}) for i in range(count)]
    with setup.open() as channel:
        fill(channel, events, batch=1000)


def _land(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    dg.materialize([defs.resolve_assets_def(landed_key("events"))], instance=instance,
                   run_config={"ops": {landing_op_name("events"): {"config": {"batches": 10}}}})


def test_history_landed_after_the_definitions_loaded_is_requested_and_curated(tmp_path: Path,
                                                                              spark: SparkSession) -> None:
    setup = make_setup(tmp_path, capacity=20_000)  # partitions_start = auto, nothing landed yet
    defs = build_definitions(setup.settings, [setup.spec])
    now = pendulum.now("UTC")
    first = now.subtract(hours=26)
    _history(setup, first, 6000, 2.0)  # 24 to 26 hours old
    wanted = sorted({first.add(seconds=s).in_timezone("UTC").start_of("hour").format("YYYY-MM-DD-HH:mm")
                     for s in range(0, 7200, 60)})
    with dg.instance_for_test() as instance:
        _land(defs, instance)
        sensor = defs.resolve_sensor_def(curated_sensor_name("events"))
        tick = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        assert isinstance(tick, dg.SensorResult)
        requested = sorted(r.partition_key for r in tick.run_requests or [])
        assert requested == wanted, tick.skip_reason
        job = defs.resolve_job_def(curated_job_name("events"))
        rows = 0
        for key in requested:
            run = job.execute_in_process(instance=instance, partition_key=key)
            (materialization,) = run.asset_materializations_for_node(curated_op_name("events"))
            rows += materialization.metadata["rows"].value
            checks = {e.check_name: e for e in run.get_asset_check_evaluations()}
            assert checks["curated_rescued_below_threshold"].passed and checks["curated_rows_discarded"].passed
            assert checks["curated_covers_landed"].passed
            assert checks["curated_schema_drift"].passed  # the first build creates the columns: no drift
        assert rows == 6000
        assert materialization.metadata["columns"].value == 3


def test_history_older_than_the_partitions_fails_the_coverage_check(tmp_path: Path, spark: SparkSession) -> None:
    setup = make_setup(tmp_path, capacity=20_000)
    defs = build_definitions(setup.settings, [setup.spec])  # auto: three days back at most
    first = pendulum.now("UTC").subtract(days=10).start_of("hour")
    _history(setup, first, 600, 1.5)
    with dg.instance_for_test() as instance:
        _land(defs, instance)
        tick = defs.resolve_sensor_def(curated_sensor_name("events"))(
            dg.build_sensor_context(instance=instance, definitions=defs))
        assert isinstance(tick, dg.SensorResult) and not tick.run_requests and tick.skip_reason
        assert "before the first curated partition" in tick.skip_reason.skip_message
        result = defs.resolve_job_def(checks_job_name("events")).execute_in_process(instance=instance,
                                                                                    raise_on_error=False)
        covers = {e.check_name: e for e in result.get_asset_check_evaluations()}["curated_covers_landed"]
    assert not covers.passed and covers.severity == dg.AssetCheckSeverity.ERROR
    assert covers.metadata["events_before_first_partition"].value == 600
    assert covers.metadata["hours_before_first_partition"].value == 2
    description = covers.description or ""
    assert f"{first.isoformat()} (400 events)" in description, description
    assert f'partitions_start = "{first.format("YYYY-MM-DD-HH:mm")}"' in description
