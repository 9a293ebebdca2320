"""The agent's metric families of its channels and sources (see :mod:`.metrics` for the list).

Read from the live objects at scrape time: ``FileChannel.stats()``, ``checkpoint.meta`` and each
source's ``stats()``. Every ``ingest_channel_*_total`` counter counts since the agent opened the
channel (the channel's lifetime counts are in ``/status``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..channel import FileChannel
from ..channel.checkpoint import CheckpointInvalid, read_checkpoint_meta
from .metrics import Sample
from .sources import Source

__all__ = ["Family", "channel_families", "safe_stats", "source_families", "source_problem"]

Family = tuple[str, str, str, list[Sample]]


def safe_stats(stats: Any) -> dict[str, Any]:
    """``stats()`` as a dict; a failing one as ``{"error": ...}`` (a scrape never fails on it)."""
    try:
        return dict(stats())
    except Exception as err:
        return {"error": f"{type(err).__name__}: {err}"}


def source_problem(source: Source) -> str | None:
    """Why ``source`` is not running (its stats say ``"running": false`` or fail), or None."""
    try:
        stats = source.stats()
    except Exception as err:
        return f"stats() failed: {err}"
    if stats.get("running") is False:
        return str(stats.get("error") or "not running")
    return None


_CHANNEL_GAUGES = (
    ("queue_depth", "queue_size", "gauge", "Committed events not yet taken."),
    ("used", "used", "gauge", "Slots in use: queued, in flight and in open put transactions."),
    ("capacity", "capacity", "gauge", "Configured capacity (events)."),
    ("open_transactions", "open_transactions", "gauge", "Open put and take transactions."),
    ("puts_total", "puts_since_open", "counter", "Events committed by put transactions since the channel opened."),
    ("takes_total", "takes_since_open", "counter", "Events committed by take transactions since the channel opened."),
    ("commits_total", "commits", "counter", "Committed transactions since the channel opened."),
    ("fsyncs_total", "fsyncs", "counter", "fdatasync calls on log segments since the channel opened."),
)


def channel_families(channels: Mapping[str, FileChannel]) -> list[Family]:
    stats = {name: safe_stats(ch.stats) for name, ch in channels.items()}
    families: list[Family] = []
    for suffix, key, kind, help_text in _CHANNEL_GAUGES:
        name = f"ingest_channel_{suffix}"
        families.append((name, kind, help_text, [Sample(name, {"channel": c}, float(s[key]))
                                                 for c, s in stats.items() if key in s]))
    families.append(("ingest_channel_log_files", "gauge", "Log segments on disk.",
                     [Sample("ingest_channel_log_files", {"channel": c}, len(s.get("log_files", {})))
                      for c, s in stats.items()]))
    ages, backlog = [], []
    for name, channel in channels.items():
        try:
            info = read_checkpoint_meta(channel.config.checkpoint_dir)
        except (CheckpointInvalid, OSError):
            info = None
        if info is not None:
            ages.append(Sample("ingest_channel_checkpoint_age_seconds", {"channel": name}, info.age_seconds()))
            backlog.append(Sample("ingest_channel_backlog_age_seconds", {"channel": name},
                                  info.backlog_age_seconds()))
    families.append(("ingest_channel_checkpoint_age_seconds", "gauge", "Seconds since checkpoint.meta was written.",
                     ages))
    families.append(("ingest_channel_backlog_age_seconds", "gauge",
                     "Seconds since the oldest queued event was committed, as of the last checkpoint.", backlog))
    return families


def source_families(sources: Mapping[str, Source]) -> list[Family]:
    up, errors, stats = [], [], []
    for name, source in sources.items():
        up.append(Sample("ingest_source_up", {"source": name}, 0 if source_problem(source) else 1))
        values = safe_stats(source.stats)
        errors.append(Sample("ingest_source_errors_total", {"source": name}, float(values.get("errors", 0))))
        for key, value in sorted(values.items()):
            if isinstance(value, int | float) and not isinstance(value, bool):
                stats.append(Sample("ingest_source_stat", {"source": name, "stat": key}, float(value)))
    return [("ingest_source_up", "gauge", "1 when the source is running.", up),
            ("ingest_source_errors_total", "counter", "Errors the source counted (stats() 'errors'): puts failed "
             "for a non-transient reason, spool files that failed or changed while read, HTTP 500 answers, "
             "unexpected errors of its worker.", errors),
            ("ingest_source_stat", "gauge", "Numeric values the source reports in stats().", stats)]
