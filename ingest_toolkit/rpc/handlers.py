"""What the service calls to store a put batch, and a ready-made handler for named channels.

The agent passes its collect pipeline's ``put_batch`` (wrapped as a :data:`PutHandler`); the
service only decodes, calls the handler and acknowledges what the handler returned, after the
handler returned, i.e. after the commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..channel import EventColumns, FileChannel
from ..handoff import PutResult, hold_batch_id
from .errors import InvalidRequestError, UnknownChannelError

__all__ = ["PutHandler", "PutResult", "channel_put_handler"]


PutHandler = Callable[[str | None, EventColumns, str | None], PutResult]
"""``(channel name or None for the default pipeline, events as columns, batch id or None) -> outcome``.

Must return only once the events are committed (durable), and raise the toolkit's errors
(ChannelFullError, EventTooLargeError, ...) otherwise. With a batch id it must not store a batch
whose id was already committed: it reports ``duplicate=True`` instead, with ``accepted`` the
batch's event count (they are stored, by the earlier call) and no ``channels`` (this call
committed to none), as the agent's collect pipeline (``Pipeline.put_batch``) does. The rules both
share are in :mod:`ingest_toolkit.handoff`: this layer never imports the collect stage above it."""


def channel_put_handler(channels: Mapping[str, FileChannel], *, default: str | None = None) -> PutHandler:
    """A handler that puts each batch into the named channel in one transaction.

    ``default`` names the channel for requests without one. Batch ids are deduplicated with the
    channel's commit tags: the process-wide lock of the batch id (the one pipelines use too)
    makes the check and the commit atomic, so two concurrent retries of one batch cannot both
    commit.
    """

    def handle(name: str | None, events: EventColumns, batch_id: str | None) -> PutResult:
        target = name or default
        if target is None:
            raise InvalidRequestError("this agent has no default pipeline: name the channel in the put request")
        channel = channels.get(target)
        if channel is None:
            raise UnknownChannelError(channel=target, known=list(channels))
        if batch_id is None:
            with channel.transaction() as tx:
                tx.put_columns(events)
            return PutResult(len(events), False, (target,))
        with hold_batch_id(batch_id):
            if channel.find_tag(batch_id) is not None:
                return PutResult(len(events), True, ())  # what the agent's pipeline answers
            with channel.transaction(tag=batch_id) as tx:
                tx.put_columns(events)
            return PutResult(len(events), False, (target,))

    return handle

