"""The threading HTTP(S) server of the HTTP source and the admin endpoint.

Both are the standard library's ``ThreadingHTTPServer`` (one thread per connection) with two
changes that matter on a network:

* **TLS per connection.** The listening socket is never wrapped: ``accept`` returns a plain
  socket, wrapped here without a handshake, and the handshake runs in the connection's own
  thread under the connection timeout. Wrapping the listening socket would run every handshake
  inside ``accept``, so one client that connects and sends nothing would stall every other one.
* **Failures of a connection are logged**, not printed to stderr: a failed handshake or a client
  that went away is a warning naming the client, anything else an error with its traceback.

:func:`refusal` is the one wording of a refused bearer token (logged with the client address and
the path, never the token).
"""

from __future__ import annotations

import logging
import socket
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ConnectionHandler", "TlsHttpServer", "refusal"]


class TlsHttpServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` serving TLS when ``context`` is given (handshake in the handler thread).

    ``connection_timeout``: socket timeout of every connection, the TLS handshake included.
    ``what`` names the endpoint in log lines ("source web", "admin endpoint").
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[ConnectionHandler], *,
                 context: ssl.SSLContext | None, connection_timeout: float, log: logging.Logger, what: str) -> None:
        self.context, self.connection_timeout, self.log, self.what = context, connection_timeout, log, what
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.context is not None:
            sock = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, ssl.SSLError | ConnectionError | TimeoutError):  # the client's problem
            self.log.warning("%s: connection from %s failed: %s", self.what, client_address[0], err)
        else:
            self.log.error("%s: connection from %s failed", self.what, client_address[0], exc_info=True)


class ConnectionHandler(BaseHTTPRequestHandler):
    """Sets the connection timeout and completes the TLS handshake before reading a request."""

    server: TlsHttpServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.request.settimeout(self.server.connection_timeout)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # headers and body are two writes
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()  # here, in the connection's thread; failures end the connection
        super().setup()


def refusal(authorization: str | None) -> str:
    """Why a request with this ``Authorization`` header was refused (for the log; no secret in it)."""
    if not authorization:
        return "no bearer token"
    if not authorization.startswith("Bearer "):
        return "an Authorization header that is not 'Bearer <token>'"
    return "a wrong bearer token"
