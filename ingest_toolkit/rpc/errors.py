"""Errors of the gRPC layer, and the mapping between toolkit exceptions and gRPC status codes.

Hierarchy (all under :class:`~ingest_toolkit.errors.IngestError`)::

    RpcError
    ├── AgentUnavailableError (also TransientError)   agent unreachable, timed out, shutting down
    ├── AuthenticationError                          missing or wrong bearer token (UNAUTHENTICATED)
    ├── UnknownChannelError                          the agent hosts no such channel (NOT_FOUND)
    ├── RequestTooLargeError                         a request exceeds the max message size
    ├── InvalidRequestError                          a malformed request (INVALID_ARGUMENT)
    ├── LeaseExpiredError (also TransactionError)    the remote transaction's lease ran out
    └── RemoteError                                  anything else the agent reported (carries code)

The server turns an exception into a status code plus the exception's class name and its scalar
attributes (:func:`describe`); the client rebuilds an exception of the *same class* with the
same message and attributes (:func:`rebuild`), so callers handle ``ChannelFullError`` alike
whether the channel is in-process or behind an agent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import grpc

from .. import errors as core
from ..channel import InvalidTagError
from ..errors import IngestError, TransactionError, TransientError

__all__ = [
    "AgentUnavailableError",
    "AuthenticationError",
    "ErrorInfo",
    "ForwardedChannelError",
    "InvalidRequestError",
    "LeaseExpiredError",
    "RemoteError",
    "RequestTooLargeError",
    "RpcError",
    "UnknownChannelError",
    "describe",
    "from_rpc_error",
    "rebuild",
]


class RpcError(IngestError):
    """A failure that only exists because the channel is behind the agent's gRPC API."""


class AgentUnavailableError(RpcError, TransientError):
    def __init__(self, message: str) -> None:
        super().__init__(message)


class AuthenticationError(RpcError):
    def __init__(self, message: str) -> None:
        super().__init__(message)


class UnknownChannelError(RpcError):
    def __init__(self, *, channel: str, known: list[str]) -> None:
        names = ", ".join(sorted(known)) or "(none)"
        super().__init__(f"unknown channel {channel!r}; this agent hosts: {names}")
        self.channel, self.known = channel, known


class RequestTooLargeError(RpcError):
    def __init__(self, *, size: int, limit: int) -> None:
        super().__init__(
            f"request of {size} bytes exceeds the max message size of {limit} bytes; send smaller "
            "batches (fewer or smaller events), or raise max_message_bytes on both agent and client")
        self.size, self.limit = size, limit


class InvalidRequestError(RpcError):
    def __init__(self, message: str) -> None:
        super().__init__(message)


class ForwardedChannelError(RpcError):
    """A take through the API from a channel that a sink group of the agent empties."""

    def __init__(self, message: str) -> None:
        super().__init__(message)

    @classmethod
    def of(cls, *, channel: str, group: str) -> ForwardedChannelError:
        return cls(f"channel {channel} is emptied by sink group {group} of this agent, which forwards it: a take "
                   "through the agent's API would take events of the batches the group has in flight and break its "
                   "exactly-once; take from the agent it forwards to, or remove the sink group")


class LeaseExpiredError(RpcError, TransactionError):
    def __init__(self, *, lease_seconds: float, events: int) -> None:
        super().__init__(
            f"the remote transaction's lease of {lease_seconds:g}s expired and the agent rolled it back "
            f"({events} taken events are back at the head of the queue); nothing was committed. "
            "Take again, and extend the lease (keep-alive) or ask for a longer one if the work takes longer")
        self.lease_seconds, self.events = lease_seconds, events


class RemoteError(RpcError):
    def __init__(self, message: str, *, code: str = "UNKNOWN") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


_S = grpc.StatusCode
# Most specific class first: describe() walks this list with isinstance.
_CODES: Final[list[tuple[type[BaseException], grpc.StatusCode]]] = [
    (UnknownChannelError, _S.NOT_FOUND),
    (AuthenticationError, _S.UNAUTHENTICATED),
    (LeaseExpiredError, _S.FAILED_PRECONDITION),
    (ForwardedChannelError, _S.FAILED_PRECONDITION),
    (RequestTooLargeError, _S.RESOURCE_EXHAUSTED),
    (InvalidRequestError, _S.INVALID_ARGUMENT),
    (AgentUnavailableError, _S.UNAVAILABLE),
    (core.ChannelFullError, _S.RESOURCE_EXHAUSTED),
    (core.DiskSpaceError, _S.RESOURCE_EXHAUSTED),
    (core.EventTooLargeError, _S.INVALID_ARGUMENT),
    (core.TransactionCapacityError, _S.INVALID_ARGUMENT),
    (core.ConfigError, _S.INVALID_ARGUMENT),
    (ValueError, _S.INVALID_ARGUMENT),  # e.g. the pipeline's BatchIdError, the channel's InvalidTagError
    (core.TransactionError, _S.FAILED_PRECONDITION),
    (core.ChannelClosedError, _S.UNAVAILABLE),
    (core.ChannelFailedError, _S.INTERNAL),
    (core.TransientError, _S.UNAVAILABLE),
    (core.IngestError, _S.INTERNAL),
]

# Classes a client may rebuild by name (never arbitrary names from the wire).
_KINDS: Final[dict[str, type[IngestError]]] = {
    cls.__name__: cls for cls in (
        *(getattr(core, name) for name in core.__all__),
        AgentUnavailableError, AuthenticationError, UnknownChannelError, RequestTooLargeError,
        InvalidRequestError, LeaseExpiredError, RemoteError, InvalidTagError, ForwardedChannelError)
}


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What crosses the wire for one error."""

    code: grpc.StatusCode
    kind: str
    message: str
    attrs_json: str

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Trailing metadata that carries kind and attributes next to a status code."""
        return (("ingest-error-kind", self.kind), ("ingest-error-attrs", self.attrs_json))


def describe(err: BaseException) -> ErrorInfo:
    """The status code, class name, message and scalar attributes of ``err``."""
    code = next((code for cls, code in _CODES if isinstance(err, cls)), _S.INTERNAL)
    if not isinstance(err, IngestError):
        kind, message = ("InvalidRequestError", str(err)) if code is _S.INVALID_ARGUMENT else (
            "RemoteError", f"agent error {type(err).__name__}: {err}")
        return ErrorInfo(code, kind, message, "{}")
    attrs = {k: v for k, v in vars(err).items() if isinstance(v, (int, float, str, bool, list)) or v is None}
    return ErrorInfo(code, type(err).__name__, str(err), json.dumps(attrs, default=str))


def rebuild(code: str, kind: str, message: str, attrs_json: str) -> IngestError:
    """The client-side exception for an error the agent described (same class where known)."""
    cls = _KINDS.get(kind)
    if cls is None or cls is RemoteError:
        return RemoteError(message, code=code)
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    try:
        attrs: Any = json.loads(attrs_json or "{}")
    except ValueError:
        attrs = {}
    if isinstance(attrs, dict):
        for name, value in attrs.items():
            setattr(err, name, value)
    return err


def from_rpc_error(err: grpc.RpcError, *, what: str) -> IngestError:
    """Map a failed call (``what``: e.g. ``"put"``) to the toolkit exception it stands for."""
    code: grpc.StatusCode = err.code()
    details: str = err.details() or ""
    meta = dict(err.trailing_metadata() or ())
    kind = meta.get("ingest-error-kind")
    if isinstance(kind, str):
        return rebuild(code.name, kind, details, str(meta.get("ingest-error-attrs", "{}")))
    return _transport_error(code, details, what)


def _transport_error(code: grpc.StatusCode, details: str, what: str) -> IngestError:
    """Errors raised by gRPC itself (no toolkit kind attached)."""
    if code is _S.RESOURCE_EXHAUSTED and "larger than max" in details:
        size, limit = _sizes(details)
        return RequestTooLargeError(size=size, limit=limit)
    if code in (_S.UNAVAILABLE, _S.DEADLINE_EXCEEDED, _S.CANCELLED):
        return AgentUnavailableError(f"{what} failed: agent unavailable ({code.name}: {details}); retry later")
    if code is _S.UNAUTHENTICATED:
        return AuthenticationError(f"{what} refused: {details}")
    return RemoteError(f"{what} failed: {details}", code=code.name)


def _sizes(details: str) -> tuple[int, int]:
    """``(size, limit)`` from gRPC's "Received message larger than max (5 vs. 4)"."""
    try:
        inside = details[details.rindex("(") + 1:details.rindex(")")]
        size, limit = (int(part.strip()) for part in inside.split("vs."))
        return size, limit
    except ValueError:
        return -1, -1
