"""HTTP source: clients POST batches of events; 200 only after the channels committed them.

Endpoints: ``POST /events`` (the source's selector picks the channels) and
``POST /events/<channel>`` (that channel only). Body formats: see http_body.py. Responses are
JSON: ``{"accepted": n, "duplicate": bool}`` on success, ``{"error": "..."}`` otherwise.

| status | when |
|---|---|
| 200 | committed (or, with ``X-Batch-Id``, committed before: ``duplicate: true``) |
| 400 | malformed body (also: nested deeper than ``max_json_depth``), bad ``X-Batch-Id``; nothing stored |
| 401 | missing or wrong bearer token: checked first, before the path (logged with client and path) |
| 404 / 405 | unknown path (authenticated requests only) / method other than POST |
| 411 | no Content-Length (chunked bodies are not read) |
| 413 | body over ``max_request_bytes``, an event over the channel's limit, or too many events |
| 415 | unsupported Content-Type |
| 503 + Retry-After | channel full or disk space low (transient): retry the same request |
| 500 | any other failure (logged with its traceback: a defect) |

A 400 or 415 is counted in ``bad_requests`` and logged as one WARNING line naming the client and the
reason; the parser never fails with anything but the source's own errors (see http_body.py).

Standard-library ``ThreadingHTTPServer`` (one thread per connection, see ..http_server); TLS is
wrapped per connection and the handshake runs in the connection's thread, so a slow client
cannot stall ``accept``. Listening on a non-loopback address without TLS and a token is logged
as a warning at start.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ...errors import EventTooLargeError, IngestError, TransactionCapacityError, TransientError
from ...security import SecuritySettings, bearer_ok, load_token, server_ssl_context, warn_if_exposed
from ..errors import BadRequestError, BatchIdError, UnsupportedMediaTypeError
from ..http_server import ConnectionHandler, TlsHttpServer, refusal
from ..pipeline import Pipeline, check_batch_id
from .base import Counters, SourceSettings
from .http_body import DEFAULT_MAX_JSON_DEPTH, MAX_JSON_DEPTH, MIN_JSON_DEPTH, parse_events

__all__ = ["HttpSettings", "HttpSource"]

log = logging.getLogger("ingest_toolkit.collect.http")


class HttpSettings(SourceSettings):
    type: Literal["http"]
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)  # 0: an ephemeral port, see HttpSource.port
    max_request_bytes: int = Field(default=16 << 20, ge=1)
    max_json_depth: int = Field(default=DEFAULT_MAX_JSON_DEPTH, ge=MIN_JSON_DEPTH, le=MAX_JSON_DEPTH)
    retry_after_seconds: int = Field(default=1, ge=0)
    request_timeout: float = Field(default=30.0, gt=0)
    max_connections: int = Field(default=256, ge=1)  # one thread each
    security: SecuritySettings = Field(default_factory=SecuritySettings)


class _Reply(Exception):  # noqa: N818 - control flow inside one request
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class HttpSource:
    """Receives events over HTTP(S); one put transaction per request."""

    def __init__(self, name: str, settings: HttpSettings, pipeline: Pipeline, *, state_dir: Path) -> None:
        self.name, self.settings, self.pipeline = name, settings, pipeline
        self.state_dir = state_dir  # unused: the client owns retries; batch ids live in the channel
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._busy = 0
        self._idle = threading.Condition()
        self._stopping = False
        self.counters = Counters("requests", "events", "batches", "duplicates", "errors", "bad_requests",
                                 "unauthorized", "too_large", "unavailable")

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"HTTP source {self.name} is not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._stopping = False
        security = self.settings.security
        token = load_token(security, key=f"sources.{self.name}.security.token_env")
        context = server_ssl_context(security.tls) if security.tls is not None else None
        self._server = _Server((self.settings.host, self.settings.port), self, token, context)
        warn_if_exposed(log, f"HTTP source {self.name}", self.settings.host, tls=context is not None,
                        token=token is not None)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"source-{self.name}", daemon=True)
        self._thread.start()
        log.info("source %s listening on %s://%s:%d", self.name, "https" if context else "http",
                 self.settings.host, self.port)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, let requests in progress finish (up to ``timeout``), close the socket."""
        if self._server is None:
            return
        self._stopping = True  # kept-alive connections get 503 from now on
        self._server.shutdown()
        with self._idle:
            if not self._idle.wait_for(lambda: self._busy == 0, timeout):
                log.warning("source %s: %d request(s) still running after %.1fs", self.name, self._busy, timeout)
        self._server.server_close()
        self._server = None

    def stats(self) -> dict[str, Any]:
        return {**self.counters.snapshot(), "in_flight": self._busy}

    # -- one request ----------------------------------------------------------------------
    def handle(self, request: _Handler) -> None:
        with self._idle:
            self._busy += 1
        try:
            self.counters.add(requests=1)
            try:
                status, doc, headers = 200, self._process(request), {}
            except _Reply as reply:
                status, doc, headers = reply.status, {"error": reply.message}, reply.headers
                request.close_connection = True  # the body may be unread: never parse it as a request
            except Exception as err:  # a defect: still an answer, not a dropped connection
                self.counters.add(errors=1)
                log.exception("source %s: %s %r from %s failed", self.name, request.command,
                              request.path.split("?", 1)[0][:200], request.client_address[0])
                status, doc, headers = 500, {"error": f"internal error ({type(err).__name__}); see the agent log"}, {}
                request.close_connection = True
            request.reply(status, doc, headers)
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def _process(self, request: _Handler) -> dict[str, Any]:
        if self._stopping:
            retry = {"Retry-After": str(self.settings.retry_after_seconds)}
            raise _Reply(503, f"source {self.name} is stopping", retry)
        self._authenticate(request)  # first: a refused client learns nothing (not even the channel names)
        channel = self._channel_of(request.path)
        body = self._read_body(request)
        batch_id = request.headers.get("X-Batch-Id")
        try:
            if batch_id is not None:
                check_batch_id(batch_id)
            events = parse_events(body, request.headers.get("Content-Type"), max_depth=self.settings.max_json_depth)
        except (BadRequestError, BatchIdError) as err:
            raise self._refuse(request, 400, err) from None
        except UnsupportedMediaTypeError as err:
            raise self._refuse(request, 415, err) from None
        return self._put(events, batch_id, channel)

    def _refuse(self, request: _Handler, status: int, err: Exception) -> _Reply:
        """A malformed request: counted, logged as one line (client, path, reason), answered."""
        self.counters.add(bad_requests=1)
        log.warning("source %s: refused %s %r from %s: %d %s", self.name, request.command,
                    request.path.split("?", 1)[0][:200], request.client_address[0], status, str(err)[:300])
        return _Reply(status, str(err))

    def _authenticate(self, request: _Handler) -> None:
        authorization = request.headers.get("Authorization")
        if bearer_ok(authorization, request.server.token):
            return
        self.counters.add(unauthorized=1)
        log.warning("source %s: refused %s %r from %s: %s", self.name, request.command,
                    request.path.split("?", 1)[0][:200], request.client_address[0], refusal(authorization))
        raise _Reply(401, "missing or wrong bearer token", {"WWW-Authenticate": 'Bearer realm="ingest"'})

    def _channel_of(self, path: str) -> str | None:
        route = path.split("?", 1)[0].rstrip("/")
        if route == "/events":
            return None
        prefix, _, name = route.rpartition("/")
        if prefix == "/events" and name in self.settings.channels:
            return name
        raise _Reply(404, f"no such endpoint {route!r}; POST to /events or /events/<channel> with channel one of "
                          f"{', '.join(self.settings.channels)}")

    def _read_body(self, request: _Handler) -> bytes:
        if request.headers.get("Transfer-Encoding"):
            raise _Reply(411, "chunked request bodies are not supported; send Content-Length")
        raw = request.headers.get("Content-Length")
        if raw is None:
            raise _Reply(411, "Content-Length is required")
        try:
            length = int(raw)
            if length < 0:
                raise ValueError(raw)
        except ValueError:
            raise _Reply(400, f"bad Content-Length {raw!r}") from None
        if length > self.settings.max_request_bytes:
            self.counters.add(too_large=1)
            raise _Reply(413, f"request body of {length} bytes exceeds max_request_bytes="
                              f"{self.settings.max_request_bytes}; send smaller batches")
        body = request.rfile.read(length)
        if len(body) != length:
            request.close_connection = True
            raise _Reply(400, f"request body ended after {len(body)} of {length} bytes")
        return body

    def _put(self, events: list[Any], batch_id: str | None, channel: str | None) -> dict[str, Any]:
        try:
            result = self.pipeline.put_batch(events, batch_id=batch_id, channel=channel)
        except TransientError as err:
            self.counters.add(unavailable=1)
            log.warning("source %s: answering 503: %s", self.name, err)
            raise _Reply(503, str(err), {"Retry-After": str(self.settings.retry_after_seconds)}) from None
        except (EventTooLargeError, TransactionCapacityError) as err:
            self.counters.add(too_large=1)
            raise _Reply(413, str(err)) from None
        except IngestError as err:
            self.counters.add(errors=1)
            log.error("source %s: put failed: %s", self.name, err)
            raise _Reply(500, str(err)) from None
        self.counters.add(batches=1, duplicates=int(result.duplicate),
                          events=0 if result.duplicate else result.accepted)
        return {"accepted": result.accepted, "duplicate": result.duplicate}


class _Handler(ConnectionHandler):
    server: _Server
    server_version = "ingest-toolkit"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.server.source.handle(self)

    def _not_allowed(self) -> None:
        self.reply(405, {"error": f"method {self.command} not allowed; use POST"}, {"Allow": "POST"})

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = _not_allowed  # noqa: N815

    def reply(self, status: int, doc: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        log.debug("%s %s", self.client_address[0], format % args)


class _Server(TlsHttpServer):
    """Counts connections: more than ``max_connections`` are closed at once (one thread each)."""

    def __init__(self, address: tuple[str, int], source: HttpSource, token: str | None,
                 context: ssl.SSLContext | None) -> None:
        self.source, self.token = source, token
        self._lock = threading.Lock()
        self._connections = 0
        super().__init__(address, _Handler, context=context, connection_timeout=source.settings.request_timeout,
                         log=log, what=f"source {source.name}")

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = self._connections >= self.source.settings.max_connections
            if not full:
                self._connections += 1
        if full:
            log.warning("source %s: refusing a connection from %s: max_connections=%d reached", self.source.name,
                        client_address[0], self.source.settings.max_connections)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._connections -= 1
