"""Forwarding: a take transaction on the local channel, an idempotent put on the downstream agent.

One :class:`~.group.SinkGroup` thread per group: it takes a batch from the group's channel (up
to ``batch_size`` events, or fewer once the oldest has waited ``linger`` seconds), hands it to the
sink its processor picks (:mod:`.processors`), puts it downstream with a batch id, and commits the
local take only after the downstream ack. A failure sets the sink aside for a growing, jittered
penalty; the batch keeps its take and is put again, the same events under the same id, where its
record allows (below). Up to ``pipeline`` puts are in flight at once, each batch with its own take
and in-flight record; takes are committed in any order after their acks and rolled back (at a
stop) newest first (:mod:`.group` says why the rules below hold for each of them).

**The batch id** is ``fwd:<channel id>:<first seq>+<count>``: the local channel's identity, the
sequence number of the batch's first event and the number of events taken. Why it is the same on
every redelivery of a batch, and never the id of a different batch:

* Sequence numbers are unique within a channel (never reused, across restarts), so no two
  batches of one channel start with the same event unless one is a redelivery of the other.
* A redelivery must hold the same events, not just start with the same one. While the edge runs,
  a failed batch keeps its take and its events, so its next put sends exactly them. A take rolled
  back (at a stop) or lost with the process is retaken, and by then more events may be queued: a
  take of ``batch_size`` would return a longer batch under the same first seq. So before the first
  put of a batch the group writes (atomically, fsync'ed) an *in-flight record* ``{batch_id,
  first_seq, last_seq, count, in_doubt, maybe_stored, take}`` to its state directory
  (:mod:`.inflight`), and retakes exactly ``count`` events for it. A rolled-back take returns its
  events to the head in order, so the retake is the same events: same first seq, same count, same
  id.
* A crash of the edge (at any point) leaves the record: the channel's recovery puts the taken
  events back at the head, and the restarted group retakes exactly ``count`` of them. If the
  head no longer starts with ``first_seq`` (or has a different ``last_seq``), the recorded batch
  was committed locally before the crash (only the commit removes events) and hence acknowledged
  downstream: the record is dropped and the next batch gets a fresh id.
* A crash of the downstream agent before its commit leaves nothing there; after its commit the
  batch id is durable with the events (the channel's commit tag), so the redelivery is dropped as
  a duplicate and acknowledged, and the edge commits.
* With ``parallel_puts`` > 1 a batch is put in that many parts at once, part ``i`` with the id
  ``<batch id>/<i>``. The split depends only on the events (:func:`split_parts`), so a redelivery
  splits the same way and every part keeps its id; the local take is committed after every part
  was acknowledged, and a batch of which some part was stored stays pinned to its sink.

Across several downstream agents the downstream dedup only helps if the redelivery goes to the
same agent. A put that failed *in doubt* (the request may have been committed: the connection was
lost mid-call, a timeout, an error of a downstream pipeline with several channels) is therefore
pinned to the sink it was sent to, and retried there until it gets an answer, however long that
sink is down, or until ``release_in_doubt_after`` seconds passed (0, the default: never); it waits
aside with its take while the group forwards newer batches through the other sinks. A put that
failed for certain (no connection could be made, a refusal by the downstream's single-channel
put) may move to another sink of the group, unless an earlier put of
the same batch to that sink may be stored there (``maybe_stored``: it failed in doubt, or was in
flight when the edge stopped): a retry that cannot even connect says nothing about the earlier
put, so only that sink's own answer (an ack, a duplicate, or its refusal, which it gives after
finding no copy of the batch id) unpins the batch. The pin is part of the in-flight record, so it
survives a crash of the edge too.

**Headers** pass through unchanged but for the hop header (``hop_header``, default
``ingest.hops``): every forward adds one. An event that arrives with ``max_hops`` or more has gone
round a loop (or through too many tiers): it is dropped, counted (``dropped_looping``) and logged,
and the rest of its batch is forwarded.

The group must be its channel's only consumer (no landing takes from it): another consumer could
take events of a recorded batch, and the retake would not be the same events.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from ...channel import EventColumns
from ...errors import ConfigError, IngestError
from ...rpc.client import AgentClient, PutAck
from ...rpc.errors import AgentUnavailableError, RequestTooLargeError
from ..metrics import Histogram
from .settings import ForwardSinkSettings

__all__ = ["Downstream", "Outcome", "add_hop", "forward_batch_id", "split_parts"]

log = logging.getLogger("ingest_toolkit.collect.sinks")

MIN_PART = 500  # events: a batch is put in parts only when every part holds at least this many
# gRPC's own reconnect backoff grows to 2 minutes: a downstream agent that is back would wait that
# long for its first batch. The group's penalties space the attempts; gRPC only has to reconnect.
RECONNECT_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                     ("grpc.max_reconnect_backoff_ms", 250))


def forward_batch_id(channel_id: bytes, first_seq: int, count: int) -> str:
    """The downstream batch id of the ``count`` events taken from ``channel_id`` starting at ``first_seq``."""
    return f"fwd:{channel_id.hex()}:{first_seq}+{count}"


def add_hop(columns: EventColumns, header: str, max_hops: int) -> tuple[EventColumns, int]:
    """The events with ``header`` raised by one, without those that already carry ``max_hops`` or
    more; returns them and the number dropped. Other headers and the order are kept."""
    n = len(columns.bodies)
    if not columns.header_keys:  # the first hop: no event has headers yet
        return EventColumns(columns.bodies, columns.seqs, [1] * n, [header] * n, ["1"] * n), 0
    if columns.header_counts == [1] * n and columns.header_keys == [header] * n:  # only the hop counter
        values = columns.header_values
        if all(v.isdigit() and int(v) < max_hops for v in set(values)):
            raised = {v: str(int(v) + 1) for v in set(values)}
            return EventColumns(columns.bodies, columns.seqs, [1] * n, [header] * n, [raised[v] for v in values]), 0
    return _add_hop_each(columns, header, max_hops)


def _add_hop_each(columns: EventColumns, header: str, max_hops: int) -> tuple[EventColumns, int]:
    out = EventColumns()
    dropped, at = 0, 0
    keys, values = columns.header_keys, columns.header_values
    counts = columns.header_counts or [0] * len(columns.bodies)
    for body, seq, n in zip(columns.bodies, columns.seqs, counts, strict=True):
        hops, own_keys, own_values = 0, [], []
        for key, value in zip(keys[at:at + n], values[at:at + n], strict=True):
            if key == header:
                hops = int(value) if value.isdigit() else max_hops  # an unreadable counter is not trusted
            else:
                own_keys.append(key)
                own_values.append(value)
        at += n
        if hops >= max_hops:
            dropped += 1
            continue
        own_keys.append(header)
        own_values.append(str(hops + 1))
        out.bodies.append(body)
        out.seqs.append(seq)
        out.header_counts.append(len(own_keys))
        out.header_keys += own_keys
        out.header_values += own_values
    return out, dropped


def split_parts(columns: EventColumns, parts: int) -> list[EventColumns]:
    """``columns`` in ``parts`` consecutive pieces of equal size (the last may be shorter); one
    piece when the batch is small. Deterministic: a redelivered batch splits the same way."""
    n = len(columns.bodies)
    if parts <= 1 or n < 2 * MIN_PART:
        return [columns]
    size = -(-n // parts)
    if not columns.header_keys:
        return [EventColumns(columns.bodies[i:i + size], columns.seqs[i:i + size]) for i in range(0, n, size)]
    out, at = [], 0
    for i in range(0, n, size):
        counts = columns.header_counts[i:i + size]
        end = at + sum(counts)
        out.append(EventColumns(columns.bodies[i:i + size], columns.seqs[i:i + size], counts,
                                columns.header_keys[at:end], columns.header_values[at:end]))
        at = end
    return out


@dataclass(frozen=True)
class Outcome:
    """How a put of a batch ended: ``duplicate`` (the downstream held all of it already), or
    ``error`` (of the first part that failed) and ``in_doubt`` (it may be stored downstream: it
    then stays pinned to that sink)."""

    duplicate: bool = False
    error: IngestError | None = None
    in_doubt: bool = False
    answered: bool = False  # the downstream agent itself refused: it holds no part of the batch


class Downstream:
    """One forward sink: the client of its downstream agent, its counters and its penalty."""

    def __init__(self, name: str, settings: ForwardSinkSettings) -> None:
        self.name, self.settings = name, settings
        token = None
        if settings.token_env is not None:
            token = os.environ.get(settings.token_env, "")
            if not token:
                raise ConfigError(f"environment variable {settings.token_env} (the downstream's bearer token) is "
                                  "unset or empty", key=f"sinks.{name}.token_env")
        names = {"ca": f"sinks.{name}.tls_ca", "cert": f"sinks.{name}.tls_cert", "key": f"sinks.{name}.tls_key"}
        self.client = AgentClient(settings.address, token=token, tls_ca=settings.tls_ca, tls_cert=settings.tls_cert,
                                  tls_key=settings.tls_key, tls_server_name=settings.tls_server_name,
                                  max_message_bytes=settings.max_message_bytes, timeout=settings.timeout,
                                  tls_names=names, channel_options=RECONNECT_OPTIONS)
        self.failures = 0  # consecutive; 0 after a success
        self.available_at = 0.0  # time.monotonic() when the penalty ends
        self.unreachable_since: float | None = None  # time.monotonic() of the first put it did not answer
        self._lock = threading.Lock()
        self._counts = {"batches": 0, "events": 0, "duplicate_batches": 0, "failures": 0, "in_doubt_failures": 0}
        self._ack = Histogram()
        self.last_error = ""
        self._pool: ThreadPoolExecutor | None = None

    def put(self, columns: EventColumns, batch_id: str) -> PutAck:
        return self.client.put_columns(columns, channel=self.settings.downstream_channel, batch_id=batch_id)

    def put_batch(self, columns: EventColumns, batch_id: str) -> Outcome:
        """Put the batch (in ``parallel_puts`` parts, concurrently); a failure is returned, with
        whether the batch may be stored downstream (``in_doubt``)."""
        parts = split_parts(columns, self.settings.parallel_puts)
        if len(parts) == 1:
            try:
                return Outcome(duplicate=self.put(columns, batch_id).duplicate)
            except IngestError as err:
                return Outcome(error=err, in_doubt=not self.definitive(err), answered=self.answered(err))
        with self._lock:
            if self._pool is None:  # parts of the batches in flight at once
                self._pool = ThreadPoolExecutor(self.settings.parallel_puts * self.settings.pipeline,
                                                thread_name_prefix=f"sink-{self.name}")
            pool = self._pool
        futures = [pool.submit(self.put, part, f"{batch_id}/{i}") for i, part in enumerate(parts)]
        wait(futures)  # every part ends before the batch is retried or rolled back
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            first = errors[0]
            assert first is not None
            if not isinstance(first, IngestError):
                raise first
            stored_some = len(errors) < len(futures)  # a part was stored: the batch must stay with this sink
            in_doubt = stored_some or not all(isinstance(e, IngestError) and self.definitive(e) for e in errors)
            answered = not stored_some and all(isinstance(e, IngestError) and self.answered(e) for e in errors)
            return Outcome(error=first, in_doubt=in_doubt, answered=answered)
        return Outcome(duplicate=all(f.result().duplicate for f in futures))

    def definitive(self, err: IngestError) -> bool:
        """True when the failed put certainly stored nothing downstream (the batch may go elsewhere)."""
        if isinstance(err, RequestTooLargeError):
            return True
        if isinstance(err, AgentUnavailableError):  # gRPC's own: only "could not connect" is certain
            text = str(err).lower()
            return "failed to connect" in text or "connection refused" in text
        # an error the downstream agent reported: its put raised, so nothing was committed, unless
        # its pipeline commits to several channels (one may have committed before another failed)
        return type(err).__name__ != "RemoteError" and self.settings.downstream_channel is not None

    def answered(self, err: IngestError) -> bool:
        """True when the downstream agent itself refused the put: it checked the batch id first,
        so it holds no earlier copy either. A put that never reached it (no connection, too large
        to send) says nothing about an earlier attempt that may have."""
        return self.definitive(err) and not isinstance(err, (AgentUnavailableError, RequestTooLargeError))

    def acked(self, events: int, seconds: float, duplicate: bool) -> None:
        with self._lock:
            self._counts["batches"] += 1
            self._counts["events"] += events  # acknowledged: stored now, or by the put whose ack was lost
            self._counts["duplicate_batches"] += int(duplicate)
            self._ack.observe(seconds)
        self.failures = 0
        self.unreachable_since = None

    def failed(self, err: IngestError, in_doubt: bool, answered: bool = False) -> None:
        """Count a failed put; ``answered``: the downstream agent itself refused it (it is reachable)."""
        with self._lock:
            self._counts["failures"] += 1
            self._counts["in_doubt_failures"] += int(in_doubt)
        self.failures += 1
        self.last_error = f"{type(err).__name__}: {err}"
        if answered:
            self.unreachable_since = None
        elif self.unreachable_since is None:
            self.unreachable_since = time.monotonic()

    def unreachable_seconds(self) -> float:
        """How long the puts to this sink have gone unanswered (0: its last put was answered)."""
        since = self.unreachable_since
        return 0.0 if since is None else time.monotonic() - since

    def ack_histogram(self) -> Histogram:
        with self._lock:
            return Histogram(self._ack.buckets, list(self._ack.counts), self._ack.total, self._ack.count)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._counts)
            ack = (self._ack.total / self._ack.count) if self._ack.count else 0.0
        wait = max(0.0, self.available_at - time.monotonic())
        return {**counts, "address": self.settings.address, "ack_seconds_mean": round(ack, 6),
                "consecutive_failures": self.failures, "penalty_seconds_left": round(wait, 3),
                "unreachable_seconds": round(self.unreachable_seconds(), 1), "last_error": self.last_error}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


