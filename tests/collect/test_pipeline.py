"""Pipeline, selectors and interceptors against real file channels."""

from __future__ import annotations

import threading
import time

import pytest
from pydantic import TypeAdapter, ValidationError

from ingest_toolkit.channel import Event, EventColumns
from ingest_toolkit.collect.errors import BatchIdError
from ingest_toolkit.collect.interceptors import InterceptorSettings, build_interceptors
from ingest_toolkit.collect.pipeline import Pipeline
from ingest_toolkit.collect.selectors import (
    MultiplexingSelector,
    ReplicatingSelector,
    SelectorSettings,
    build_selector,
)
from ingest_toolkit.errors import ChannelFullError, ConfigError

from .conftest import ChannelFactory, bodies, drain


def events(*texts: str, **headers: str) -> list[Event]:
    return [Event(t.encode(), dict(headers)) for t in texts]


def test_replicating_puts_every_event_in_every_channel(make_channel: ChannelFactory) -> None:
    a, b = make_channel("a"), make_channel("b")
    pipeline = Pipeline({"a": a, "b": b}, selector=ReplicatingSelector(["a", "b"]), name="p")
    result = pipeline.put_batch(events("1", "2", "3"))
    assert (result.accepted, result.duplicate, result.channels) == (3, False, ("a", "b"))
    assert bodies(a) == bodies(b) == [b"1", b"2", b"3"]


def test_required_channel_failure_fails_the_put_and_optional_failure_does_not(make_channel: ChannelFactory) -> None:
    a, full = make_channel("a"), make_channel("full", capacity=1, transaction_capacity=1)
    with full.transaction() as tx:
        tx.put(Event(b"x"))
    required = Pipeline({"a": a, "full": full}, selector=ReplicatingSelector(["a", "full"]), name="r")
    with pytest.raises(ChannelFullError):
        required.put_batch(events("1"))
    optional = Pipeline({"a": a, "full": full}, selector=ReplicatingSelector(["a", "full"], ["full"]), name="o")
    result = optional.put_batch(events("2"))
    assert result.channels == ("a",) and result.accepted == 1
    assert optional.stats()["optional_failures"] == 1
    assert bodies(a) == [b"1", b"2"]  # the failed required put had committed to 'a' first


def test_retry_with_batch_id_completes_missing_channels_without_duplicates(make_channel: ChannelFactory) -> None:
    a, b = make_channel("a"), make_channel("b", capacity=2, transaction_capacity=2)
    with b.transaction() as tx:
        tx.put(Event(b"filler"))
    pipeline = Pipeline({"a": a, "b": b}, selector=ReplicatingSelector(["a", "b"]), name="p")
    batch = events("x", "y")
    with pytest.raises(ChannelFullError):  # 'a' committed, 'b' failed: like a crash between commits
        pipeline.put_batch(batch, batch_id="batch-1")
    assert bodies(b) == [b"filler"]  # drained: room for the retry
    retry = pipeline.put_batch(batch, batch_id="batch-1")
    assert retry.channels == ("b",) and not retry.duplicate
    again = pipeline.put_batch(batch, batch_id="batch-1")
    assert again.duplicate and again.channels == () and again.accepted == 2
    assert bodies(a) == [b"x", b"y"] and bodies(b) == [b"x", b"y"]


def test_concurrent_retries_of_one_batch_commit_once(make_channel: ChannelFactory) -> None:
    ch = make_channel()
    pipeline = Pipeline({"ch": ch}, selector=ReplicatingSelector(["ch"]), name="p")
    results = []
    start = threading.Barrier(8)

    def send() -> None:
        start.wait()
        results.append(pipeline.put_batch(events("a", "b", "c"), batch_id="same"))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.duplicate for r in results) == [False] + [True] * 7
    assert bodies(ch) == [b"a", b"b", b"c"]


def test_batch_id_limits() -> None:
    pipeline = Pipeline({}, selector=ReplicatingSelector([]), name="p")
    with pytest.raises(BatchIdError):
        pipeline.put_batch([], batch_id="x" * 129)
    with pytest.raises(BatchIdError):
        pipeline.put_batch([], batch_id="")


def test_multiplexing_routes_by_header_with_default_and_optional(make_channel: ChannelFactory) -> None:
    chans = {n: make_channel(n) for n in ("eu", "us", "other", "audit")}
    selector = build_selector(TypeAdapter(SelectorSettings).validate_python(
        {"type": "multiplexing", "header": "region", "mapping": {"eu": ["eu"], "us": ["us"]},
         "default": ["other"], "optional": {"eu": ["audit"]}}), list(chans))
    pipeline = Pipeline(chans, selector=selector, name="p")
    batch = [Event(b"1", {"region": "eu"}), Event(b"2", {"region": "us"}), Event(b"3", {}),
             Event(b"4", {"region": "mars"}), Event(b"5", {"region": "eu"})]
    result = pipeline.put_batch(batch)
    assert result.accepted == 5 and set(result.channels) == set(chans)
    assert bodies(chans["eu"]) == [b"1", b"5"] and bodies(chans["us"]) == [b"2"]
    assert bodies(chans["other"]) == [b"3", b"4"] and bodies(chans["audit"]) == [b"1", b"5"]


def test_multiplexing_optional_failure_is_ignored_required_is_not(make_channel: ChannelFactory) -> None:
    ok, full = make_channel("ok"), make_channel("full", capacity=1, transaction_capacity=1)
    with full.transaction() as tx:
        tx.put(Event(b"x"))
    selector = MultiplexingSelector("k", {"a": ["ok"], "b": ["full"]}, ["ok"], {"a": ["full"]})
    pipeline = Pipeline({"ok": ok, "full": full}, selector=selector, name="p")
    assert pipeline.put_batch([Event(b"1", {"k": "a"})]).channels == ("ok",)
    with pytest.raises(ChannelFullError):
        pipeline.put_batch([Event(b"2", {"k": "b"})])


def test_selector_config_errors_name_the_key() -> None:
    settings = TypeAdapter(SelectorSettings).validate_python(
        {"type": "multiplexing", "header": "h", "mapping": {"v": ["nope"]}, "default": ["a"]})
    with pytest.raises(ConfigError) as err:
        build_selector(settings, ["a"])
    assert err.value.key == "selector.mapping.v"
    with pytest.raises(ValidationError):  # an event must go somewhere
        TypeAdapter(SelectorSettings).validate_python({"type": "multiplexing", "header": "h", "default": []})
    with pytest.raises(ConfigError):
        build_selector(TypeAdapter(SelectorSettings).validate_python({"optional": ["x"]}), ["a"])


def _interceptors(*specs: dict[str, object]) -> list[object]:
    adapter = TypeAdapter(list[InterceptorSettings])
    return build_interceptors(adapter.validate_python(list(specs)))  # type: ignore[return-value]


def test_interceptors_set_headers_filter_and_preserve(make_channel: ChannelFactory) -> None:
    ch = make_channel()
    chain = build_interceptors(TypeAdapter(list[InterceptorSettings]).validate_python([
        {"type": "regex_filter", "regex": "^skip", "exclude": True},
        {"type": "timestamp"},
        {"type": "timestamp", "header": "ts2", "preserve_existing": False},
        {"type": "host", "use_ip": False},
        {"type": "static", "headers": {"env": "prod", "team": "data"}},
        {"type": "event_id"},
    ]))
    pipeline = Pipeline({"ch": ch}, selector=ReplicatingSelector(["ch"]), interceptors=chain, name="p")
    before = time.time_ns() // 1_000_000
    original = [Event(b"keep", {"timestamp": "7", "env": "dev"}), Event(b"skip me"), Event(b"also", {"id": "x"})]
    assert pipeline.put_batch(original).accepted == 2
    assert original[0].headers == {"timestamp": "7", "env": "dev"}  # callers' events are not mutated
    first, second = drain(ch)
    assert first.headers["timestamp"] == "7" and first.headers["env"] == "dev" and first.headers["team"] == "data"
    assert before <= int(first.headers["ts2"]) <= time.time_ns() // 1_000_000
    assert int(second.headers["timestamp"]) >= before and second.headers["env"] == "prod"
    assert first.headers["host"] and len(first.headers["id"]) == 36 and second.headers["id"] == "x"
    assert pipeline.stats()["filtered"] == 1


def test_regex_filter_include_and_settings_validation() -> None:
    [keep] = build_interceptors(TypeAdapter(list[InterceptorSettings]).validate_python(
        [{"type": "regex_filter", "regex": r"ERROR|WARN"}]))
    assert [e.body for e in keep(events("ERROR a", "info", "WARN b", "\xff"))] == [b"ERROR a", b"WARN b"]
    with pytest.raises(ValidationError):
        TypeAdapter(list[InterceptorSettings]).validate_python([{"type": "regex_filter", "regex": "("}])
    with pytest.raises(ValidationError):
        TypeAdapter(list[InterceptorSettings]).validate_python([{"type": "nope"}])
    [host_ip] = build_interceptors(TypeAdapter(list[InterceptorSettings]).validate_python([{"type": "host"}]))
    assert host_ip([Event(b"")])[0].headers["host"]


def test_columns_reach_the_channels_as_they_are_or_through_interceptors_and_multiplexing(
        make_channel: ChannelFactory) -> None:
    """The gRPC put hands the pipeline EventColumns: stored as they are when nothing has to look at
    each event, turned into events for interceptors and the multiplexing selector; the stored
    events are the same either way, and batch ids dedupe both."""
    batch = [Event(b"plain"), Event(b"tagged", {"kind": "click", "k": "v"}), Event(b"", {"kind": "view"})]
    columns = EventColumns.of(batch)
    a, b = make_channel("a"), make_channel("b")
    replicating = Pipeline({"a": a, "b": b}, selector=ReplicatingSelector(["a", "b"]), name="r")
    assert replicating.put_batch(columns, batch_id="cols-1").channels == ("a", "b")
    assert replicating.put_batch(columns, batch_id="cols-1").duplicate  # the retry is recognised
    one = replicating.put_batch(columns, channel="b")  # an explicit channel: only there
    assert one.channels == ("b",)
    with pytest.raises(ConfigError, match="has no channel 'nope'"):
        replicating.put_batch(columns, channel="nope")
    stored = [(e.body, dict(e.headers)) for e in batch]
    assert [(e.body, dict(e.headers)) for e in drain(a)] == stored
    assert [(e.body, dict(e.headers)) for e in drain(b)] == stored * 2

    stamped = Pipeline({"a": a}, selector=ReplicatingSelector(["a"]), name="s", interceptors=build_interceptors(
        TypeAdapter(list[InterceptorSettings]).validate_python([{"type": "static", "headers": {"env": "prod"}}])))
    stamped.put_batch(columns)
    assert [e.headers.get("env") for e in drain(a)] == ["prod"] * 3  # interceptors saw every event

    views = make_channel("views")
    routed = Pipeline({"a": a, "views": views}, name="m",
                      selector=MultiplexingSelector("kind", {"view": ["views"]}, default=["a"]))
    assert routed.put_batch(columns).accepted == 3
    assert [e.body for e in drain(views)] == [b""] and [e.body for e in drain(a)] == [b"plain", b"tagged"]
