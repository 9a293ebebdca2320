"""The forward sink and its batch ids, with a real aggregator agent (in this process) downstream.

The batch-id proof, one test per redelivery path: a lost ack (the put committed, the answer did
not arrive), a definite failure while more events arrived (the retry must be the same events),
a crash of the edge after the downstream commit (the in-flight record survives), and a crash
after the local commit (the stale record is recognised and dropped).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, EventColumns, FileChannel
from ingest_toolkit.collect.sinks import Downstream, ForwardSinkSettings, SinkGroup, add_hop, forward_batch_id
from ingest_toolkit.collect.sinks.processors import Failover, LoadBalance
from ingest_toolkit.rpc.client import AgentClient
from ingest_toolkit.rpc.errors import AgentUnavailableError

from ..agent.harness import drain
from .harness import FleetSetup, edge_channel, forward_sink, free_port, in_process, wait_for


class Crash(BaseException):
    """Stands for the edge process dying at this point: nothing after it runs."""


def _put(channel: FileChannel, bodies: list[str], headers: dict[str, str] | None = None) -> None:
    with channel.transaction() as tx:
        tx.put_many([Event(b.encode(), dict(headers or {})) for b in bodies])


def _group(channel: FileChannel, address: str, state: Path, *, batch_size: int = 100, pipeline: int = 1) -> SinkGroup:
    """A group of one sink; ``pipeline = 1`` (a step forwards one batch from take to commit) unless given."""
    sink = Downstream("agg", ForwardSinkSettings(type="forward", channel="events", address=address,
                                                 downstream_channel="events", batch_size=batch_size, linger=0,
                                                 timeout=5, pipeline=pipeline))
    return SinkGroup("g", channel, [sink], Failover({}, ["agg"]), state, min_penalty=0.01, max_penalty=0.02)


def _forward_all(channel: FileChannel, group: SinkGroup) -> None:
    """Step until every event was forwarded: none queued, and no batch taken and not yet committed
    (a failed batch keeps its take while it waits for a sink)."""
    while len(channel) or group.slots:
        group.step()


def _record_file(state: Path) -> Path:
    (path,) = state.glob("inflight*.json")
    return path


def _held(agent: Any) -> list[str]:
    """Bodies in the aggregator's channel (taken through its gRPC API, committed)."""
    client = AgentClient(f"127.0.0.1:{agent.config.agent.grpc.port}")
    bodies: list[str] = []
    while True:
        with client.open_take("events", 1000) as take:
            if not take.events:
                break
            bodies += [e.body.decode() for e in take.events]
    client.close()
    return bodies


def _recording(group: SinkGroup, fail: Any) -> list[tuple[str, list[str]]]:
    """Wrap the group's sink: every put is recorded (batch id, bodies); ``fail(n, put)`` may raise."""
    sink = group.sinks[0]
    real = sink.put
    calls: list[tuple[str, list[str]]] = []

    def put(columns: EventColumns, batch_id: str) -> Any:
        assert batch_id == forward_batch_id(group.channel.channel_id, columns.seqs[0], len(columns))
        calls.append((batch_id, [b.decode() for b in columns.bodies]))
        return fail(len(calls), lambda: real(columns, batch_id))

    sink.put = put  # type: ignore[method-assign]
    return calls


def test_events_and_headers_pass_through_with_one_hop(tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    edge_setup = FleetSetup(tmp_path / "edge", name="edge", extra=forward_sink("up", agg_setup.address))
    edge = in_process(edge_setup)
    try:
        client = AgentClient(f"127.0.0.1:{edge.grpc.port}")  # type: ignore[union-attr]
        for n in range(5):
            client.put([Event(f"e{n}-{i}".encode(), {"host": "a", "n": str(n)}) for i in range(100)],
                       channel="events", batch_id=f"p-{n}")
        client.close()
        wait_for(lambda: len(agg.channels["events"]) == 500, what="500 events at the aggregator")
        channel_status = agg.status()["channels"]["events"]  # what admin /status serves
        assert channel_status["checkpoint_meta"]["checkpoint_id"] >= 1 and channel_status["segments"]["recount"]["ok"]
        # the edge counts a batch after its own commit, which follows the aggregator's
        wait_for(lambda: edge.status()["sinks"]["up"]["events"] == 500, what="the edge to count 500 events")
        status = edge.status()["sinks"]["up"]
        assert status["events"] == 500 and status["sinks"]["up"]["events"] == 500
        assert "ingest_sink_events_total{sink=\"up\",group=\"up\"} 500" in edge.metrics_text()
    finally:
        edge.stop()
    agg.stop()
    events = drain(agg_setup.channel_settings())
    assert sorted(e.body.decode() for e in events) == sorted(f"e{n}-{i}" for n in range(5) for i in range(100))
    assert all(e.headers == {"host": "a", "n": e.body.decode()[1:].split("-")[0], "ingest.hops": "1"}
               for e in events)
    assert drain(edge_setup.channel_settings()) == []


def test_a_lost_ack_redelivers_the_same_batch_id_and_is_stored_once(tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"x{i}" for i in range(50)])
    group = _group(channel, agg_setup.address, tmp_path / "state")

    def fail(n: int, put: Any) -> Any:
        ack = put()
        if n == 1:
            raise AgentUnavailableError("put failed: agent unavailable (UNAVAILABLE: Socket closed); retry later")
        return ack

    calls = _recording(group, fail)
    _forward_all(channel, group)
    assert len(calls) == 2 and calls[0] == calls[1]
    stats = group.sinks[0].stats()
    assert (stats["in_doubt_failures"], stats["duplicate_batches"], stats["events"]) == (1, 1, 50)
    assert sorted(_held(agg)) == sorted(f"x{i}" for i in range(50))
    channel.close()


def test_a_retry_after_a_failure_sends_the_same_events_though_more_arrived(tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"a{i}" for i in range(5)])
    group = _group(channel, agg_setup.address, tmp_path / "state")

    def fail(n: int, put: Any) -> Any:
        if n == 1:
            other = threading.Thread(target=_put, args=(channel, [f"b{i}" for i in range(10)]))
            other.start()  # more events queue up behind the batch (another thread: one transaction each)
            other.join()
            raise AgentUnavailableError("put failed: agent unavailable (UNAVAILABLE: failed to connect to all "
                                        "addresses); retry later")
        return put()

    calls = _recording(group, fail)
    _forward_all(channel, group)
    assert calls[0] == calls[1] and calls[0][1] == [f"a{i}" for i in range(5)]
    assert calls[2][1] == [f"b{i}" for i in range(10)]
    assert sorted(_held(agg)) == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(10)])
    channel.close()


def test_an_edge_crash_after_the_downstream_commit_redelivers_the_same_batch(tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"c{i}" for i in range(15)])  # fewer than batch_size: the retake must not take more
    group = _group(channel, agg_setup.address, tmp_path / "state", batch_size=20)

    def crash(n: int, put: Any) -> Any:
        put()
        raise Crash

    first = _recording(group, crash)
    with pytest.raises(Crash):
        group.step()
    group.sinks[0].close()
    channel.close()  # the open take rolls back, as recovery after a crash would
    record = json.loads(_record_file(tmp_path / "state").read_text())
    assert record["batch_id"] == first[0][0] and record["in_doubt"] == "agg"

    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"d{i}" for i in range(30)])  # the restarted edge has more queued
    again = _group(channel, agg_setup.address, tmp_path / "state", batch_size=20)
    calls = _recording(again, lambda n, put: put())
    _forward_all(channel, again)
    assert calls[0] == first[0]
    assert again.sinks[0].stats()["duplicate_batches"] == 1
    assert not list((tmp_path / "state").glob("inflight*"))
    assert sorted(_held(agg)) == sorted([f"c{i}" for i in range(15)] + [f"d{i}" for i in range(30)])
    channel.close()


def test_the_record_of_a_batch_committed_before_a_crash_is_dropped(tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"e{i}" for i in range(10)])
    group = _group(channel, agg_setup.address, tmp_path / "state", batch_size=10)
    first = _recording(group, lambda n, put: put())

    def crash() -> None:
        raise Crash

    group._records.remove = lambda record: crash()  # type: ignore[method-assign]  # dies after the local commit
    with pytest.raises(Crash):
        group.step()
    assert _record_file(tmp_path / "state").exists()
    _put(channel, [f"f{i}" for i in range(10)])  # the head no longer starts with the record's first seq
    again = _group(channel, agg_setup.address, tmp_path / "state", batch_size=10)
    calls = _recording(again, lambda n, put: put())
    _forward_all(channel, again)
    assert calls[-1][0] != first[0][0] and calls[-1][1] == [f"f{i}" for i in range(10)]
    assert sorted(_held(agg)) == sorted([f"e{i}" for i in range(10)] + [f"f{i}" for i in range(10)])
    channel.close()


def test_the_hop_counter_rises_and_stops_loops() -> None:
    columns = EventColumns.of([Event(b"new", {"k": "v"}), Event(b"twice", {"ingest.hops": "2", "k": "w"}),
                               Event(b"looped", {"ingest.hops": "3"}), Event(b"garbled", {"ingest.hops": "x"})])
    out, dropped = add_hop(columns, "ingest.hops", 3)
    assert dropped == 2
    assert [(e.body, dict(e.headers)) for e in out.events()] == [
        (b"new", {"k": "v", "ingest.hops": "1"}), (b"twice", {"k": "w", "ingest.hops": "3"})]


class _Sink:
    def __init__(self, name: str) -> None:
        self.name, self.available_at = name, 0.0


def test_failover_takes_the_highest_priority_ready_sink_and_returns_to_it() -> None:
    sinks = [_Sink("b"), _Sink("a")]
    failover = Failover({"a": 10, "b": 5}, ["b", "a"])
    assert failover.pick(sinks, None)[0] is sinks[1]
    sinks[1].available_at = 1e18  # set aside
    assert failover.pick(sinks, None)[0] is sinks[0]
    pinned, wait = failover.pick(sinks, "a")  # a pinned batch waits for its sink
    assert pinned is None and wait > 1e17
    sinks[1].available_at = 0.0
    assert failover.pick(sinks, None)[0] is sinks[1]


def test_load_balance_round_robin_skips_sinks_that_back_off() -> None:
    sinks = [_Sink("a"), _Sink("b"), _Sink("c")]
    balance = LoadBalance("round_robin")
    assert [balance.pick(sinks, None)[0].name for _ in range(6)] == list("abcabc")  # type: ignore[union-attr]
    sinks[1].available_at = 1e18
    assert [balance.pick(sinks, None)[0].name for _ in range(4)] == list("acac")  # type: ignore[union-attr]
    random_balance = LoadBalance("random", seed=7)
    picks = [random_balance.pick(sinks, None)[0].name for _ in range(200)]  # type: ignore[union-attr]
    assert set(picks) == {"a", "c"} and 60 < picks.count("a") < 140


def _pair(channel: FileChannel, address: str, state: Path, release: float) -> SinkGroup:
    sinks = [Downstream(name, ForwardSinkSettings(type="forward", channel="events", address=address,
                                                  downstream_channel="events", batch_size=100, linger=0, timeout=5,
                                                  pipeline=1))
             for name in ("primary", "secondary")]
    return SinkGroup("g", channel, sinks, Failover({"primary": 1}, ["primary", "secondary"]), state,
                     min_penalty=0.01, max_penalty=0.02, release_in_doubt_after=release)


_LOST_ACK = AgentUnavailableError("put failed: agent unavailable (UNAVAILABLE: Stream removed)")
_TIMEOUT = AgentUnavailableError("put failed: agent unavailable (DEADLINE_EXCEEDED: Deadline Exceeded)")
_REFUSED = AgentUnavailableError("put failed: agent unavailable (UNAVAILABLE: failed to connect to all addresses; "
                                 "Connection refused)")


def _scripted(group: SinkGroup, script: Any) -> list[str]:
    """Every put of the group's sinks is recorded by sink name. ``script(sink, n)`` (the sink's
    n-th put) returns None (it goes through), "timeout" (not stored, in doubt), "lost ack" (stored
    downstream, then the ack is lost: in doubt), "refused" (no connection: certain) or "crash"
    (stored, then the edge dies)."""
    used: list[str] = []
    for sink in group.sinks:
        real = sink.put

        def put(columns: EventColumns, batch_id: str, sink: Downstream = sink, real: Any = real) -> Any:
            used.append(sink.name)
            step = script(sink.name, used.count(sink.name))
            if step in ("refused", "timeout"):
                raise _REFUSED if step == "refused" else _TIMEOUT
            result = real(columns, batch_id)
            if step == "lost ack":
                raise _LOST_ACK
            if step == "crash":
                raise Crash
            return result

        sink.put = put  # type: ignore[method-assign]
    return used


def test_a_batch_in_doubt_stays_with_its_sink_until_it_answers(tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"p{i}" for i in range(20)])
    group = _pair(channel, agg_setup.address, tmp_path / "state", release=0)
    used = _scripted(group, lambda sink, n: "timeout" if sink == "primary" and n <= 5 else None)
    _forward_all(channel, group)
    assert used == ["primary"] * 6  # never moved to the secondary, though it was ready
    assert sorted(_held(agg)) == sorted(f"p{i}" for i in range(20))
    channel.close()


def test_release_in_doubt_after_lets_another_sink_take_the_batch(tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"r{i}" for i in range(20)])
    group = _pair(channel, agg_setup.address, tmp_path / "state", release=0.2)
    used = _scripted(group, lambda sink, n: "timeout" if sink == "primary" else None)
    _forward_all(channel, group)
    assert used[-1] == "secondary" and set(used[:-1]) == {"primary"}
    assert group.stats()["released_in_doubt"] == 1
    assert sorted(_held(agg)) == sorted(f"r{i}" for i in range(20))
    channel.close()


def test_the_hop_counter_fast_paths_agree_with_the_general_one() -> None:
    from ingest_toolkit.collect.sinks.forward import _add_hop_each

    cases = [EventColumns.of([Event(b"a"), Event(b"b")]),
             EventColumns.of([Event(b"a", {"ingest.hops": "1"}), Event(b"b", {"ingest.hops": "2"})]),
             EventColumns.of([Event(b"a", {"ingest.hops": "1"}), Event(b"b", {"ingest.hops": "3"})]),
             EventColumns.of([Event(b"a", {"ingest.hops": "01"}), Event(b"b", {"ingest.hops": "x"})])]
    for columns in cases:
        fast, slow = add_hop(columns, "ingest.hops", 3), _add_hop_each(columns, "ingest.hops", 3)
        assert (fast[0].events(), fast[1]) == (slow[0].events(), slow[1])


def test_forwarding_to_an_aggregator_with_a_token_and_mutual_tls(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.certs import client_cert, self_signed

    cert, key = self_signed(tmp_path / "tls")
    client_pem, client_key = client_cert(tmp_path / "tls", cert, key)
    monkeypatch.setenv("AGG_TOKEN", "s3cret")
    monkeypatch.setenv("EDGE_UPSTREAM_TOKEN", "s3cret")
    monkeypatch.setenv("WRONG_TOKEN", "nope")
    agg_setup = FleetSetup(tmp_path / "agg", name="agg", grpc_port=free_port(), extra=(
        f'[agent.security]\ntoken_env = "AGG_TOKEN"\n[agent.security.tls]\ncert_file = "{cert}"\n'
        f'key_file = "{key}"\nclient_ca_file = "{cert}"\n'))
    agg = in_process(agg_setup)
    secure = (f'token_env = "EDGE_UPSTREAM_TOKEN"\ntls_ca = "{cert}"\ntls_cert = "{client_pem}"\n'
              f'tls_key = "{client_key}"\n')
    wrong = secure.replace("EDGE_UPSTREAM_TOKEN", "WRONG_TOKEN")
    good = FleetSetup(tmp_path / "good", name="good", extra=forward_sink("up", agg_setup.address, extra=secure))
    bad = FleetSetup(tmp_path / "bad", name="bad", extra=forward_sink("up", agg_setup.address, extra=wrong))
    edges = [in_process(good), in_process(bad)]
    try:
        for edge, tag in zip(edges, ("good", "bad"), strict=True):
            with AgentClient(f"127.0.0.1:{edge.grpc.port}") as client:  # type: ignore[union-attr]
                client.put([Event(f"{tag}{i}".encode()) for i in range(10)], channel="events", batch_id=tag)
        wait_for(lambda: len(agg.channels["events"]) == 10, what="the good edge's events")
        wait_for(lambda: edges[1].status()["sinks"]["up"]["sinks"]["up"]["failures"] >= 2, what="refusals")
        refused = edges[1].status()["sinks"]["up"]["sinks"]["up"]
        assert "AuthenticationError" in refused["last_error"] and refused["events"] == 0
        assert edges[1].channels["events"].stats()["used"] == 10  # kept at the edge (queued or in a retry)
    finally:
        for edge in edges:
            edge.stop()
        agg.stop()
    assert sorted(e.body for e in drain(agg_setup.channel_settings())) == sorted(f"good{i}".encode()
                                                                                    for i in range(10))


def test_parallel_parts_keep_their_ids_on_redelivery_and_a_partly_stored_batch_stays_pinned(
        tmp_path: Path, aggregator: Any) -> None:
    from ingest_toolkit.collect.sinks import split_parts

    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"q{i}" for i in range(3000)])
    sinks = [Downstream(name, ForwardSinkSettings(type="forward", channel="events", address=agg_setup.address,
                                                  downstream_channel="events", batch_size=3000, linger=0,
                                                  parallel_puts=3, pipeline=1))
             for name in ("primary", "secondary")]
    group = SinkGroup("g", channel, sinks, Failover({"primary": 1}, ["primary", "secondary"]), tmp_path / "state",
                      min_penalty=0.01, max_penalty=0.02)
    calls: list[tuple[str, str, int]] = []
    real = sinks[0].put

    def put(columns: EventColumns, batch_id: str) -> Any:
        calls.append(("primary", batch_id, len(columns)))
        if batch_id.endswith("/2") and len(calls) <= 3:  # the last part fails for certain, the others are stored
            raise AgentUnavailableError("put failed: agent unavailable (UNAVAILABLE: failed to connect to all "
                                        "addresses)")
        return real(columns, batch_id)

    sinks[0].put = put  # type: ignore[method-assign]
    _forward_all(channel, group)
    first, again = sorted(calls[:3]), sorted(calls[3:])
    assert first == again and [c[2] for c in first] == [1000, 1000, 1000]  # same parts, same ids, same sink
    assert sinks[0].stats()["in_doubt_failures"] == 1 and sinks[1].stats()["batches"] == 0
    assert sorted(_held(agg)) == sorted(f"q{i}" for i in range(3000))
    assert [len(p) for p in split_parts(EventColumns([b"x"] * 999), 2)] == [999]  # too small to split
    channel.close()


def test_a_batch_in_doubt_stays_pinned_when_a_retry_cannot_even_connect(tmp_path: Path, aggregator: Any) -> None:
    # The put reached the primary and was committed there, but the connection broke before the
    # ack (in doubt); the retries then find the primary down (connection refused, a failure that
    # is certain for the retry only). The batch must wait for the primary: sending it to the
    # secondary would store it twice.
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"d{i}" for i in range(20)])
    group = _pair(channel, agg_setup.address, tmp_path / "state", release=0)
    used = _scripted(group, lambda sink, n: None if sink != "primary" else
                     "lost ack" if n == 1 else "refused" if n <= 4 else None)
    _forward_all(channel, group)
    assert used == ["primary"] * 5  # the secondary, though ready, never got the batch
    assert sorted(_held(agg)) == sorted(f"d{i}" for i in range(20))  # once: the fifth put was a duplicate
    assert group.sinks[0].stats()["duplicate_batches"] == 1
    channel.close()


def test_a_batch_whose_first_put_cannot_connect_fails_over_at_once(tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"f{i}" for i in range(20)])
    group = _pair(channel, agg_setup.address, tmp_path / "state", release=0)
    used = _scripted(group, lambda sink, n: "refused" if sink == "primary" else None)
    _forward_all(channel, group)
    assert used == ["primary", "secondary"]
    assert sorted(_held(agg)) == sorted(f"f{i}" for i in range(20))
    channel.close()


def test_a_restarted_edge_keeps_a_batch_that_was_in_flight_with_its_sink(tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    _put(channel, [f"k{i}" for i in range(20)])
    group = _pair(channel, agg_setup.address, tmp_path / "state", release=0)
    _scripted(group, lambda sink, n: "crash")  # stored at the primary, then the edge dies before the ack
    with pytest.raises(Crash):
        group.step()
    group = _pair(channel, agg_setup.address, tmp_path / "state", release=0)  # the restart: the record on disk
    used = _scripted(group, lambda sink, n: "refused" if sink == "primary" and n <= 2 else None)
    _forward_all(channel, group)
    assert used == ["primary"] * 3
    assert sorted(_held(agg)) == sorted(f"k{i}" for i in range(20))
    channel.close()


def test_a_take_through_the_api_from_a_forwarded_channel_is_refused(aggregator: Any, tmp_path: Path) -> None:
    """The group must be its channel's only consumer: the edge's API refuses every form of take
    from the channel it forwards (naming the group), and still serves puts to it and takes from
    its other channels."""
    from ingest_toolkit.rpc.errors import ForwardedChannelError

    agg_setup, agg = aggregator
    setup = FleetSetup(tmp_path / "edge", name="edge", grpc_port=free_port(), channels=("events", "local"),
                       extra=forward_sink("up", agg_setup.address))
    edge = in_process(setup)
    client = AgentClient(setup.address)
    try:
        client.put([Event(b"fwd-1")], channel="events")
        client.put([Event(b"kept-1")], channel="local")
        for attempt in (lambda: client.open_take("events", 10),
                        lambda: client.take_pipeline("events", 10, window=2)):
            with pytest.raises(ForwardedChannelError, match="sink group up of this agent"):
                with attempt() as take:
                    list(getattr(take, "events", None) or take)
        with client.open_take("local", 10) as take:  # the other channel is taken as before
            assert [e.body for e in take.events] == [b"kept-1"]
        assert wait_for(lambda: "fwd-1" in _held(agg), what="the forwarded event downstream")
    finally:
        client.close()
        edge.stop()
