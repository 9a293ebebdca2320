"""The landing sensor and drain schedule over a real channel's checkpoint.meta."""

from __future__ import annotations

import json
import time
from pathlib import Path

import dagster as dg

from dagster_defs.factory import build_definitions
from dagster_defs.naming import ident, landing_job_name
from dagster_defs.sensors import decide
from ingest_toolkit.channel.checkpoint import read_checkpoint_meta

from .helpers import events_at, fill, make_setup


def _evaluate(defs: dg.Definitions, name: str, cursor: str | None,
              instance: dg.DagsterInstance | None = None) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def(f"landing_sensor_{ident(name)}")
    context = dg.build_sensor_context(cursor=cursor, instance=instance, definitions=defs)
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def test_sensor_skips_with_numbers_then_fires_once_per_state(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, sensor_min_backlog=100, sensor_max_backlog_age_seconds=600)
    defs = build_definitions(setup.settings, [setup.spec])
    skipped = _evaluate(defs, "events", None)
    assert skipped.skip_reason is not None and "no checkpoint.meta yet" in skipped.skip_reason.skip_message

    channel = setup.open()
    try:
        fill(channel, events_at(40, 0))
        channel.checkpoint()
        below = _evaluate(defs, "events", skipped.cursor)
        message = below.skip_reason.skip_message if below.skip_reason else ""
        assert "committed backlog 40 events (threshold 100)" in message and "threshold 600 s" in message
        assert not below.run_requests
        assert json.loads(below.cursor or "{}")["checkpoint_id"] >= 1

        fill(channel, events_at(70, 0))
        channel.checkpoint()
        fired = _evaluate(defs, "events", below.cursor)
        assert fired.run_requests and len(fired.run_requests) == 1
        key = fired.run_requests[0].run_key
        assert key == "land-events-puts110-takes0"
        assert json.loads(fired.cursor or "{}")["last_run_key"] == key

        # Same state, new evaluation (or a lost cursor): the same run key, which Dagster never launches twice.
        channel.checkpoint()
        again = _evaluate(defs, "events", None)
        assert [r.run_key for r in again.run_requests or []] == [key]

        # A take changes the state: a new key.
        with channel.transaction() as tx:
            tx.take(5)
        channel.checkpoint()
        later = _evaluate(defs, "events", fired.cursor)
        assert [r.run_key for r in later.run_requests or []] == ["land-events-puts110-takes5"]
    finally:
        channel.close()


def test_sensor_skips_while_a_landing_run_is_in_progress(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, sensor_min_backlog=10)
    defs = build_definitions(setup.settings, [setup.spec])
    channel = setup.open()
    try:
        fill(channel, events_at(20, 0))
        channel.checkpoint()
        with dg.instance_for_test() as instance:
            assert _evaluate(defs, "events", None, instance).run_requests
            job = defs.resolve_job_def(landing_job_name("events"))
            instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
            busy = _evaluate(defs, "events", None, instance)
            assert not busy.run_requests
            assert busy.skip_reason and "already queued or running" in busy.skip_reason.skip_message
    finally:
        channel.close()


def test_decide_fires_on_backlog_age(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, sensor_min_backlog=1000, sensor_max_backlog_age_seconds=60)
    channel = setup.open()
    try:
        fill(channel, events_at(3, 0))
        channel.checkpoint()
    finally:
        channel.close()
    info = read_checkpoint_meta(setup.spec.checkpoint_dir)
    assert info is not None
    young = decide("events", info, setup.settings, now_ns=info.oldest_commit_unix_ns + 10 * 10**9)
    assert not young.run and "oldest 10 s old (threshold 60 s)" in young.reason
    old = decide("events", info, setup.settings, now_ns=info.oldest_commit_unix_ns + 61 * 10**9)
    assert old.run and "oldest 61 s old" in old.reason


def test_drain_schedule_skips_an_empty_channel_and_drains_a_nonempty_one(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    defs = build_definitions(setup.settings, [setup.spec])
    schedule = defs.resolve_schedule_def("drain_schedule_events")
    channel = setup.open()
    try:
        channel.checkpoint()
        when = dg.build_schedule_context(scheduled_execution_time=_dt(time.time()))
        empty = schedule.evaluate_tick(when)
        assert not empty.run_requests and "nothing to drain" in (empty.skip_message or "")
        fill(channel, events_at(2, 0))
        channel.checkpoint()
        full = schedule.evaluate_tick(when)
        assert full.run_requests and full.run_requests[0].run_key.startswith("drain-events-")
    finally:
        channel.close()


def _dt(seconds: float) -> object:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
