"""The edge of the gRPC API: every request is parsed and checked here, before the service acts.

**Parsing.** The server's deserializers are :func:`lenient` parsers: bytes that are not a valid
message of the method's type become an :class:`InvalidRequestError` the service answers with
INVALID_ARGUMENT (and one WARNING line), instead of gRPC's own INTERNAL "Exception deserializing
request!" logged with a traceback. :func:`parse` is the same parser, raising.

**Checks.** A refused request is an :class:`InvalidRequestError` (INVALID_ARGUMENT) whose
one-line message starts with the field's name. Every numeric field of every request:

* ``Begin.lease_seconds``, ``Extend.lease_seconds`` (double): finite and >= 0 (0: the default,
  resp. the current length); a finite lease above the agent's ``max_lease_seconds`` is capped.
* ``Begin.take``, ``Take.max_events`` (uint32): at most the channel's ``transaction_capacity``
  (less what the transaction holds), else the channel's ``TransactionCapacityError``
  (INVALID_ARGUMENT, with ``capacity``: ``RemoteSource`` asks again within it).
* ``EventBatch.seqs`` (uint64): none, or one per body; ignored in puts (the channel numbers events).
* ``EventBatch.header_counts`` (uint32): none, or one per body adding up to the number of
  ``header_keys``; one ``header_values`` entry per key.
* ``PutRequest.batch_id``: empty (none), or a valid commit tag, at most 128 bytes of UTF-8
  (:func:`~ingest_toolkit.channel.tags.check_tag`).

Sizes: a request is at most the server's ``max_message_bytes`` (gRPC refuses larger ones with
RESOURCE_EXHAUSTED before they reach the service); each event at most the channel's
``max_event_size`` (``EventTooLargeError``); a batch at most its ``transaction_capacity``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from ..channel import EventColumns
from ..channel.tags import InvalidTagError, check_tag
from .errors import InvalidRequestError
from .proto import agent_pb2 as pb
from .wire import decode_columns

__all__ = ["PutArgs", "TxnOp", "check_batch_id", "check_lease", "check_put", "check_status",
           "check_txn_request", "lenient", "parse"]

M = TypeVar("M", bound=Message)


def parse(message_type: type[M], data: bytes) -> M:
    """``data`` as a ``message_type``; bytes that are not one raise InvalidRequestError."""
    try:
        return message_type.FromString(data)
    except DecodeError as err:
        raise InvalidRequestError(
            f"the request is not a valid {message_type.DESCRIPTOR.name} message ({err}); "
            "send requests made from agent.proto") from None


def lenient(message_type: type[M]) -> Callable[[bytes], M | InvalidRequestError]:
    """A gRPC request deserializer that never raises: the refusal is handed to the service."""

    def deserialize(data: bytes) -> M | InvalidRequestError:
        try:
            return parse(message_type, data)
        except InvalidRequestError as err:
            return err

    return deserialize


def check_lease(value: float, field: str) -> float:
    """``value`` if it is a lease a client may ask for (finite, >= 0; 0 means the default)."""
    if not (math.isfinite(value) and value >= 0):
        raise InvalidRequestError(f"{field} must be a finite number of seconds >= 0, got {value!r} "
                                  "(0: the agent's default)")
    return value


def check_batch_id(raw: str) -> str | None:
    """``raw`` as a batch id (None when empty), if the channel can take it as a commit tag."""
    if not raw:
        return None
    try:
        return check_tag(raw)
    except InvalidTagError as err:
        raise InvalidRequestError(f"batch_id: {err}") from None


@dataclass(frozen=True, slots=True)
class PutArgs:
    """A checked put: channel (None: the default pipeline), batch id (None: none), events."""

    channel: str | None
    batch_id: str | None
    columns: EventColumns


def check_put(request: pb.PutRequest | InvalidRequestError) -> PutArgs:
    if isinstance(request, InvalidRequestError):
        raise request
    return PutArgs(request.channel or None, check_batch_id(request.batch_id),
                   decode_columns(request.events, field="events"))


@dataclass(frozen=True, slots=True)
class TxnOp:
    """A checked request of a transaction stream: its ``op``, and for a put the events."""

    op: str | None
    request: pb.TxnRequest
    columns: EventColumns | None = None


def check_txn_request(request: pb.TxnRequest | InvalidRequestError) -> TxnOp:
    if isinstance(request, InvalidRequestError):
        raise request
    op = request.WhichOneof("op")
    if op == "begin":
        check_lease(request.begin.lease_seconds, "begin.lease_seconds")
    elif op == "extend":
        check_lease(request.extend.lease_seconds, "extend.lease_seconds")
    elif op == "put":
        return TxnOp(op, request, decode_columns(request.put, field="put"))
    return TxnOp(op, request)


def check_status(request: pb.StatusRequest | InvalidRequestError) -> str:
    if isinstance(request, InvalidRequestError):
        raise request
    return request.channel
