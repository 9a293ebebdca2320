"""The landing sensor's decision and the drain's, over a real channel's checkpoint.meta (no Dagster)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from ingest_toolkit.channel.checkpoint import read_checkpoint_meta
from ingest_toolkit.orchestrate.backlog import (
    ChannelState,
    PreviousRun,
    RunOutcome,
    SensorCursor,
    decide,
    drain_decision,
    evaluate_landing,
)

from .helpers import Setup, events_at, fill, make_setup


def test_sensor_cursor_round_trip_and_damaged_cursor() -> None:
    state = ChannelState("5f0c6a52-0d0e-4c43-9d4e-111111111111", 110, 110, 5)
    cursor = SensorCursor(7, state.channel_id, state, state.run_key("events"))
    assert SensorCursor.parse(cursor.dumps()) == cursor
    assert json.loads(cursor.dumps())["requested"]["takes_committed"] == 5
    assert SensorCursor.parse("not json") == SensorCursor()
    assert SensorCursor.parse('{"requested": {"x": 1}}') == SensorCursor()  # an unknown shape: no cursor
    assert SensorCursor.parse(None) == SensorCursor()


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




def _filled(tmp_path: Path, events: int = 20, **settings: object) -> Setup:
    setup = make_setup(tmp_path, sensor_min_backlog=10, **settings)
    channel = setup.open()
    fill(channel, events_at(events, 0))
    channel.close()
    return setup


def _never(*_args: object) -> None:
    raise AssertionError("the decision did not need this")


def test_evaluate_requests_once_then_retries_a_failed_run_after_the_backoff(tmp_path: Path) -> None:
    setup = _filled(tmp_path, sensor_retry_seconds=60, sensor_max_retries=1)
    first = evaluate_landing("events", setup.spec.checkpoint_dir, setup.settings, None, _never, lambda: None)
    assert first.decision.run and first.tags == {"ingest/channel": "events", "ingest/trigger": "backlog"}
    key = first.decision.run_key
    assert key is not None and key.endswith("-puts20-takes0")
    asked: list[str] = []

    def lookup(ended: float) -> Callable[[str], PreviousRun]:
        def previous(run_key: str) -> PreviousRun:
            asked.append(run_key)
            return PreviousRun("run-1", RunOutcome.FAILURE, "NameNode in safe mode", ended)
        return previous

    waiting = evaluate_landing("events", setup.spec.checkpoint_dir, setup.settings, first.cursor,
                               lookup(time.time()), _never)
    assert asked == [key] and not waiting.decision.run
    assert "landing run run-1 failed (NameNode in safe mode); retry 1 of 1 in 60 s" in waiting.decision.reason
    retry = evaluate_landing("events", setup.spec.checkpoint_dir, setup.settings, first.cursor,
                             lookup(time.time() - 61), lambda: None)
    assert retry.decision.run and retry.decision.run_key == f"{key}-retry1"
    assert retry.tags["ingest/retry-of"] == "run-1" and retry.tags["ingest/trigger"] == "retry"
    assert SensorCursor.parse(retry.cursor).retries == 1
    spent = evaluate_landing("events", setup.spec.checkpoint_dir, setup.settings, retry.cursor,
                             lookup(time.time() - 61), _never)
    assert not spent.decision.run and "after 1 retries of this state (sensor_max_retries = 1)" in spent.decision.reason


def test_evaluate_skips_while_a_landing_runs_and_for_a_canceled_run(tmp_path: Path) -> None:
    setup = _filled(tmp_path)
    busy = evaluate_landing("events", setup.spec.checkpoint_dir, setup.settings, None, _never, lambda: "run-9")
    assert not busy.decision.run and "landing run run-9 of this channel is already queued or running" in \
        busy.decision.reason
    assert SensorCursor.parse(busy.cursor).requested is None  # nothing was requested
    first = evaluate_landing("events", setup.spec.checkpoint_dir, setup.settings, None, _never, lambda: None)
    canceled = evaluate_landing("events", setup.spec.checkpoint_dir, setup.settings, first.cursor,
                                lambda _key: PreviousRun("run-2", RunOutcome.CANCELED), _never)
    assert not canceled.decision.run and "landing run run-2 was canceled" in canceled.decision.reason
    active = evaluate_landing("events", setup.spec.checkpoint_dir, setup.settings, first.cursor,
                              lambda _key: PreviousRun("run-2", RunOutcome.ACTIVE), _never)
    assert "already requested for this state" in active.decision.reason


def test_evaluate_keeps_the_cursor_when_checkpoint_meta_is_damaged(tmp_path: Path) -> None:
    setup = _filled(tmp_path)
    (Path(setup.spec.checkpoint_dir) / "checkpoint.meta").write_bytes(b"not a checkpoint")
    tick = evaluate_landing("events", setup.spec.checkpoint_dir, setup.settings, '{"checkpoint_id": 3}', _never,
                            _never)
    assert not tick.decision.run and "checkpoint.meta unreadable" in tick.decision.reason
    assert tick.cursor is None


def test_drain_decision(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    channel = setup.open()
    try:
        channel.checkpoint()
        empty = drain_decision("events", setup.spec.checkpoint_dir)
        assert not empty.run and "nothing to drain (committed backlog 0" in empty.reason
        fill(channel, events_at(2, 0))
        channel.checkpoint()
        assert drain_decision("events", setup.spec.checkpoint_dir).run
    finally:
        channel.close()
    (Path(setup.spec.checkpoint_dir) / "checkpoint.meta").write_bytes(b"damaged")
    damaged = drain_decision("events", setup.spec.checkpoint_dir)
    assert damaged.run and "draining anyway" in damaged.warning
