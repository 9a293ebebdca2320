"""The landing sensor under Dagster's real sensor daemon: a repeated run key launches nothing, a
recreated channel launches again. The code location is loaded as `dg dev` loads it (a gRPC code
server process over the conf dir), the daemon's iteration runs here against a test instance."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.scheduler.instigation import InstigatorState, InstigatorType, TickStatus
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.workspace.load_target import ModuleTarget
from dagster._daemon.sensor import execute_sensor_iteration

from ingest_toolkit.dagster.naming import landing_sensor_name

from .helpers import events_at, fill, make_setup

REPO = Path(__file__).resolve().parents[2]
SENSOR = landing_sensor_name("events")
INTERVAL = 5  # the smallest sensor_interval_seconds the settings accept


def _tick(context: object) -> None:
    list(execute_sensor_iteration(context, logging.getLogger("test-sensor-daemon"), None, None))  # type: ignore[arg-type]


def _sensor_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    return list(instance.get_runs(filters=dg.RunsFilter(tags={"dagster/sensor_name": SENSOR})))


def _state(instance: dg.DagsterInstance) -> InstigatorState:
    (state,) = [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
                if s.instigator_name == SENSOR]
    return state


def _lose_cursor(instance: dg.DagsterInstance) -> None:
    """What an operator's "reset cursor" (or a lost instigator state) does."""
    state = _state(instance)
    instance.update_instigator_state(state.with_data(state.instigator_data._replace(cursor=None)))  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.integration
def test_daemon_launches_a_repeated_run_key_once_and_a_recreated_channel_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    setup = make_setup(tmp_path)
    (setup.conf / "dagster.toml").write_text(
        f'[dagster]\nsensor_min_backlog = 10\nsensor_interval_seconds = {INTERVAL}\ncurated_root = "{tmp_path}/cur"\n')
    monkeypatch.setenv("INGEST_CONF_DIR", str(setup.conf))

    def fresh_channel() -> None:
        channel = setup.open()
        fill(channel, events_at(20, 0))
        channel.close()

    fresh_channel()
    target = ModuleTarget(module_name="dagster_defs.definitions", attribute="defs", working_directory=str(REPO),
                          location_name="ingest_toolkit")
    with dg.instance_for_test() as instance, create_test_daemon_workspace_context(target, instance) as workspace:
        _tick(workspace)
        (first,) = _sensor_runs(instance)
        key = first.tags["dagster/run_key"]
        assert key.startswith("land-events-") and key.endswith("-puts20-takes0")
        instance.report_run_failed(first)  # a failed landing leaves the channel's state as it was

        _lose_cursor(instance)  # the sensor no longer knows it requested this state: it asks again
        time.sleep(INTERVAL + 0.5)
        _tick(workspace)
        assert [r.run_id for r in _sensor_runs(instance)] == [first.run_id]  # Dagster skipped the repeated key
        state = _state(instance)
        (tick,) = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
        # The sensor did request the key again; the daemon found its run and launched nothing.
        assert (tick.status, tick.run_keys, tick.run_ids) == (TickStatus.SKIPPED, [key], [])

        shutil.rmtree(tmp_path / "channel")  # the demo's case: the channel recreated, the same counts
        fresh_channel()
        time.sleep(INTERVAL + 0.5)
        _tick(workspace)
        runs = _sensor_runs(instance)
        assert len(runs) == 2
        second = runs[0].tags["dagster/run_key"]
        assert second != key and second.endswith("-puts20-takes0")

