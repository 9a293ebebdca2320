"""The deferrable sensor's trigger in an asyncio event loop, as the triggerer runs it, on a real
channel's checkpoint.meta; and the sensor hands it the thresholds of the orchestration settings."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.models.trigger import Trigger
from airflow.sdk._shared.module_loading import import_string
from airflow.sdk.exceptions import TaskDeferred
from airflow.triggers.base import BaseTrigger

from ingest_toolkit.airflow import ChannelBacklogSensor, ChannelBacklogTrigger
from ingest_toolkit.orchestrate.settings import OrchestrationSettings, load_orchestration_settings

from ..orchestrate.helpers import Setup, events_at, fill, make_setup

POLL = 0.05


def _put(setup: Setup, count: int) -> None:
    """Commit ``count`` events and checkpoint (a running agent checkpoints every interval)."""
    channel = setup.open()
    try:
        fill(channel, events_at(count, 1_763_798_400_000))
        channel.checkpoint()
    finally:
        channel.close()


def _as_triggerer_runs_it(trigger: BaseTrigger) -> BaseTrigger:
    """The trigger as the triggerer rebuilds it: serialized into its database row (encrypted
    kwargs), then its class imported by path and called with the stored kwargs."""
    row = Trigger.from_object(trigger)
    return import_string(row.classpath)(**row.kwargs)  # type: ignore[no-any-return]


def _trigger(setup: Setup, drain_at: float | None = None, **thresholds: Any) -> BaseTrigger:
    settings = OrchestrationSettings(**{"sensor_min_backlog": 100, "sensor_max_backlog_age_seconds": 3600.0,
                                        **thresholds})
    return _as_triggerer_runs_it(ChannelBacklogTrigger("events", setup.spec.checkpoint_dir, settings.model_dump(),
                                                       POLL, drain_at))


async def _first_event(trigger: BaseTrigger, quiet: float, then: Any = None, timeout: float = 20.0) -> Any:
    """Poll for ``quiet`` seconds, asserting nothing fires; run ``then()`` in a thread; the first
    event after that (``timeout``)."""
    ticks = 0

    async def ticker() -> None:  # the loop stays free while the trigger polls (the file read is in a thread)
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(POLL / 5)

    beat = asyncio.create_task(ticker())
    events = trigger.run()
    first = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(quiet)
    assert not first.done(), first.result().payload
    assert ticks >= quiet / (POLL / 5) / 3, ticks
    if then is not None:
        await asyncio.to_thread(then)
    try:
        return (await asyncio.wait_for(first, timeout)).payload
    finally:
        beat.cancel()
        await events.aclose()


def test_fires_on_a_backlog_at_the_threshold_and_not_below(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    _put(setup, 60)  # below sensor_min_backlog = 100

    payload = asyncio.run(_first_event(_trigger(setup), quiet=0.6, then=lambda: _put(setup, 40)))
    assert payload["trigger"] == "backlog" and payload["channel"] == "events"
    assert "committed backlog 100 events (threshold 100)" in payload["reason"], payload
    assert payload["run_key"].startswith("land-events-")


def test_fires_when_the_oldest_event_is_old_enough(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    _put(setup, 5)
    started = time.monotonic()
    payload = asyncio.run(_first_event(_trigger(setup, sensor_max_backlog_age_seconds=2.0), quiet=0.5))
    assert time.monotonic() - started >= 1.5  # not before the oldest event is 2 s old
    assert payload["trigger"] == "backlog" and "committed backlog 5 events" in payload["reason"]


def test_drains_a_small_backlog_after_drain_at_and_never_an_empty_channel(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    setup.open().close()  # an empty channel with its checkpoint
    empty = _trigger(setup, drain_at=time.time())

    async def stays_quiet() -> None:
        events = empty.run()
        first = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.5)
        assert not first.done()
        first.cancel()  # as the triggerer cancels a trigger whose task timed out
        with contextlib.suppress(asyncio.CancelledError):
            await first

    asyncio.run(stays_quiet())
    _put(setup, 5)
    payload = asyncio.run(_first_event(_trigger(setup, drain_at=time.time() + 0.5), quiet=0.3))
    assert payload["trigger"] == "drain" and "below thresholds" in payload["reason"], payload


def test_the_sensor_defers_with_the_thresholds_of_the_orchestration_settings(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The neutral [orchestrate] table and, on top, the Dagster sensor's [dagster] table: the
    trigger polls with exactly what the Dagster definitions load."""
    setup = make_setup(tmp_path)
    _put(setup, 30)
    (setup.conf / "orchestrate.toml").write_text(
        "[orchestrate]\nsensor_min_backlog = 50\nsensor_max_backlog_age_seconds = 90.0\nsensor_interval_seconds = 5\n")
    (setup.conf / "dagster.toml").write_text("[dagster]\nsensor_min_backlog = 40\n")
    sensor = ChannelBacklogSensor(task_id="wait", channel="events", conf_dir=str(setup.conf))
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})  # type: ignore[arg-type]
    trigger = deferred.value.trigger
    assert isinstance(trigger, ChannelBacklogTrigger) and deferred.value.method_name == "execute_complete"
    expected = load_orchestration_settings(directory=setup.conf)
    assert trigger.settings == expected.model_dump()
    assert (expected.sensor_min_backlog, expected.sensor_max_backlog_age_seconds) == (40, 90.0)
    assert trigger.poll_seconds == 5 and trigger.checkpoint_dir == setup.spec.checkpoint_dir

    _put(setup, 10)  # 40 events: the [dagster] threshold is met, no deferral
    event = sensor.execute({})  # type: ignore[arg-type]
    assert event["trigger"] == "backlog" and "committed backlog 40 events (threshold 40)" in event["reason"]
