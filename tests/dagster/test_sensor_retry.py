"""The landing sensor requests a failed run's channel state again (no Spark: runs are recorded
in a real instance, as the daemon would record a landing that failed before taking anything)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from ingest_toolkit.dagster.factory import build_definitions
from ingest_toolkit.dagster.naming import ident, landing_job_name

from .helpers import events_at, fill, make_setup


def _evaluate(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def(f"landing_sensor_{ident('events')}")
    result = sensor(dg.build_sensor_context(cursor=cursor, instance=instance, definitions=defs))
    assert isinstance(result, dg.SensorResult)
    return result


def _failed_run(instance: dg.DagsterInstance, defs: dg.Definitions, run_key: str) -> None:
    job = defs.resolve_job_def(landing_job_name("events"))
    run = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, tags={"dagster/run_key": run_key})
    instance.report_run_failed(run)


def test_a_failed_run_of_an_unchanged_state_is_requested_again_after_the_backoff(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, sensor_min_backlog=10, sensor_retry_seconds=0)
    slow = make_setup(tmp_path / "slow", sensor_min_backlog=10, sensor_retry_seconds=3600)
    channel = setup.open()
    fill(channel, events_at(20, 0))
    channel.close()
    defs = build_definitions(setup.settings, [setup.spec])
    with dg.instance_for_test() as instance:
        first = _evaluate(defs, instance, None)
        (request,) = first.run_requests or []
        waiting = _evaluate(defs, instance, first.cursor)  # not launched yet: nothing to retry
        assert not waiting.run_requests and "already requested for this state" in waiting.skip_reason.skip_message
        _failed_run(instance, defs, request.run_key)
        retry = _evaluate(defs, instance, first.cursor)
        assert [r.run_key for r in retry.run_requests or []] == [f"{request.run_key}-retry1"]
        _failed_run(instance, defs, f"{request.run_key}-retry1")
        second = _evaluate(defs, instance, retry.cursor)
        assert [r.run_key for r in second.run_requests or []] == [f"{request.run_key}-retry2"]
        # Within the backoff the sensor waits (the same instance, a setting of an hour).
        slow_defs = build_definitions(slow.settings.model_copy(update={"agent_conf": setup.settings.agent_conf}),
                                      [setup.spec])
        held = _evaluate(slow_defs, instance, second.cursor)
        assert not held.run_requests and held.skip_reason is not None
