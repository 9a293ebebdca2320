"""The landing sensor and drain schedule over a real channel's checkpoint.meta."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import dagster as dg

from ingest_toolkit.channel.checkpoint import read_checkpoint_meta
from ingest_toolkit.dagster.factory import build_definitions
from ingest_toolkit.dagster.naming import curated_key, ident, landed_key, landing_job_name
from ingest_toolkit.orchestrate.backlog import SensorCursor, decide

from .helpers import events_at, fill, make_setup


def _evaluate(defs: dg.Definitions, name: str, cursor: str | None,
              instance: dg.DagsterInstance | None = None) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def(f"landing_sensor_{ident(name)}")
    context = dg.build_sensor_context(cursor=cursor, instance=instance, definitions=defs)
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def _key(info: object, puts: int, takes: int) -> str:
    channel_id = info.channel_id.replace("-", "")  # type: ignore[attr-defined]
    return f"land-events-{channel_id}-seq{info.last_seq}-puts{puts}-takes{takes}"  # type: ignore[attr-defined]


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
        assert SensorCursor.parse(below.cursor).checkpoint_id >= 1

        fill(channel, events_at(70, 0))
        channel.checkpoint()
        fired = _evaluate(defs, "events", below.cursor)
        assert fired.run_requests and len(fired.run_requests) == 1
        key = fired.run_requests[0].run_key
        info = read_checkpoint_meta(setup.spec.checkpoint_dir)
        assert key == _key(info, 110, 0)
        cursor = SensorCursor.parse(fired.cursor)
        assert cursor.requested_run_key == key and cursor.requested is not None
        assert cursor.requested.puts_committed == 110 and cursor.channel_id == info.channel_id  # type: ignore[union-attr]

        # Same state, next evaluation: the cursor knows it was requested and says so.
        channel.checkpoint()
        again = _evaluate(defs, "events", fired.cursor)
        assert not again.run_requests
        assert again.skip_reason and f"already requested for this state (run key {key})" in \
            again.skip_reason.skip_message
        # A lost cursor: the same run key, which Dagster never launches twice.
        lost = _evaluate(defs, "events", None)
        assert [r.run_key for r in lost.run_requests or []] == [key]

        # A take changes the state: a new key.
        with channel.transaction() as tx:
            tx.take(5)
        channel.checkpoint()
        later = _evaluate(defs, "events", again.cursor)
        assert [r.run_key for r in later.run_requests or []] == [_key(info, 110, 5)]
    finally:
        channel.close()


def test_a_recreated_channel_at_the_same_counters_fires_again_with_a_new_key(tmp_path: Path) -> None:
    """What the demo does (clears the channel, writes the same number of events): same counters,
    new channel identity, so a new run key; the old cursor does not hold it back."""
    setup = make_setup(tmp_path, sensor_min_backlog=10)
    defs = build_definitions(setup.settings, [setup.spec])

    def fill_fresh() -> dg.SensorResult:
        channel = setup.open()
        try:
            fill(channel, events_at(20, 0))
        finally:
            channel.close()
        return _evaluate(defs, "events", cursor)

    cursor = None
    first = fill_fresh()
    cursor = first.cursor
    shutil.rmtree(tmp_path / "channel")
    second = fill_fresh()
    assert first.run_requests and second.run_requests
    old_key, new_key = first.run_requests[0].run_key, second.run_requests[0].run_key
    assert old_key != new_key and old_key.endswith("-puts20-takes0") and new_key.endswith("-puts20-takes0")
    assert second.skip_reason is None
    reason = decide("events", read_checkpoint_meta(setup.spec.checkpoint_dir), setup.settings,
                    cursor=SensorCursor.parse(cursor))
    assert reason.run and "the channel was recreated" in reason.reason


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
            run = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
            busy = _evaluate(defs, "events", None, instance)
            assert not busy.run_requests
            assert busy.skip_reason and f"landing run {run.run_id} of this channel is already queued or running" \
                in busy.skip_reason.skip_message
            instance.report_run_failed(run)
            assert _evaluate(defs, "events", None, instance).run_requests
    finally:
        channel.close()


def test_sensor_sees_a_landing_launched_from_the_asset_page(tmp_path: Path) -> None:
    """The asset page launches the implicit asset job (``__ASSET_JOB``) with an asset selection;
    a job that materializes every asset has no selection, only its plan names the asset."""
    setup = make_setup(tmp_path, sensor_min_backlog=10)
    everything = dg.define_asset_job("everything", selection=dg.AssetSelection.all())
    defs = dg.Definitions.merge(build_definitions(setup.settings, [setup.spec]), dg.Definitions(jobs=[everything]))
    channel = setup.open()
    try:
        fill(channel, events_at(20, 0))
        channel.checkpoint()
        with dg.instance_for_test() as instance:
            asset_job = defs.resolve_implicit_global_asset_job_def()
            curated_only = instance.create_run_for_job(asset_job, asset_selection={curated_key("events")},
                                                       status=dg.DagsterRunStatus.STARTED)
            assert _evaluate(defs, "events", None, instance).run_requests  # another asset: not a landing
            from_page = instance.create_run_for_job(asset_job, asset_selection={landed_key("events")},
                                                    status=dg.DagsterRunStatus.STARTING)
            assert from_page.job_name != landing_job_name("events")
            busy = _evaluate(defs, "events", None, instance)
            assert not busy.run_requests and busy.skip_reason
            assert f"landing run {from_page.run_id}" in busy.skip_reason.skip_message
            instance.report_run_canceled(from_page)
            instance.report_run_failed(curated_only)
            whole = instance.create_run_for_job(defs.resolve_job_def("everything"), status=dg.DagsterRunStatus.STARTED)
            assert whole.asset_selection is None
            busy = _evaluate(defs, "events", None, instance)
            assert busy.skip_reason and f"landing run {whole.run_id}" in busy.skip_reason.skip_message
    finally:
        channel.close()


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


def test_sensor_retries_a_failed_landing_of_the_same_state_and_names_the_failure(tmp_path: Path) -> None:
    """A landing run that failed is not forgotten: the same state is requested again (a new run
    key per attempt, a bounded number of times), then the skip reason names the failure."""
    setup = make_setup(tmp_path, sensor_min_backlog=10, sensor_retry_seconds=0)
    defs = build_definitions(setup.settings, [setup.spec])
    job = defs.resolve_job_def(landing_job_name("events"))
    channel = setup.open()
    try:
        fill(channel, events_at(20, 0))
        channel.checkpoint()
        (setup.conf / "landing.toml").unlink()  # every landing run fails, naming the missing file
        with dg.instance_for_test() as instance:
            cursor, keys, failed = None, [], []
            for _attempt in range(4):  # the first run, then three retries
                result = _evaluate(defs, "events", cursor, instance)
                assert result.run_requests, result.skip_reason
                (request,) = result.run_requests
                assert request.tags.get("ingest/retry-of", "") == (failed[-1] if failed else "")
                keys.append(request.run_key)
                run = job.execute_in_process(instance=instance, raise_on_error=False,
                                             tags={**request.tags, "dagster/run_key": request.run_key})
                assert not run.success
                failed.append(run.run_id)
                cursor = result.cursor
            assert len(set(keys)) == 4
            done = _evaluate(defs, "events", cursor, instance)
            assert not done.run_requests and done.skip_reason is not None
            message = done.skip_reason.skip_message
            assert f"landing run {failed[-1]} failed" in message and "landing.toml" in message
            assert "3 retries" in message and "waiting for the channel to change" in message
    finally:
        channel.close()


def test_sensor_does_not_retry_a_canceled_landing(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, sensor_min_backlog=10)
    defs = build_definitions(setup.settings, [setup.spec])
    job = defs.resolve_job_def(landing_job_name("events"))
    channel = setup.open()
    try:
        fill(channel, events_at(20, 0))
        channel.checkpoint()
        with dg.instance_for_test() as instance:
            first = _evaluate(defs, "events", None, instance)
            (request,) = first.run_requests or []
            run = instance.create_run_for_job(job, tags={"dagster/run_key": request.run_key},
                                              status=dg.DagsterRunStatus.STARTED)
            instance.report_run_canceled(run)
            again = _evaluate(defs, "events", first.cursor, instance)
            assert not again.run_requests and again.skip_reason is not None
            assert f"landing run {run.run_id} was canceled" in again.skip_reason.skip_message
    finally:
        channel.close()
