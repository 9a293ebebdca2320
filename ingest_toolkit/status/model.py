"""What the status screen shows, computed from readings of the agent's ``/status``.

A :class:`Reading` is one ``/status`` document and the (monotonic) time it was read. Rates need
two: the put and take rates of a channel are the change of its lifetime counters
(``puts_committed``, ``takes_committed``) between the last two readings, per second; a forward
sink's rate is the change of its acknowledged ``events``. A counter that went down (the agent
restarted) gives no rate for that refresh.

The rows (:class:`ChannelRow`, :class:`SinkRow`, :class:`SourceRow`) are what both the screen and
``--json`` show, so a test of one is a test of the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..numbers import count

__all__ = ["ChannelRow", "Reading", "SinkRow", "SourceRow", "channel_rows", "document", "sink_rows", "source_rows"]


@dataclass(frozen=True)
class Reading:
    at: float  # time.monotonic() when it was read
    status: dict[str, Any]


@dataclass(frozen=True)
class ChannelRow:
    channel: str
    backlog: int | None  # committed events not taken (queued)
    oldest_event_age_seconds: float | None  # None: nothing queued or in an open take
    put_per_second: float | None  # None: a first reading, or a counter reset
    take_per_second: float | None
    open_takes: int | None
    events_in_open_takes: int | None
    fill_percent: float | None
    log_bytes: int | None
    free_bytes: int | None
    min_free_bytes: int | None
    writable_problem: str | None
    incidents_open: int | None


@dataclass(frozen=True)
class SinkRow:
    group: str
    sink: str
    channel: str | None
    address: str | None
    state: str  # "sending", "penalised 12.3 s", "failing: <error>", "stopped"
    lag_events: int | None  # the backlog of the channel the group empties
    lag_seconds: float | None  # the age of its oldest event
    events_per_second: float | None
    failures: int | None
    last_error: str | None


@dataclass(frozen=True)
class SourceRow:
    source: str
    type: str | None
    state: str  # "running", "down", "-" (the source does not say)
    errors: int | None
    retries: int | None
    detail: str  # the source's own useful counter: files pending, bytes behind, requests


def _per_second(now: Reading, before: Reading | None, *path: str) -> float | None:
    """The change per second of the counter at ``path`` in ``/status`` between the two readings."""
    if before is None or now.at <= before.at:
        return None
    current, earlier = _dig(now.status, *path), _dig(before.status, *path)
    if not isinstance(current, int | float) or not isinstance(earlier, int | float) or current < earlier:
        return None
    return (current - earlier) / (now.at - before.at)


def _dig(document: Any, *keys: str) -> Any:
    for key in keys:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def channel_rows(now: Reading, before: Reading | None) -> list[ChannelRow]:
    """One row per channel of the agent, in its order."""
    rows = []
    for name, ch in (now.status.get("channels") or {}).items():
        used, capacity = ch.get("used"), ch.get("capacity")
        disk = ch.get("disk") or {}
        rows.append(ChannelRow(
            name, ch.get("queue_size"), ch.get("oldest_event_age_seconds"),
            _per_second(now, before, "channels", name, "puts_committed"),
            _per_second(now, before, "channels", name, "takes_committed"),
            ch.get("open_takes"), ch.get("events_in_open_takes"),
            100.0 * used / capacity if isinstance(used, int) and capacity else None,
            disk.get("log_bytes"), disk.get("free_bytes"), disk.get("min_free_bytes"), disk.get("writable_problem"),
            _dig(ch, "incidents", "open")))
    return rows


def sink_rows(now: Reading, before: Reading | None) -> list[SinkRow]:
    """One row per forward sink, grouped by sink group; the lag is its channel's backlog."""
    rows = []
    channels = now.status.get("channels") or {}
    for group, stats in (now.status.get("sinks") or {}).items():
        channel = stats.get("channel")
        backlog = channels.get(channel) or {}
        for sink, s in (stats.get("sinks") or {}).items():
            rows.append(SinkRow(
                group, sink, channel, s.get("address"), _sink_state(stats, s), backlog.get("queue_size"),
                backlog.get("oldest_event_age_seconds"),
                _per_second(now, before, "sinks", group, "sinks", sink, "events"),
                s.get("failures"), s.get("last_error") or None))
    return rows


def _sink_state(group: dict[str, Any], sink: dict[str, Any]) -> str:
    if group.get("running") is False:
        return "stopped"
    penalty = sink.get("penalty_seconds_left") or 0
    if penalty > 0:
        return f"penalised {penalty:.1f} s"
    if sink.get("consecutive_failures"):
        return f"failing ({sink['consecutive_failures']} in a row)"
    return "sending"


_DETAIL: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("pending_files", lambda n: f"{count(n, 'file')} pending"), ("lag_bytes", lambda n: f"{count(n, 'byte')} behind"),
    ("requests", lambda n: count(n, "request")), ("command_pid", lambda n: f"command pid {n}"))


def source_rows(now: Reading) -> list[SourceRow]:
    rows = []
    for name, s in (now.status.get("sources") or {}).items():
        running = s.get("running")
        state = "running" if running is True else "down" if running is False else "-"
        if "error" in s and running is None:
            state = f"stats failed: {s['error']}"
        detail = ", ".join(show(s[key]) for key, show in _DETAIL if s.get(key) is not None)
        rows.append(SourceRow(name, s.get("type"), state, s.get("errors"), s.get("retries"), detail))
    return rows


def document(now: Reading, before: Reading | None, agent: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` document: the rows the screen shows, and the raw ``/status`` beside them."""
    return {"format": "ingest-toolkit/status/1", "agent": agent,
            "seconds_between_readings": round(now.at - before.at, 3) if before else None,
            "healthy": now.status.get("healthy"), "reasons": now.status.get("reasons", []),
            "channels": [asdict(r) for r in channel_rows(now, before)],
            "sinks": [asdict(r) for r in sink_rows(now, before)],
            "sources": [asdict(r) for r in source_rows(now)], "status": now.status}
