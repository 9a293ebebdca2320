"""Starting and stopping the gRPC endpoint of an :class:`~.service.AgentService`.

Loopback by default. A non-loopback address without TLS or without a token is allowed (a
private network may be trusted) but logged as a warning (:func:`~ingest_toolkit.security.warn_if_exposed`,
shared with the HTTP source and the admin endpoint), since events and tokens would then cross the
network in clear or unauthenticated.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from ..errors import ConfigError
from ..security import TlsSettings, warn_if_exposed
from .edge import lenient
from .proto import agent_pb2 as pb
from .service import AgentService

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "HTTP2_WINDOW_OPTIONS", "AgentService", "RunningServer", "start_server"]

log = logging.getLogger("ingest_toolkit.rpc")

DEFAULT_MAX_MESSAGE_BYTES = 64 << 20

HTTP2_WINDOW_OPTIONS: tuple[tuple[str, int], ...] = (("grpc.http2.lookahead_bytes", 4 << 20),
                                                     ("grpc.http2.max_frame_size", 1 << 20))
"""Both ends: a 4 MiB initial stream window and frames up to 1 MiB. A 1000-event batch (256 KB
and more) then crosses in a few frames without waiting for window updates; with gRPC's defaults
the agent spent 10-25% more CPU per event on puts and takes in ``bench/peers.py``. The window is
a limit, not a buffer: memory is used only by data in flight."""


@dataclass
class RunningServer:
    """A started server; ``port`` is the bound port (useful with ``port=0``)."""

    server: grpc.Server
    service: AgentService
    host: str
    port: int

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting calls, give running ones ``grace`` seconds, then cancel them.

        Cancelled transaction streams roll their transactions back.
        """
        self.server.stop(grace).wait()
        self.service.stop()


def start_server(service: AgentService, host: str = "127.0.0.1", port: int = 0, *,
                 tls: TlsSettings | None = None, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 max_workers: int | None = None) -> RunningServer:
    """Serve ``service`` on ``host:port`` (``port=0``: an ephemeral port).

    ``max_workers`` defaults to the service's ``max_open_transactions`` plus 16 threads, so that
    open transaction streams (one thread each) never starve puts and status calls.
    """
    workers = max_workers or service.max_open_transactions + 16
    options = [("grpc.max_receive_message_length", max_message_bytes),
               ("grpc.max_send_message_length", max_message_bytes),
               ("grpc.so_reuseport", 0),
               ("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_timeout_ms", 10_000),
               ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
               ("grpc.keepalive_permit_without_calls", 1),
               *HTTP2_WINDOW_OPTIONS]
    server = grpc.server(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rpc"), options=options)
    _add_service(service, server)
    bound = _bind(server, f"[{host}]:{port}" if ":" in host else f"{host}:{port}", tls)
    warn_if_exposed(log, "agent gRPC endpoint", host, tls=tls is not None, token=service.authenticates)
    service.start()
    server.start()
    log.info("agent gRPC endpoint on %s:%d (%s)", host, bound, "TLS" if tls else "plaintext")
    return RunningServer(server, service, host, bound)


def _add_service(service: AgentService, server: grpc.Server) -> None:
    """The generated ``add_AgentServicer_to_server``, with request deserializers that never raise
    (:func:`~.edge.lenient`): bytes that are not a request reach the service as a refusal it
    answers INVALID_ARGUMENT, where gRPC would answer INTERNAL and log a traceback."""
    name = pb.DESCRIPTOR.services_by_name["Agent"].full_name
    handlers = {
        "Put": grpc.unary_unary_rpc_method_handler(
            service.Put, request_deserializer=lenient(pb.PutRequest), response_serializer=pb.PutAck.SerializeToString),
        "PutStream": grpc.stream_stream_rpc_method_handler(
            service.PutStream, request_deserializer=lenient(pb.PutRequest),
            response_serializer=pb.PutAck.SerializeToString),
        "Transaction": grpc.stream_stream_rpc_method_handler(
            service.Transaction, request_deserializer=lenient(pb.TxnRequest),
            response_serializer=pb.TxnResponse.SerializeToString),
        "Status": grpc.unary_unary_rpc_method_handler(
            service.Status, request_deserializer=lenient(pb.StatusRequest),
            response_serializer=pb.StatusReply.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)


def _bind(server: grpc.Server, address: str, tls: TlsSettings | None) -> int:
    try:
        if tls is None:
            port: int = server.add_insecure_port(address)
        else:
            cert, key, client_ca = tls.read()
            credentials = grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                                      require_client_auth=client_ca is not None)
            port = server.add_secure_port(address, credentials)
    except RuntimeError:
        port = 0
    if port == 0:
        raise ConfigError(f"cannot listen on {address} (address in use or not local?): stop what listens there, "
                          "or set agent.grpc.port to a free port (or agent.grpc.host to a local address)",
                          key="agent.grpc.port")
    return port

