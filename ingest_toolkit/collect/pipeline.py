"""The put path of a source: interceptors -> selector -> one put transaction per channel.

``Pipeline.put_batch`` returns only after every required channel committed the batch (or
already held it). Exactly-once for retried batches comes from the channel's commit tags: a
``batch_id`` is written as the tag of each channel's COMMIT frame, so it is durable exactly when
the events are. Before putting to a channel the pipeline asks ``find_tag(batch_id)``; a channel
that already holds the tag is skipped. The check and the put run under one process-wide lock
per batch id, so two concurrent retries of the same batch cannot both commit.

With several channels a crash (or a failure) between two channel commits leaves the batch in
some channels only; the client's retry with the same batch id completes the missing channels
and skips the others, so no channel stores it twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..channel import Event, EventColumns, FileChannel
from ..channel.tags import MAX_TAG_BYTES, InvalidTagError, check_tag
from ..errors import ConfigError, IngestError
from ..handoff import PutResult, hold_batch_id
from .errors import BatchIdError
from .interceptors import Interceptor
from .selectors import ReplicatingSelector, Route, Selector

__all__ = ["BatchIdError", "Pipeline", "PutResult", "check_batch_id", "hold_batch_id"]

log = logging.getLogger("ingest_toolkit.collect.pipeline")


class Pipeline:
    """Interceptors, then the selector, then one put transaction per target channel."""

    def __init__(self, channels: Mapping[str, FileChannel], *, selector: Selector,
                 interceptors: Sequence[Interceptor] = (), name: str = "pipeline") -> None:
        self.channels = dict(channels)
        self.selector = selector
        self.interceptors = list(interceptors)
        self.name = name
        self._lock = threading.Lock()
        self._counts = {"batches": 0, "events": 0, "duplicates": 0, "optional_failures": 0,
                        "required_failures": 0, "filtered": 0}

    def put_batch(self, events: Sequence[Event] | EventColumns, *, batch_id: str | None = None,
                  channel: str | None = None) -> PutResult:
        """Store ``events`` durably; ``channel`` bypasses the selector (that channel, required).

        ``events`` may be :class:`EventColumns` (the gRPC put): when no interceptor and no
        multiplexing selector has to look at each event, the columns go to the channels as they
        are, with no :class:`Event` per event. Raises the first required channel's error
        (ChannelFullError and DiskSpaceError are transient: retry the same batch with the same
        batch id).
        """
        if batch_id is not None:
            check_batch_id(batch_id)
        if isinstance(events, EventColumns):
            routes = self._column_routes(events, channel)
            if routes is not None:
                return self._commit_batch(routes, batch_id, len(events))
            events = events.events()
        batch = list(events)
        for interceptor in self.interceptors:
            batch = interceptor(batch)
        self._count(filtered=len(events) - len(batch))
        return self._commit_batch(self._routes(batch, channel), batch_id, len(batch))

    def _commit_batch(self, routes: list[Route], batch_id: str | None, accepted: int) -> PutResult:
        if batch_id is None:
            return self._commit(routes, None, accepted)
        with hold_batch_id(batch_id):
            return self._commit(routes, batch_id, accepted)

    def _column_routes(self, columns: EventColumns, channel: str | None) -> list[Route] | None:
        """Routes that carry ``columns`` as they are, or None when events must be looked at."""
        if self.interceptors:
            return None
        if channel is not None:
            self._check_channel(channel)
            return [Route(channel, [], True, columns)] if len(columns) else []
        if isinstance(self.selector, ReplicatingSelector):
            return self.selector.route_columns(columns)
        return None

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._counts)

    def _routes(self, batch: list[Event], channel: str | None) -> list[Route]:
        if channel is not None:
            self._check_channel(channel)
            return [Route(channel, batch, True)] if batch else []
        routes = [r for r in self.selector.route(batch) if r.events]
        return sorted(routes, key=lambda r: not r.required)  # required channels commit first

    def _check_channel(self, channel: str) -> None:
        if channel not in self.channels:
            raise ConfigError(f"pipeline {self.name} has no channel {channel!r} "
                              f"(has: {', '.join(sorted(self.channels))})", key="channel")

    def _commit(self, routes: list[Route], tag: str | None, accepted: int) -> PutResult:
        committed: list[str] = []
        held = 0  # routes skipped because the channel already holds the tag
        for route in routes:
            if tag is not None and self.channels[route.channel].find_tag(tag) is not None:
                held += route.required
                continue
            if self._put(route, tag):
                committed.append(route.channel)
        required = sum(r.required for r in routes)
        duplicate = tag is not None and required > 0 and held == required
        self._count(batches=1, events=0 if duplicate else accepted, duplicates=int(duplicate))
        return PutResult(accepted=accepted, duplicate=duplicate, channels=tuple(committed))

    def _put(self, route: Route, tag: str | None) -> bool:
        """Commit one route; False when an optional channel failed (logged), raises for required."""
        channel = self.channels[route.channel]
        try:
            with channel.transaction(tag=tag) as tx:
                if route.columns is not None:
                    tx.put_columns(route.columns)
                else:
                    tx.put_many(route.events)
        except IngestError as err:
            if route.required:
                self._count(required_failures=1)
                raise
            self._count(optional_failures=1)
            log.warning("pipeline %s: optional channel %s failed, batch %s not stored there: %s",
                        self.name, route.channel, tag or "(no batch id)", err)
            return False
        return True

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for key, delta in deltas.items():
                self._counts[key] += delta


def check_batch_id(batch_id: str) -> None:
    """A batch id becomes the channels' commit tag: the channel's rule (1 to 128 bytes of UTF-8,
    :func:`~ingest_toolkit.channel.tags.check_tag`), checked before anything is stored."""
    try:
        check_tag(batch_id)
    except InvalidTagError as err:
        raise BatchIdError(f"batch id must be 1 to {MAX_TAG_BYTES} bytes of UTF-8 text: {err}") from None
