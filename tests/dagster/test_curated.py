"""Curated partitions in non-UTC zones, and the curated sensor over a real instance (no Spark)."""

from __future__ import annotations

import itertools
from datetime import datetime
from pathlib import Path

import dagster as dg
import pendulum
from dagster._utils.schedules import cron_string_iterator  # the schedule's own tick iterator

from dagster_defs.demo_pipeline import landed_partition_keys
from ingest_toolkit.dagster.curated import partition_keys_for_hours
from ingest_toolkit.dagster.factory import build_definitions
from ingest_toolkit.dagster.naming import curated_sensor_name, landed_key
from ingest_toolkit.dagster.partitions import hourly_partitions
from ingest_toolkit.land.storage import locate
from ingest_toolkit.orchestrate.curation import hour_of_landed_dir, landed_hour_dirs, utc_hours
from ingest_toolkit.orchestrate.settings import OrchestrationSettings

from .helpers import make_setup

START = "2026-01-01-00:00"  # these cases are about 2026 dates, some of them before today


def _utc(text: str) -> pendulum.DateTime:
    moment = pendulum.parse(text)
    assert isinstance(moment, pendulum.DateTime)
    return moment.in_timezone("UTC")


def _window(zone: str, key: str) -> tuple[datetime, datetime]:
    partitions = hourly_partitions(OrchestrationSettings(timezone=zone, partitions_start=START))
    window = partitions.time_window_for_partition_key(key)
    return window.start, window.end


def test_half_hour_zone_partition_reads_two_utc_hours(tmp_path: Path) -> None:
    start, end = _window("Asia/Kolkata", "2026-11-20-14:00")  # 14:00-15:00 IST = 08:30-09:30 UTC
    assert [h.isoformat() for h in utc_hours(start, end)] == ["2026-11-20T08:00:00+00:00", "2026-11-20T09:00:00+00:00"]
    table = tmp_path / "landed"
    for name in ("event_hour=08", "event_hour=9", "event_hour=10"):  # padded or not, as Spark may write them
        (table / "event_date=2026-11-20" / name).mkdir(parents=True)
    found = landed_hour_dirs(locate(str(table)), utc_hours(start, end))
    assert [d.path.rsplit("/", 1)[-1] for d in found] == ["event_hour=08", "event_hour=9"]

    partitions = hourly_partitions(OrchestrationSettings(timezone="Asia/Kolkata", partitions_start=START))
    assert partition_keys_for_hours(partitions, [_utc("2026-11-20T08:00:00Z")]) == [
        "2026-11-20-13:00", "2026-11-20-14:00"]  # 07:30-08:30 and 08:30-09:30 UTC both overlap 08:xx
    assert landed_partition_keys(table, OrchestrationSettings(timezone="Asia/Kolkata", partitions_start=START)) == [
        "2026-11-20-13:00", "2026-11-20-14:00", "2026-11-20-15:00", "2026-11-20-16:00"]


def test_dst_end_gives_the_repeated_hour_its_own_partition() -> None:
    """America/New_York on 2026-11-01: 01:00-02:00 local happens twice (EDT, then EST)."""
    first = _window("America/New_York", "2026-11-01-01:00")
    second = _window("America/New_York", "2026-11-01-01:00-0500")
    assert [h.hour for h in utc_hours(*first)] == [5] and [h.hour for h in utc_hours(*second)] == [6]
    partitions = hourly_partitions(OrchestrationSettings(timezone="America/New_York", partitions_start=START))
    hours = [_utc(f"2026-11-01T{h:02d}:00:00Z") for h in (4, 5, 6, 7)]
    assert partition_keys_for_hours(partitions, hours) == [
        "2026-11-01-00:00", "2026-11-01-01:00", "2026-11-01-01:00-0500", "2026-11-01-02:00"]


def test_dst_start_skips_the_missing_hour(tmp_path: Path) -> None:
    """America/New_York on 2026-03-08: 02:00-03:00 local does not exist."""
    partitions = hourly_partitions(OrchestrationSettings(timezone="America/New_York", partitions_start=START))
    hours = [_utc(f"2026-03-08T{h:02d}:00:00Z") for h in (6, 7)]
    assert partition_keys_for_hours(partitions, hours) == ["2026-03-08-01:00", "2026-03-08-03:00"]
    assert [h.hour for h in utc_hours(*_window("America/New_York", "2026-03-08-03:00"))] == [7]
    for hour in (6, 7):
        (tmp_path / "event_date=2026-03-08" / f"event_hour={hour:02d}").mkdir(parents=True)
    settings = OrchestrationSettings(timezone="America/New_York", partitions_start=START)
    assert landed_partition_keys(tmp_path, settings) == ["2026-03-08-01:00", "2026-03-08-03:00"]


def test_drain_schedule_ticks_in_its_zone_across_dst(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, timezone="America/New_York", drain_cron="0 * * * *")
    schedule = build_definitions(setup.settings, [setup.spec]).resolve_schedule_def("drain_schedule_events")
    assert schedule.execution_timezone == "America/New_York"
    day_start = pendulum.datetime(2026, 11, 1, tz="America/New_York")
    ticks = list(itertools.takewhile(lambda t: t < day_start.add(days=1), cron_string_iterator(
        day_start.timestamp(), schedule.cron_schedule, schedule.execution_timezone)))  # type: ignore[arg-type]
    assert len(ticks) == 25  # the day has 25 hours
    assert [t.isoformat() for t in ticks if t.hour == 1] == ["2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00"]
    context = dg.build_schedule_context(scheduled_execution_time=ticks[2])
    request = schedule.evaluate_tick(context).run_requests[0]  # type: ignore[index]
    assert request.run_key == "drain-events-2026-11-01T01:00:00-05:00"  # no checkpoint yet: drains anyway


def test_hour_of_landed_dir() -> None:
    assert hour_of_landed_dir("event_date=2026-11-20/event_hour=08") == _utc("2026-11-20T08:00:00Z")
    assert hour_of_landed_dir("event_date=2026-11-20/event_hour=8/") == _utc("2026-11-20T08:00:00Z")
    assert hour_of_landed_dir("event_date=__HIVE_DEFAULT_PARTITION__/event_hour=__HIVE_DEFAULT_PARTITION__") is None
    assert hour_of_landed_dir("event_date=2026-11-20/event_hour=24") is None


def _land(instance: dg.DagsterInstance, *partitions: str) -> int:
    """Record a landing materialization as the landing asset writes it (its ``partitions`` metadata)."""
    instance.report_runless_asset_event(dg.AssetMaterialization(landed_key("events"),
                                                                metadata={"partitions": list(partitions)}))
    records = instance.fetch_materializations(landed_key("events"), limit=1).records
    return records[0].storage_id


def _curate(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def(curated_sensor_name("events"))
    result = sensor(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs))
    assert isinstance(result, dg.SensorResult)
    return result


H08, H10 = "event_date=2026-11-20/event_hour=08", "event_date=2026-11-20/event_hour=10"


def test_curated_sensor_requests_the_hours_each_landing_wrote(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, partitions_start=START)
    defs = build_definitions(setup.settings, [setup.spec])
    with dg.instance_for_test() as instance:
        nothing = _curate(defs, instance, None)
        assert not nothing.run_requests and nothing.skip_reason and "no landing" in nothing.skip_reason.skip_message
        first = _land(instance, H08, H10)
        fired = _curate(defs, instance, None)
        assert [(r.partition_key, r.run_key) for r in fired.run_requests or []] == [
            ("2026-11-20-08:00", f"curate-events-2026-11-20-08:00-after{first}"),
            ("2026-11-20-10:00", f"curate-events-2026-11-20-10:00-after{first}")]
        assert all(r.tags["ingest/curated"] == "events" for r in fired.run_requests or [])
        assert fired.cursor == str(first)
        idle = _curate(defs, instance, fired.cursor)
        assert not idle.run_requests and idle.cursor is None

        empty = _land(instance)  # a landing that took nothing: no hours, the cursor moves on
        skipped = _curate(defs, instance, fired.cursor)
        assert not skipped.run_requests and skipped.cursor == str(empty)

        late = _land(instance, H08)  # late data for 08: the hour is curated again, with a new key
        again = _land(instance, H08)  # and twice in one evaluation: one request, for the latest landing
        rebuilt = _curate(defs, instance, skipped.cursor)
        assert [(r.partition_key, r.run_key) for r in rebuilt.run_requests or []] == [
            ("2026-11-20-08:00", f"curate-events-2026-11-20-08:00-after{again}")]
        assert late < again and rebuilt.cursor == str(again)
        # A lost cursor replays every landing: the same run keys, which Dagster launches once.
        replayed = {r.run_key for r in _curate(defs, instance, None).run_requests or []}
        assert replayed == {f"curate-events-2026-11-20-08:00-after{again}",
                            f"curate-events-2026-11-20-10:00-after{first}"}


def test_curated_sensor_in_a_half_hour_zone_requests_both_overlapping_partitions(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, timezone="Asia/Kolkata", partitions_start=START)
    defs = build_definitions(setup.settings, [setup.spec])
    with dg.instance_for_test() as instance:
        _land(instance, H08)
        keys = [r.partition_key for r in _curate(defs, instance, None).run_requests or []]
    assert keys == ["2026-11-20-13:00", "2026-11-20-14:00"]
