"""Hostile bodies to the HTTP source, over a real socket: a 400 with the reason, never a dropped
connection or a traceback (issue 21, item 4), and the documented limits on size and depth."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.collect.sources import HttpSource
from ingest_toolkit.collect.sources.http_body import DEFAULT_MAX_JSON_DEPTH, nesting_depth

from .conftest import ChannelFactory, bodies
from .test_http import post, start

DEEP = 1000
DIGITS = 5000  # above Python's 4,300-digit limit of int <-> str conversion

HOSTILE = [
    pytest.param("[" * DEEP + "]" * DEEP, "application/json", "nested deeper than max_json_depth=32",
                 id="array-1000-deep"),
    pytest.param('[{"body": "a", "headers": ' + '{"k": ' * DEEP + '"v"' + "}" * DEEP + "}]", "application/json",
                 "nested deeper than max_json_depth=32", id="headers-1000-deep"),
    pytest.param("[" * 200_000, "application/json", "nested deeper than max_json_depth=32", id="unclosed-200k-deep"),
    pytest.param('{"body": "a"}\n' + '{"body": ' * DEEP + '"x"' + "}" * DEEP + "\n", "application/x-ndjson",
                 "line 2: JSON nested deeper than max_json_depth=32", id="ndjson-1000-deep"),
    pytest.param("[" + "7" * DIGITS + "]", "application/json", "a number of more than 4300 digits",
                 id="int-5000-digits"),
    pytest.param('[{"body": "a", "headers": {"n": -' + "9" * DIGITS + "}}]", "application/json",
                 "a number of more than 4300 digits", id="header-int-5000-digits"),
    pytest.param('{"body": ' + "1" * DIGITS + "}\n", "application/x-ndjson",
                 "line 1: a number of more than 4300 digits", id="ndjson-int-5000-digits"),
]


@pytest.fixture
def roomy(tmp_path: Path, make_channel: ChannelFactory) -> Iterator[tuple[HttpSource, FileChannel]]:
    ch = make_channel()
    source = start(tmp_path, {"ch": ch}, max_request_bytes=1 << 20)
    yield source, ch
    source.stop(2)


@pytest.mark.parametrize(("body", "content_type", "reason"), HOSTILE)
def test_hostile_json_is_answered_400_counted_and_logged_as_one_warning(
        roomy: tuple[HttpSource, FileChannel], caplog: pytest.LogCaptureFixture,
        body: str, content_type: str, reason: str) -> None:
    source, ch = roomy
    with caplog.at_level(logging.WARNING):
        status, doc, headers = post(source.port, body, content_type)
    assert status == 400, doc
    assert reason in doc["error"] and "\n" not in doc["error"], doc
    assert headers["Connection"] == "close"
    stats = source.stats()
    assert (stats["bad_requests"], stats["errors"]) == (1, 0)
    assert [r.levelname for r in caplog.records] == ["WARNING"], [r.getMessage()[:300] for r in caplog.records]
    warning = caplog.records[0]
    assert warning.exc_info is None and "\n" not in warning.getMessage()
    assert warning.getMessage().startswith("source http: refused POST '/events' from 127.0.0.1: 400 ")
    assert reason in warning.getMessage()
    # the source is unharmed and nothing of the refused body was stored
    assert post(source.port, '[{"body": "fine"}]')[0] == 200
    assert bodies(ch) == [b"fine"]


def test_the_depth_limit_is_configurable_and_the_event_format_fits_its_minimum(
        tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = start(tmp_path, {"ch": ch}, max_json_depth=3)
    try:
        event = {"body": "a", "headers": {"k": "v"}}  # array > object > headers: depth 3, the most the format uses
        assert post(source.port, json.dumps([event]))[0] == 200
        status, doc, _ = post(source.port, '[[[["x"]]]]')
        assert status == 400 and doc["error"].startswith("JSON nested deeper than max_json_depth=3 "), doc
    finally:
        source.stop(2)
    assert bodies(ch) == [b"a"]
    default = start(tmp_path, {"ch": ch})
    try:
        status, doc, _ = post(default.port, '[[[["x"]]]]')  # within the default depth: the format's own error
    finally:
        default.stop(2)
    assert status == 400 and doc["error"].startswith("item 0: expected an object"), doc
    assert default.settings.max_json_depth == DEFAULT_MAX_JSON_DEPTH == 32


def test_max_json_depth_must_leave_room_for_the_event_format() -> None:
    from pydantic import ValidationError

    from ingest_toolkit.collect.sources import HttpSettings

    with pytest.raises(ValidationError, match="max_json_depth"):
        HttpSettings(type="http", channels=["ch"], max_json_depth=2)
    with pytest.raises(ValidationError, match="max_json_depth"):
        HttpSettings(type="http", channels=["ch"], max_json_depth=10_000)


def test_a_defect_behind_the_source_is_answered_500_not_a_dropped_connection(
        tmp_path: Path, make_channel: ChannelFactory, caplog: pytest.LogCaptureFixture) -> None:
    """A faulty custom interceptor (user code) raises a foreign exception: the client still gets
    an answer, the source counts an error and logs it at ERROR with its traceback (a defect)."""
    from ingest_toolkit.collect.pipeline import Pipeline
    from ingest_toolkit.collect.selectors import ReplicatingSelector
    from ingest_toolkit.collect.sources import HttpSettings, build_source

    def faulty(events: list[Event]) -> list[Event]:
        raise KeyError("tenant")

    ch = make_channel()
    pipeline = Pipeline({"ch": ch}, selector=ReplicatingSelector(["ch"]), interceptors=[faulty], name="http")
    source = build_source("http", HttpSettings(type="http", channels=["ch"]), pipeline, tmp_path / "state")
    assert isinstance(source, HttpSource)
    source.start()
    try:
        with caplog.at_level(logging.WARNING):
            status, doc, _ = post(source.port, '[{"body": "a"}]')
        assert status == 500 and doc == {"error": "internal error (KeyError); see the agent log"}
        assert source.stats()["errors"] == 1
        [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert record.levelname == "ERROR" and record.exc_info is not None
        assert record.getMessage() == "source http: POST '/events' from 127.0.0.1 failed"
    finally:
        source.stop(2)
    assert bodies(ch) == []


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_the_depth_scan_reads_utf16_and_utf32_bodies_as_the_parser_does(
        roomy: tuple[HttpSource, FileChannel], encoding: str) -> None:
    """In UTF-16-LE U+2200 is the byte pair 00 22 (a quote byte) and U+5B00 is 00 5B (a bracket byte): a
    scan of the raw bytes would see a string end and fifty brackets open."""
    source, ch = roomy
    body = json.dumps([{"body": "\u2200" + "\u5b00" * 50}], ensure_ascii=False).encode(encoding)
    status, doc, _ = post(source.port, body)
    assert status == 200, doc
    status, doc, _ = post(source.port, ("[" * 100 + "]" * 100).encode(encoding))
    assert status == 400 and doc["error"].startswith("JSON nested deeper than max_json_depth=32"), doc
    assert bodies(ch) == [("\u2200" + "\u5b00" * 50).encode()]


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab,:'),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet='[]{}"\\k'), inner,
                                                                                max_size=4), max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans())
def test_the_depth_scan_agrees_with_the_parsed_structure(value: object, indent: bool) -> None:
    """The scan never parses; on valid JSON (strings full of brackets, quotes and backslashes) it
    must give exactly the depth of what the parser builds."""
    text = json.dumps(value, indent=1 if indent else None).encode()
    assert nesting_depth(text) == _depth(value)
