"""The agent's metric families (see :mod:`.metrics` for the list) and the scrape that renders them.

Read from the live objects at scrape time: the agent's own state, ``FileChannel.stats()``,
``checkpoint.meta``, the channels' writability, the pipelines' registry and each source's
``stats()``. Every ``ingest_channel_*_total`` counter counts since the agent opened the channel
(the channel's lifetime counts are in ``/status``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..channel import FileChannel
from ..channel.checkpoint import CheckpointInvalid, read_checkpoint_meta
from .metrics import Family, MetricsRegistry, Sample, render
from .sinks import SinkGroup
from .sources import Source
from .writability import Writability

__all__ = ["AgentFacts", "Family", "agent_families", "channel_families", "exposition", "safe_stats",
           "sink_families", "source_families", "source_problem"]


@dataclass(frozen=True)
class AgentFacts:
    """What the ``ingest_agent_*`` families say about the agent itself."""

    name: str
    version: str
    healthy: bool
    started_at: float


def exposition(agent: AgentFacts, *, channels: Mapping[str, FileChannel], writability: Writability,
               registry: MetricsRegistry, sources: Mapping[str, Source],
               sink_groups: Mapping[str, SinkGroup] | None = None) -> str:
    """The text of one ``/metrics`` scrape: every family, in a stable order."""
    families = agent_families(agent) + channel_families(channels) + writability.families()
    return render(families + registry.families() + source_families(sources) + sink_families(sink_groups or {}))


_SINK_COUNTERS = (
    ("batches", "Batches the downstream agent acknowledged (duplicates included)."),
    ("events", "Events the downstream agent acknowledged (stored by this put, or by one whose ack was lost)."),
    ("duplicate_batches", "Batches the downstream agent already held (a redelivery after a lost ack)."),
    ("failures", "Failed puts (the batch keeps its take and is put again, the same events under the same id)."),
    ("in_doubt_failures", "Failed puts that may have been stored: retried on the same sink only."),
)


def sink_families(groups: Mapping[str, SinkGroup]) -> list[Family]:
    """Per forward sink (label ``sink``, and ``group``): counters, ack latency, penalty; per group:
    events dropped as looping."""
    families: list[Family] = []
    sinks = [(name, sink) for name, group in groups.items() for sink in group.sinks]
    stats = {sink.name: sink.stats() for _g, sink in sinks}
    for key, help_text in _SINK_COUNTERS:
        metric = f"ingest_sink_{key}_total"
        families.append((metric, "counter", help_text, [Sample(metric, {"sink": s.name, "group": g},
                                                               float(stats[s.name][key])) for g, s in sinks]))
    families.append(("ingest_sink_ack_seconds", "histogram", "From sending a batch to the downstream agent's ack "
                     "(its durable commit).", [x for g, s in sinks for x in s.ack_histogram().samples(
                         "ingest_sink_ack_seconds", {"sink": s.name, "group": g})]))
    families.append(("ingest_sink_penalty_seconds", "gauge", "Seconds until a failed sink is tried again (0: ready).",
                     [Sample("ingest_sink_penalty_seconds", {"sink": s.name, "group": g},
                             float(stats[s.name]["penalty_seconds_left"])) for g, s in sinks]))
    families.append(("ingest_sink_unreachable_seconds", "gauge", "Seconds the puts to a sink have gone unanswered "
                     "(0: its last put was answered).",
                     [Sample("ingest_sink_unreachable_seconds", {"sink": s.name, "group": g},
                             float(stats[s.name]["unreachable_seconds"])) for g, s in sinks]))
    families.append(("ingest_sink_unreachable", "gauge", "1 while a sink has gone unanswered for longer than its "
                     "group's unreachable_after.",
                     [Sample("ingest_sink_unreachable", {"sink": s.name, "group": g},
                             float(s.unreachable_seconds() > groups[g].unreachable_after)) for g, s in sinks]))
    families.append(("ingest_sink_group_unforwarded_events", "gauge", "Events of the group's channel not yet "
                     "acknowledged downstream: queued, or in batches taken and not committed (0: all forwarded).",
                     [Sample("ingest_sink_group_unforwarded_events", {"group": g}, float(group.unforwarded_events()))
                      for g, group in groups.items()]))
    families.append(("ingest_sink_group_dropped_looping_total", "counter", "Events dropped because their hop "
                     "counter reached max_hops (a forwarding loop).",
                     [Sample("ingest_sink_group_dropped_looping_total", {"group": g},
                             float(group.stats()["dropped_looping"])) for g, group in groups.items()]))
    return families


def agent_families(agent: AgentFacts) -> list[Family]:
    return [
        ("ingest_agent_up", "gauge", "1 when the agent is healthy, else 0.",
         [Sample("ingest_agent_up", {}, 1 if agent.healthy else 0)]),
        ("ingest_agent_start_time_seconds", "gauge", "Unix time the agent finished starting.",
         [Sample("ingest_agent_start_time_seconds", {}, agent.started_at)]),
        ("ingest_agent_info", "gauge", "Agent name and toolkit version.",
         [Sample("ingest_agent_info", {"agent": agent.name, "version": agent.version}, 1)]),
    ]


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
    now_ns = time.time_ns()
    families.append(("ingest_channel_batch_ids_remembered_seconds", "gauge",
                     "How far back the channel's memory of batch ids reaches: a retry of a batch first sent "
                     "within this many seconds is recognised (docs/channel.md, commit tags).",
                     [Sample("ingest_channel_batch_ids_remembered_seconds", {"channel": c},
                             max(0.0, (now_ns - s["tags_since_unix_ns"]) / 1e9))
                      for c, s in stats.items() if "tags_since_unix_ns" in s]))
    families.append(("ingest_channel_incidents_open", "gauge",
                     "Ranges recovery or a repair cut from the channel's log and no operator acknowledged yet "
                     "(docs/durability.md, \"Recovery modes\"; 'ingest-toolkit channel acknowledge').",
                     [Sample("ingest_channel_incidents_open", {"channel": c},
                             float(s["incidents"]["open"] + bool(s["incidents"]["problem"])))
                      for c, s in stats.items() if "incidents" in s]))
    families.append(("ingest_channel_incident_events", "gauge",
                     "Events dropped or set aside by the open incidents (their commits may have been acknowledged "
                     "when the incident says so).",
                     [Sample("ingest_channel_incident_events", {"channel": c}, float(s["incidents"]["events"]))
                      for c, s in stats.items() if "incidents" in s]))
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
