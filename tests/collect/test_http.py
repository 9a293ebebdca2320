"""HTTP source over real sockets: formats, errors, back-pressure, auth, TLS, batch ids."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.fs import OsFileSystem
from ingest_toolkit.collect.pipeline import Pipeline
from ingest_toolkit.collect.selectors import ReplicatingSelector
from ingest_toolkit.collect.sources import HttpSettings, HttpSource, build_source
from ingest_toolkit.errors import ConfigError
from tests.certs import self_signed

from .conftest import ChannelFactory, bodies, channel_settings, drain

Response = tuple[int, dict[str, Any], dict[str, str]]


def start(tmp_path: Path, channels: dict[str, FileChannel], **settings: Any) -> HttpSource:
    config = HttpSettings(type="http", channels=list(channels), **settings)
    pipeline = Pipeline(channels, selector=ReplicatingSelector(list(channels)), name="http")
    source = build_source("http", config, pipeline, tmp_path / "state")
    assert isinstance(source, HttpSource)
    source.start()
    return source


@pytest.fixture
def served(tmp_path: Path, make_channel: ChannelFactory) -> Iterator[tuple[HttpSource, FileChannel]]:
    ch = make_channel()
    source = start(tmp_path, {"ch": ch}, max_request_bytes=4096)
    yield source, ch
    source.stop(2)


def post(port: int, body: bytes | str, content_type: str = "application/json", path: str = "/events",
         headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None) -> Response:
    conn: http.client.HTTPConnection
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    data = body.encode() if isinstance(body, str) else body
    try:
        conn.request("POST", path, body=data, headers={"Content-Type": content_type, **(headers or {})})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}"), dict(response.getheaders())
    finally:
        conn.close()


def test_json_ndjson_and_plain_text(served: tuple[HttpSource, FileChannel]) -> None:
    source, ch = served
    items = [{"headers": {"k": "v"}, "body": "héllo"}, {"body_base64": base64.b64encode(b"\x00\xff").decode()}]
    assert post(source.port, json.dumps(items))[:2] == (200, {"accepted": 2, "duplicate": False})
    ndjson = '{"body": "n1"}\n\n{"body": "n2", "headers": {"a": "b"}}\n'
    assert post(source.port, ndjson, "application/x-ndjson")[:2] == (200, {"accepted": 2, "duplicate": False})
    assert post(source.port, "p1\np2\r\n", "text/plain; charset=utf-8")[1]["accepted"] == 2
    events = drain(ch)
    assert [(e.body, dict(e.headers)) for e in events] == [
        ("héllo".encode(), {"k": "v"}), (b"\x00\xff", {}), (b"n1", {}), (b"n2", {"a": "b"}), (b"p1", {}),
        (b"p2\r", {})]
    assert source.stats()["events"] == 6


@pytest.mark.parametrize(("body", "content_type", "status", "message"), [
    ('[{"body": "ok"}, {"body": 5}]', "application/json", 400, "item 1: 'body' must be a string, got a number"),
    ('[{"body": "a", "extra": 1}]', "application/json", 400, "item 0: unknown key 'extra'"),
    ('[{"headers": {"h": 1}, "body": "a"}]', "application/json", 400, "item 0: header 'h' must be a string"),
    ('[{"body": "a", "body_base64": "YQ=="}]', "application/json", 400, "item 0: needs exactly one of"),
    ('[{"body_base64": "!!"}]', "application/json", 400, "item 0: 'body_base64' is not valid base64"),
    ('[{"body": "a"},', "application/json", 400, "invalid JSON at line 1 column 16"),
    ('{"body": "a"}', "application/json", 400, "expected a JSON array of events, got an object"),
    ('{"body": "a"}\n{"body": "b"\n', "application/x-ndjson", 400, "line 2: invalid JSON"),
    ('{"body": "a"}\n[1]\n', "application/x-ndjson", 400, "line 2: expected an object"),
    ('[{"body": "\\ud800"}]', "application/json", 400, "item 0: 'body' contains a lone surrogate"),
    ("x", "application/xml", 415, "Content-Type 'application/xml' is not supported"),
])
def test_malformed_input_is_rejected_precisely_and_nothing_is_stored(
        served: tuple[HttpSource, FileChannel], body: str, content_type: str, status: int, message: str) -> None:
    source, ch = served
    got_status, doc, _ = post(source.port, body, content_type)
    assert got_status == status and message in doc["error"], doc
    assert drain(ch) == []


def test_oversized_request_is_413_and_batch_id_checked(served: tuple[HttpSource, FileChannel]) -> None:
    source, ch = served
    status, doc, _ = post(source.port, json.dumps([{"body": "x" * 5000}]))
    assert status == 413 and "max_request_bytes=4096" in doc["error"]
    status, doc, _ = post(source.port, "[]", headers={"X-Batch-Id": "b" * 129})
    assert status == 400 and "batch id" in doc["error"]
    assert drain(ch) == []


def test_batch_id_retry_is_a_duplicate_and_stored_once(served: tuple[HttpSource, FileChannel]) -> None:
    source, ch = served
    body = json.dumps([{"body": "once"}, {"body": "twice?"}])
    assert post(source.port, body, headers={"X-Batch-Id": "client-42"})[1] == {"accepted": 2, "duplicate": False}
    assert post(source.port, body, headers={"X-Batch-Id": "client-42"})[1] == {"accepted": 2, "duplicate": True}
    assert bodies(ch) == [b"once", b"twice?"]


def test_full_channel_is_503_with_retry_after(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel(capacity=2, transaction_capacity=2)
    source = start(tmp_path, {"ch": ch}, retry_after_seconds=3)
    try:
        assert post(source.port, "a\nb\n", "text/plain")[0] == 200
        status, doc, headers = post(source.port, "c\n", "text/plain", headers={"X-Batch-Id": "retry-me"})
        assert status == 503 and headers["Retry-After"] == "3" and "channel full" in doc["error"]
        assert bodies(ch) == [b"a", b"b"]
        assert post(source.port, "c\n", "text/plain", headers={"X-Batch-Id": "retry-me"})[0] == 200
        status, doc, _ = post(source.port, "1\n2\n3\n", "text/plain")
        assert status == 413 and "transaction_capacity" in doc["error"]
        assert bodies(ch) == [b"c"]
    finally:
        source.stop(2)


def test_bearer_token(tmp_path: Path, make_channel: ChannelFactory, monkeypatch: pytest.MonkeyPatch,
                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TEST_HTTP_TOKEN", "s3cret")
    ch = make_channel()
    source = start(tmp_path, {"ch": ch}, security={"token_env": "TEST_HTTP_TOKEN"})
    try:
        with caplog.at_level(logging.WARNING, logger="ingest_toolkit.collect.http"):
            for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "s3cret"}):
                status, _, response_headers = post(source.port, "x\n", "text/plain", headers=headers)
                assert status == 401 and response_headers["WWW-Authenticate"].startswith("Bearer")
        refusals = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert [m.rsplit(": ", 1)[1] for m in refusals] == [
            "no bearer token", "a wrong bearer token", "an Authorization header that is not 'Bearer <token>'"]
        assert all("refused POST '/events' from 127.0.0.1" in m and "s3cret" not in m for m in refusals)
        assert post(source.port, "x\n", "text/plain", headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert bodies(ch) == [b"x"] and source.stats()["unauthorized"] == 3
    finally:
        source.stop(2)
    monkeypatch.delenv("TEST_HTTP_TOKEN")
    with pytest.raises(ConfigError):
        start(tmp_path, {"ch": ch}, security={"token_env": "TEST_HTTP_TOKEN"})


def test_unauthenticated_requests_are_refused_before_routing(tmp_path: Path, make_channel: ChannelFactory,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """An unknown channel must not answer 404 (with the list of channels) to a client without the
    token: the token is checked first, and the refusal logged with the path."""
    monkeypatch.setenv("TEST_HTTP_TOKEN", "s3cret")
    source = start(tmp_path, {"secret-channel": make_channel()}, security={"token_env": "TEST_HTTP_TOKEN"})
    try:
        with caplog.at_level(logging.WARNING, logger="ingest_toolkit.collect.http"):
            status, doc, _ = post(source.port, "x\n", "text/plain", path="/events/nope",
                                  headers={"Authorization": "Bearer guess"})
            unrouted = post(source.port, "x\n", "text/plain", path="/admin?token=1")[0]
        assert status == 401 and "secret-channel" not in json.dumps(doc) and unrouted == 401
        refusals = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert [r.getMessage() for r in refusals] == [
            "source http: refused POST '/events/nope' from 127.0.0.1: a wrong bearer token",
            "source http: refused POST '/admin' from 127.0.0.1: no bearer token"]
        authorized = post(source.port, "x\n", "text/plain", path="/events/nope",
                          headers={"Authorization": "Bearer s3cret"})
        assert authorized[0] == 404 and "secret-channel" in authorized[1]["error"]
    finally:
        source.stop(2)


def test_tls_with_a_self_signed_certificate(tmp_path: Path, make_channel: ChannelFactory) -> None:
    cert_file, key_file = self_signed(tmp_path)
    ch = make_channel()
    source = start(tmp_path, {"ch": ch}, security={"tls": {"cert_file": cert_file, "key_file": key_file}})
    try:
        context = ssl.create_default_context(cafile=str(cert_file))
        assert post(source.port, "secure\n", "text/plain", context=context)[:2] == (
            200, {"accepted": 1, "duplicate": False})
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError, http.client.BadStatusLine)):
            post(source.port, "plain\n", "text/plain")  # plain HTTP to a TLS port gets no answer
        with pytest.raises(ssl.SSLError):
            post(source.port, "untrusted\n", "text/plain", context=ssl.create_default_context())
        assert bodies(ch) == [b"secure"]
    finally:
        source.stop(2)


def test_paths_methods_and_per_channel_endpoint(tmp_path: Path, make_channel: ChannelFactory) -> None:
    a, b = make_channel("a"), make_channel("b")
    source = start(tmp_path, {"a": a, "b": b})
    try:
        assert source.settings.host == "127.0.0.1" and source.port > 0
        assert post(source.port, "only-b\n", "text/plain", path="/events/b")[0] == 200
        assert post(source.port, "both\n", "text/plain")[0] == 200
        status, doc, _ = post(source.port, "x\n", "text/plain", path="/events/nope")
        assert status == 404 and "/events/<channel>" in doc["error"]
        conn = http.client.HTTPConnection("127.0.0.1", source.port, timeout=5)
        conn.request("GET", "/events")
        assert conn.getresponse().status == 405
        conn.close()
        assert bodies(a) == [b"both"] and bodies(b) == [b"only-b", b"both"]
    finally:
        source.stop(2)


def test_keep_alive_connection_serves_several_requests(served: tuple[HttpSource, FileChannel]) -> None:
    source, ch = served
    conn = http.client.HTTPConnection("127.0.0.1", source.port, timeout=5)
    try:
        for i in range(3):
            conn.request("POST", "/events", body=f"r{i}\n", headers={"Content-Type": "text/plain"})
            response = conn.getresponse()
            assert response.status == 200
            response.read()
    finally:
        conn.close()
    assert [e.body for e in drain(ch)] == [b"r0", b"r1", b"r2"]
    assert isinstance(Event(b""), Event)


class _ShrinkingDisk(OsFileSystem):
    """The real filesystem, except that free space is whatever the test says."""

    free = 1 << 40

    def free_bytes(self, path: str) -> int:
        return self.free


def test_low_disk_space_is_503_and_the_retry_succeeds(tmp_path: Path) -> None:
    disk = _ShrinkingDisk()
    ch = FileChannel(fs=disk, **channel_settings(tmp_path / "ch", min_free_bytes=1 << 30))
    source = start(tmp_path, {"ch": ch})
    try:
        disk.free = 1 << 29
        status, doc, headers = post(source.port, "a\n", "text/plain", headers={"X-Batch-Id": "d1"})
        assert status == 503 and "Retry-After" in headers and "disk space" in doc["error"]
        disk.free = 1 << 40
        assert post(source.port, "a\n", "text/plain", headers={"X-Batch-Id": "d1"})[1]["duplicate"] is False
        assert bodies(ch) == [b"a"] and source.stats()["unavailable"] == 1
    finally:
        source.stop(2)
        ch.close()


def test_kept_alive_connection_after_stop_gets_503(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = start(tmp_path, {"ch": ch})
    conn = http.client.HTTPConnection("127.0.0.1", source.port, timeout=5)
    try:
        conn.request("POST", "/events", body=b"before\n", headers={"Content-Type": "text/plain"})
        response = conn.getresponse()
        assert response.status == 200
        response.read()
        source.stop(2)
        conn.request("POST", "/events", body=b"after\n", headers={"Content-Type": "text/plain"})
        response = conn.getresponse()
        assert response.status == 503 and response.getheader("Retry-After") == "1"
    finally:
        conn.close()
    assert bodies(ch) == [b"before"]


def test_connections_over_the_limit_are_closed(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = start(tmp_path, {"ch": ch}, max_connections=1)
    idle = socket.create_connection(("127.0.0.1", source.port), timeout=5)  # holds the only slot
    try:
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            post(source.port, "x\n", "text/plain")
    finally:
        idle.close()
    deadline = time.monotonic() + 5
    while True:  # the slot frees once the idle connection's thread sees it closed
        try:
            assert post(source.port, "y\n", "text/plain")[0] == 200
            break
        except (http.client.RemoteDisconnected, ConnectionError):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    source.stop(2)
    assert bodies(ch) == [b"y"]
