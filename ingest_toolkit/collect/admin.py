"""The agent's admin HTTP endpoint: health, Prometheus metrics, status.

* ``GET /healthz``: 200 ``{"status": "ok"}`` when every channel is open and usable and every
  source is running; otherwise 503 ``{"status": "unhealthy", "reasons": [...]}``. Never needs a
  token (load balancers and probes call it).
* ``GET /metrics``: Prometheus text format 0.0.4 (see :mod:`ingest_toolkit.collect.metrics`).
* ``GET /status``: a JSON document (channels' stats, sources' stats, bound ports).

``/metrics`` and ``/status`` require ``Authorization: Bearer <token>`` when the admin
``security.token_env`` is set. The server is the standard library's threading HTTP server
(optionally wrapped in TLS): scrapes are rare and small, so it needs nothing faster.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from ..security import SecuritySettings, bearer_ok, load_token, server_ssl_context

__all__ = ["AdminServer", "AgentView"]

log = logging.getLogger("ingest_toolkit.collect.admin")

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class AgentView(Protocol):
    """What the admin endpoint needs from the agent."""

    def health(self) -> list[str]:
        """Reasons the agent is unhealthy; empty when healthy."""
        ...

    def metrics_text(self) -> str: ...

    def status(self) -> dict[str, Any]: ...


class AdminServer:
    """Serves ``agent`` on ``host:port`` (0: ephemeral) from a daemon thread; ``port`` is the bound one."""

    def __init__(self, agent: AgentView, *, host: str, port: int, security: SecuritySettings) -> None:
        token = load_token(security, key="agent.admin.security.token_env")
        self._server = _Server((host, port), _handler(agent, token))
        if security.tls is not None:
            context = server_ssl_context(security.tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.host, self.port = host, int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="agent-admin", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _handler(agent: AgentView, token: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "ingest-toolkit-agent"
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (the http.server naming)
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                reasons = agent.health()
                body = {"status": "unhealthy", "reasons": reasons} if reasons else {"status": "ok"}
                self._send(HTTPStatus.SERVICE_UNAVAILABLE if reasons else HTTPStatus.OK, _json(body))
            elif path not in ("/metrics", "/status"):
                self._send(HTTPStatus.NOT_FOUND, _json({"error": f"no such path {path}",
                                                        "paths": ["/healthz", "/metrics", "/status"]}))
            elif not bearer_ok(self.headers.get("Authorization"), token):
                self._send(HTTPStatus.UNAUTHORIZED, _json({"error": "missing or wrong bearer token"}),
                           extra={"WWW-Authenticate": "Bearer"})
            elif path == "/metrics":
                self._send(HTTPStatus.OK, agent.metrics_text().encode(), content_type=METRICS_CONTENT_TYPE)
            else:
                self._send(HTTPStatus.OK, _json(agent.status()))

        def _send(self, status: HTTPStatus, body: bytes, *, content_type: str = "application/json",
                  extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            log.debug("admin %s %s", self.address_string(), format % args)

    return Handler


def _json(document: Any) -> bytes:
    return json.dumps(document, default=str, sort_keys=True).encode() + b"\n"
