"""The agent's metrics in the Prometheus text exposition format (version 0.0.4).

Counters only ever grow (scrape them with ``rate()``), gauges are read at scrape time from the
live objects, so a scrape never blocks a put for longer than ``FileChannel.stats()`` holds the
channel's lock. Metric families::

    ingest_agent_up, ingest_agent_start_time_seconds, ingest_agent_info{agent,version}
    ingest_channel_queue_depth / _used / _capacity / _open_transactions / _log_files      {channel}
    ingest_channel_puts_total / _takes_total (events) / _commits_total / _fsyncs_total    {channel}
    ingest_channel_checkpoint_age_seconds / _backlog_age_seconds                          {channel}
    ingest_channel_writable (0: puts refused for disk space) / _free_bytes                {channel}
    ingest_channel_incidents_open / _incident_events (cuts not yet acknowledged)          {channel}
    ingest_channel_batch_ids_remembered_seconds                                           {channel}
    ingest_pipeline_events_total / _batches_total / _duplicate_batches_total            {pipeline}
    ingest_pipeline_errors_total                                                  {pipeline,error}
    ingest_pipeline_put_seconds (histogram: one put_batch, commits of every channel)    {pipeline}
    ingest_remote_take_seconds (histogram: a take request served over gRPC)              {channel}
    ingest_remote_commit_seconds (histogram: the commit of a remote take transaction)    {channel}
    ingest_source_up / ingest_source_errors_total                                         {source}
    ingest_source_stat                         {source,stat}  (numeric values of Source.stats())
    ingest_sink_batches_total / _events_total / _duplicate_batches_total             {sink,group}
    ingest_sink_failures_total / _in_doubt_failures_total                            {sink,group}
    ingest_sink_ack_seconds (histogram) / ingest_sink_penalty_seconds (gauge)        {sink,group}
    ingest_sink_unreachable_seconds / ingest_sink_unreachable (gauges)                {sink,group}
    ingest_sink_group_unforwarded_events (gauge) / _dropped_looping_total                 {group}

A pipeline is one source (named like it) or ``grpc`` for remote puts.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["BUCKETS", "Family", "Histogram", "MetricsRegistry", "Sample", "render"]

# Seconds. A fsync'ed commit on a local disk takes ~0.3-50 ms; a full channel waits keep_alive.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Histogram:
    """Cumulative buckets as Prometheus expects them; not thread-safe (the registry locks)."""

    buckets: tuple[float, ...] = BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def samples(self, name: str, labels: Mapping[str, str]) -> list[Sample]:
        out, running = [], 0
        counts = self.counts or [0] * len(self.buckets)
        for bound, n in zip(self.buckets, counts, strict=True):
            running += n
            out.append(Sample(f"{name}_bucket", {**labels, "le": _number(bound)}, running))
        out.append(Sample(f"{name}_bucket", {**labels, "le": "+Inf"}, self.count))
        out += [Sample(f"{name}_sum", labels, self.total), Sample(f"{name}_count", labels, self.count)]
        return out


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


Family = tuple[str, str, str, list[Sample]]
"""One metric family: ``(name, type, help, samples)``."""


class MetricsRegistry:
    """What the agent counts itself (the channels and sources report their own state)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, int] = defaultdict(int)
        self._batches: dict[str, int] = defaultdict(int)
        self._duplicates: dict[str, int] = defaultdict(int)
        self._errors: dict[tuple[str, str], int] = defaultdict(int)
        self._latency: dict[str, Histogram] = defaultdict(Histogram)
        self._remote: dict[tuple[str, str], Histogram] = defaultdict(Histogram)  # (op, channel)

    def record_put(self, pipeline: str, *, events: int, seconds: float, duplicate: bool) -> None:
        with self._lock:
            self._events[pipeline] += events
            self._batches[pipeline] += 1
            self._duplicates[pipeline] += int(duplicate)
            self._latency[pipeline].observe(seconds)

    def record_remote(self, op: str, channel: str, seconds: float) -> None:
        """A remote take (``op="take"``) or take-transaction commit (``op="commit"``) served by the
        gRPC API (the signature of ``AgentService``'s ``observe``)."""
        with self._lock:
            self._remote[(op, channel)].observe(seconds)

    def record_error(self, pipeline: str, error: str) -> None:
        with self._lock:
            self._errors[(pipeline, error)] += 1

    def events(self, pipeline: str) -> int:
        with self._lock:
            return self._events.get(pipeline, 0)

    def errors(self, pipeline: str) -> int:
        with self._lock:
            return sum(n for (p, _), n in self._errors.items() if p == pipeline)

    def families(self) -> list[Family]:
        """(name, type, help, samples) of everything counted here."""
        with self._lock:
            latency = [s for p, h in sorted(self._latency.items()) for s in h.samples(
                "ingest_pipeline_put_seconds", {"pipeline": p})]
            remote = {op: [s for (o, c), h in sorted(self._remote.items()) if o == op
                           for s in h.samples(f"ingest_remote_{op}_seconds", {"channel": c})]
                      for op in ("take", "commit")}
            return [
                ("ingest_pipeline_events_total", "counter", "Events accepted (after interceptors).",
                 _per("ingest_pipeline_events_total", "pipeline", self._events)),
                ("ingest_pipeline_batches_total", "counter", "put_batch calls that committed.",
                 _per("ingest_pipeline_batches_total", "pipeline", self._batches)),
                ("ingest_pipeline_duplicate_batches_total", "counter", "Batches skipped as already committed.",
                 _per("ingest_pipeline_duplicate_batches_total", "pipeline", self._duplicates)),
                ("ingest_pipeline_errors_total", "counter", "put_batch calls that raised, by error class.",
                 [Sample("ingest_pipeline_errors_total", {"pipeline": p, "error": e}, n)
                  for (p, e), n in sorted(self._errors.items())]),
                ("ingest_pipeline_put_seconds", "histogram",
                 "Duration of one put_batch: interceptors and the durable commit of every target channel.", latency),
                ("ingest_remote_take_seconds", "histogram",
                 "A take request served over gRPC: taking from the channel and filling the chunks.", remote["take"]),
                ("ingest_remote_commit_seconds", "histogram",
                 "The commit of a take transaction over gRPC (durable removal of the taken events).", remote["commit"]),
            ]


def _per(name: str, label: str, values: Mapping[str, int]) -> list[Sample]:
    return [Sample(name, {label: k}, v) for k, v in sorted(values.items())]


def render(families: Iterable[Family]) -> str:
    """The text exposition of ``families`` (HELP and TYPE lines, then the samples)."""
    lines: list[str] = []
    for name, kind, help_text, samples in families:
        lines.append(f"# HELP {name} {_escape_help(help_text)}")
        lines.append(f"# TYPE {name} {kind}")
        for sample in samples:
            lines.append(f"{sample.name}{_labels(sample.labels)} {_number(sample.value)}")
    return "\n".join(lines) + "\n"


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        if math.isnan(value):
            return "NaN"
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    return str(value)
