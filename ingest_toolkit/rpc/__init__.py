"""The agent's gRPC API: durable batched puts, leased remote transactions, status.

Server side: :class:`AgentService` (given the channels and a put handler) and
:func:`start_server`. Client side: :class:`AgentClient` (``put``, ``open_take``,
``take_pipeline``, ``status``, ``channel``) and :class:`RemoteSource` for the landing. See docs/rpc.md.
"""

from __future__ import annotations

from ._fork import FORK_HANDLERS_OFF  # before anything imports grpc (see _fork)
from .client import AgentClient, PipelinedTake, PutAck, RemoteSource, RemoteTake, TakePipeline
from .errors import (
    AgentUnavailableError,
    AuthenticationError,
    ForwardedChannelError,
    InvalidRequestError,
    LeaseExpiredError,
    RemoteError,
    RequestTooLargeError,
    RpcError,
    UnknownChannelError,
)
from .handlers import PutHandler, PutResult, channel_put_handler
from .server import RunningServer, start_server
from .service import AgentService

__all__ = [
    "AgentClient",
    "AgentService",
    "AgentUnavailableError",
    "AuthenticationError",
    "ForwardedChannelError",
    "FORK_HANDLERS_OFF",
    "InvalidRequestError",
    "LeaseExpiredError",
    "PipelinedTake",
    "PutAck",
    "PutHandler",
    "PutResult",
    "RemoteError",
    "RemoteSource",
    "RemoteTake",
    "RequestTooLargeError",
    "RpcError",
    "RunningServer",
    "TakePipeline",
    "UnknownChannelError",
    "channel_put_handler",
    "start_server",
]
