"""The status screen as rich renderables: a header (which agent, its health), a table each for the
channels, the forward sinks and the sources, and a footer (when it was read, how to quit).

Numbers are formatted for a glance (``12,345``, ``3m 20s``, ``1.2 GiB``); ``-`` is a value the
agent does not report or a rate that needs one more reading. Trouble is red: an unhealthy agent,
a channel that refuses puts or whose free space is below twice ``min_free_bytes``, open
incidents, a failing or penalised sink, a source that is down or has errors.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .model import ChannelRow, Reading, SinkRow, SourceRow, channel_rows, sink_rows, source_rows

__all__ = ["duration", "render", "size"]


def render(agent: str, now: Reading | None, before: Reading | None, *, problem: str | None = None,
           interval: float | None = None) -> RenderableType:
    """The whole screen. ``agent``: which agent (its description); ``problem``: why the last
    reading failed (the screen then keeps the last good one); ``interval``: the refresh (None:
    one screen, no key to press)."""
    parts: list[RenderableType] = [_header(agent, now, problem)]
    if now is not None:
        parts += [_channels(channel_rows(now, before))]
        sinks, sources = sink_rows(now, before), source_rows(now)
        if sinks:
            parts.append(_sinks(sinks))
        if sources:
            parts.append(_sources(sources))
    parts.append(_footer(interval, before is not None))
    return Group(*parts)


def _header(agent: str, now: Reading | None, problem: str | None) -> RenderableType:
    text = Text(agent, style="bold")
    if now is not None:
        status = now.status
        text.append(f"  ingest-toolkit {status.get('version', '?')}")
        healthy = status.get("healthy")
        text.append("  healthy" if healthy else "  UNHEALTHY", style="green" if healthy else "bold red")
        for reason in status.get("reasons") or []:
            text.append(f"\n  {reason}", style="red")
    if problem:
        text.append(f"\n  no answer: {problem} (retrying; the figures below are from the last answer)",
                    style="bold red")
    return text


def _table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", expand=False, pad_edge=False)
    for name in columns:
        table.add_column(name, justify="left" if name in _LEFT else "right", no_wrap=name not in _WRAP)
    return table


_LEFT = {"channel", "group", "sink", "address", "state", "source", "type", "detail", "last error"}
_WRAP = {"last error", "detail"}


def _channels(rows: list[ChannelRow]) -> Table:
    table = _table("channels", ("channel", "backlog", "oldest", "put/s", "take/s", "open takes", "fill",
                                "on disk", "free", "incidents"))
    for r in rows:
        low = r.writable_problem is not None or (
            r.free_bytes is not None and r.min_free_bytes is not None and r.free_bytes < 2 * r.min_free_bytes)
        takes = f"{_n(r.open_takes)} ({_n(r.events_in_open_takes)} ev)" if r.open_takes else _n(r.open_takes)
        table.add_row(r.channel, _n(r.backlog), duration(r.oldest_event_age_seconds), _rate(r.put_per_second),
                      _rate(r.take_per_second), takes, f"{r.fill_percent:.1f} %" if r.fill_percent is not None
                      else "-", size(r.log_bytes), Text(size(r.free_bytes), style="bold red" if low else ""),
                      Text(_n(r.incidents_open), style="bold red" if r.incidents_open else ""))
    return table


def _sinks(rows: list[SinkRow]) -> Table:
    table = _table("forward sinks", ("group", "sink", "address", "state", "lag", "lag age", "events/s",
                                     "failures", "last error"))
    for r in rows:
        bad = r.state != "sending"
        table.add_row(r.group, r.sink, r.address or "-", Text(r.state, style="bold red" if bad else "green"),
                      _n(r.lag_events), duration(r.lag_seconds), _rate(r.events_per_second), _n(r.failures),
                      Text(r.last_error or "", style="red"))
    return table


def _sources(rows: list[SourceRow]) -> Table:
    table = _table("sources", ("source", "type", "state", "errors", "retries", "detail"))
    for r in rows:
        table.add_row(r.source, r.type or "-", Text(r.state, style="green" if r.state == "running" else "bold red"),
                      Text(_n(r.errors), style="bold red" if r.errors else ""), _n(r.retries), r.detail)
    return table


def _footer(interval: float | None, rates: bool) -> Text:
    clock = time.strftime("%H:%M:%S")
    if interval is None:
        return Text(f"read at {clock}" + ("" if rates else "; rates need two readings"), style="dim")
    return Text(f"read at {clock}, every {interval:g} s; q or Ctrl-C quits", style="dim")


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def duration(seconds: float | None) -> str:
    """``42s``, ``3m 20s``, ``5h 02m``, ``3d 4h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.0f}s" if seconds >= 1 or seconds == 0 else f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def size(value: int | None) -> str:
    """Bytes as ``512 B``, ``1.5 KiB``, ``12.3 GiB``; ``-`` for None."""
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return "-"
