"""The rows and the screen of ``ingest-toolkit status`` from two readings of an agent's ``/status``
(the live command against a real agent: tests/agent/test_live_screens.py, test_which_agent.py)."""

from __future__ import annotations

import copy
from typing import Any

from rich.console import Console

from ingest_toolkit.status.model import Reading, channel_rows, document, sink_rows, source_rows
from ingest_toolkit.status.screen import duration, render, size


def _status(puts: int, takes: int, sent: int) -> dict[str, Any]:
    return {
        "agent": "edge", "version": "0.1.0", "healthy": False, "reasons": ["sink group up: not running"],
        "channels": {"events": {
            "queue_size": 4200, "used": 5200, "capacity": 100_000, "open_takes": 1, "events_in_open_takes": 1000,
            "puts_committed": puts, "takes_committed": takes, "oldest_event_age_seconds": 200.0,
            "incidents": {"open": 1, "events": 3},
            "disk": {"log_bytes": 3 << 20, "free_bytes": 150 << 20, "min_free_bytes": 100 << 20,
                     "writable_problem": None}}},
        "sinks": {"up": {"channel": "events", "running": False, "sinks": {"agg": {
            "address": "10.0.0.9:7431", "events": sent, "failures": 4, "consecutive_failures": 2,
            "penalty_seconds_left": 3.5, "last_error": "AgentUnavailableError: connection refused"}}}},
        "sources": {"spool": {"type": "spool_dir", "running": True, "errors": 2, "retries": 5, "pending_files": 3},
                    "web": {"type": "http", "requests": 10, "errors": 0}},
    }


def test_rates_are_the_change_of_the_lifetime_counters_between_two_readings() -> None:
    before, now = Reading(10.0, _status(1000, 500, 100)), Reading(12.0, _status(3000, 1500, 700))
    (row,) = channel_rows(now, before)
    assert (row.put_per_second, row.take_per_second) == (1000.0, 500.0)
    assert (row.backlog, row.open_takes, row.events_in_open_takes, row.incidents_open) == (4200, 1, 1000, 1)
    assert row.fill_percent == 5.2 and row.log_bytes == 3 << 20 and row.oldest_event_age_seconds == 200.0
    assert channel_rows(now, None)[0].put_per_second is None  # one reading: no rate yet
    restarted = Reading(14.0, _status(10, 5, 0))
    assert channel_rows(restarted, now)[0].put_per_second is None  # a counter that went down


def test_a_sinks_lag_is_the_backlog_of_the_channel_it_empties() -> None:
    before, now = Reading(10.0, _status(0, 0, 100)), Reading(12.0, _status(0, 0, 700))
    (sink,) = sink_rows(now, before)
    assert (sink.group, sink.sink, sink.lag_events, sink.lag_seconds, sink.events_per_second) == (
        "up", "agg", 4200, 200.0, 300.0)
    assert sink.state == "stopped" and sink.failures == 4
    running = copy.deepcopy(now.status)
    running["sinks"]["up"]["running"] = True
    assert sink_rows(Reading(12.0, running), before)[0].state == "penalised 3.5 s"


def test_sources_show_their_state_errors_and_own_counter() -> None:
    spool, web = source_rows(Reading(0.0, _status(0, 0, 0)))
    assert (spool.state, spool.errors, spool.retries, spool.detail) == ("running", 2, 5, "3 files pending")
    assert (web.state, web.detail) == ("-", "10 requests")


def test_the_screen_shows_every_row_and_the_json_the_same_rows() -> None:
    before, now = Reading(10.0, _status(1000, 500, 100)), Reading(12.0, _status(3000, 1500, 700))
    console = Console(record=True, width=200, color_system=None)
    console.print(render("agent 'edge' (pid 7) at 127.0.0.1:7432 (port from var/agent/ports.json)", now, before,
                         interval=2.0))
    text = console.export_text()
    assert "UNHEALTHY" in text and "sink group up: not running" in text
    for value in ("4,200", "3m 20s", "1,000", "500", "1 (1,000 ev)", "5.2 %", "3.0 MiB", "150.0 MiB",
                  "10.0.0.9:7431", "stopped", "connection refused", "3 files pending"):
        assert value in text, value
    assert "every 2 s; q or Ctrl-C quits" in text
    doc = document(now, before, {"name": "edge"})
    assert doc["format"] == "ingest-toolkit/status/1" and doc["channels"][0]["put_per_second"] == 1000.0
    assert doc["sinks"][0]["lag_events"] == 4200 and doc["sources"][0]["errors"] == 2


def test_a_failed_reading_keeps_the_last_screen_and_says_why() -> None:
    console = Console(record=True, width=200, color_system=None)
    console.print(render("agent 'edge'", Reading(1.0, _status(0, 0, 0)), None, problem="connection refused",
                         interval=2.0))
    text = console.export_text()
    assert "no answer: connection refused (retrying; the figures below are from the last answer)" in text
    assert "4,200" in text


def test_durations_and_sizes_read_at_a_glance() -> None:
    assert [duration(s) for s in (None, 0, 0.4, 42, 200, 18_120, 3 * 86400 + 4 * 3600)] == [
        "-", "0s", "0.4s", "42s", "3m 20s", "5h 02m", "3d 4h"]
    assert [size(b) for b in (None, 512, 1536, 3 << 30)] == ["-", "512 B", "1.5 KiB", "3.0 GiB"]
