"""The agent's admin HTTP endpoint: health, Prometheus metrics, status.

* ``GET /healthz``: 200 ``{"status": "ok"}`` when every channel is open, usable and can take
  puts, and every source is running; otherwise 503 ``{"status": "unhealthy" | "degraded",
  "reasons": [...]}`` (``degraded``: everything runs, but a channel refuses puts for lack of disk
  space). Never needs a token (load balancers and probes call it).
* ``GET /metrics``: Prometheus text format 0.0.4 (see :mod:`ingest_toolkit.collect.metrics`).
* ``GET /status``: a JSON document (channels' stats, sources' stats, bound ports).
* ``POST /channels/<name>/incidents/acknowledge`` with ``{"ids": [1, 2] | null, "note": "..."}``:
  marks the channel's open incidents acknowledged (all of them for ``null``); 200 with the ones
  marked, 404 for an unknown channel, 400 for a bad body or an id that is not open. What
  ``ingest-toolkit channel acknowledge`` calls while the agent runs the channel.

Every path but ``/healthz`` requires ``Authorization: Bearer <token>`` when the admin
``security.token_env`` is set; the token is checked before the path is looked at (an unknown
path is 404 for an authenticated request only), and every refusal is logged at WARNING with the
client address and the path. The server is the standard library's threading HTTP server: scrapes
are rare and small, so it needs nothing faster. With TLS each connection's handshake runs in its
own thread under ``CONNECTION_TIMEOUT`` (see :mod:`.http_server`), so a client that connects and
stalls cannot block the others. A non-loopback address without TLS and a token is logged as a
warning at start.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from http import HTTPStatus
from typing import Any, Protocol

from ..errors import IngestError
from ..security import SecuritySettings, bearer_ok, load_token, server_ssl_context, warn_if_exposed
from .http_server import ConnectionHandler, TlsHttpServer, refusal

__all__ = ["AdminServer", "AgentView"]

log = logging.getLogger("ingest_toolkit.collect.admin")

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CONNECTION_TIMEOUT = 10.0  # seconds: socket timeout of a connection, the TLS handshake included
PATHS = ("/healthz", "/metrics", "/status")
_ACKNOWLEDGE = re.compile(r"^/channels/([A-Za-z0-9_.-]+)/incidents/acknowledge$")
_MAX_BODY = 64 * 1024


class AgentView(Protocol):
    """What the admin endpoint needs from the agent."""

    def health_report(self) -> tuple[str, list[str]]:
        """``(status, reasons)``: ``ok`` with no reasons, else ``degraded`` or ``unhealthy``."""
        ...

    def metrics_text(self) -> str: ...

    def status(self) -> dict[str, Any]: ...

    def acknowledge_incidents(self, channel: str, ids: list[int] | None, note: str) -> list[dict[str, Any]]:
        """Acknowledge open incidents of ``channel``; KeyError for an unknown channel, ChannelError
        for an id that is not open."""
        ...


class AdminServer:
    """Serves ``agent`` on ``host:port`` (0: ephemeral) from a daemon thread; ``port`` is the bound one."""

    def __init__(self, agent: AgentView, *, host: str, port: int, security: SecuritySettings) -> None:
        token = load_token(security, key="agent.admin.security.token_env")
        context = server_ssl_context(security.tls) if security.tls is not None else None
        self._server = TlsHttpServer((host, port), _handler(agent, token), context=context,
                                     connection_timeout=CONNECTION_TIMEOUT, log=log, what="admin endpoint")
        warn_if_exposed(log, "admin endpoint", host, tls=context is not None, token=token is not None)
        self.host, self.port = host, int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="agent-admin", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


def _handler(agent: AgentView, token: str | None) -> type[ConnectionHandler]:
    class Handler(ConnectionHandler):
        server_version = "ingest-toolkit-agent"

        def do_GET(self) -> None:  # noqa: N802 (the http.server naming)
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                status, reasons = agent.health_report()
                body = {"status": status, "reasons": reasons} if reasons else {"status": "ok"}
                self._send(HTTPStatus.SERVICE_UNAVAILABLE if reasons else HTTPStatus.OK, _json(body))
            elif not self._authenticated(path):
                self._send(HTTPStatus.UNAUTHORIZED, _json({"error": "missing or wrong bearer token"}),
                           extra={"WWW-Authenticate": "Bearer"})
            elif path not in PATHS:
                self._send(HTTPStatus.NOT_FOUND, _json({"error": f"no such path {path}", "paths": list(PATHS)}))
            elif path == "/metrics":
                self._send(HTTPStatus.OK, agent.metrics_text().encode(), content_type=METRICS_CONTENT_TYPE)
            else:
                self._send(HTTPStatus.OK, _json(agent.status()))

        def do_POST(self) -> None:  # noqa: N802 (the http.server naming)
            path = self.path.split("?", 1)[0]
            if not self._authenticated(path):
                self._send(HTTPStatus.UNAUTHORIZED, _json({"error": "missing or wrong bearer token"}),
                           extra={"WWW-Authenticate": "Bearer"})
                return
            match = _ACKNOWLEDGE.match(path)
            if match is None:
                self._send(HTTPStatus.NOT_FOUND, _json({"error": f"no such path {path}"}))
                return
            try:
                ids, note = _acknowledgement(self._body())
                marked = agent.acknowledge_incidents(match.group(1), ids, note)
            except KeyError:
                self._send(HTTPStatus.NOT_FOUND, _json({"error": f"no channel {match.group(1)!r} on this agent"}))
            except (ValueError, IngestError) as err:
                self._send(HTTPStatus.BAD_REQUEST, _json({"error": str(err)}))
            else:
                log.warning("admin endpoint: %d incidents of channel %s acknowledged by %s: %s", len(marked),
                            match.group(1), self.client_address[0], note)
                self._send(HTTPStatus.OK, _json({"acknowledged": marked}))

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= _MAX_BODY:
                raise ValueError(f"a body of {length} bytes; at most {_MAX_BODY}")
            return self.rfile.read(length)

        def _authenticated(self, path: str) -> bool:
            authorization = self.headers.get("Authorization")
            if bearer_ok(authorization, token):
                return True
            log.warning("admin endpoint: refused %s %r from %s: %s", self.command, path[:200], self.client_address[0],
                        refusal(authorization))
            return False

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


def _acknowledgement(body: bytes) -> tuple[list[int] | None, str]:
    """``(ids, note)`` of an acknowledgement body; ValueError naming what is wrong."""
    doc = json.loads(body or b"{}")
    if not isinstance(doc, dict):
        raise ValueError("the body must be a JSON object {\"ids\": [...] | null, \"note\": \"...\"}")
    ids, note = doc.get("ids"), doc.get("note", "")
    if ids is not None and not (isinstance(ids, list) and all(type(i) is int for i in ids)):
        raise ValueError("ids must be a list of incident ids, or null for every open incident")
    if not isinstance(note, str) or len(note) > 2000:
        raise ValueError("note must be a string of at most 2000 characters")
    return ids, note


def _json(document: Any) -> bytes:
    return json.dumps(document, default=str, sort_keys=True).encode() + b"\n"
