"""Pipelined forwarding: several batches in flight, and every batch id still stable.

* A put that fails in the middle of the pipeline: the failed batches (one of them already stored
  downstream) are put again in order with the same ids and events; nothing is
  stored twice, nothing lost.
* With failover, a later batch that the primary stored before an earlier one failed stays pinned
  to the primary, while the failed one may move to the secondary.
* An edge SIGKILLed with several batches in flight (its aggregator frozen mid-put): after the
  restart every in-doubt batch is sent again under its recorded id, and the aggregator holds each
  event once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, EventColumns, FileChannel
from ingest_toolkit.collect.sinks import Downstream, ForwardSinkSettings, SinkGroup, forward_batch_id
from ingest_toolkit.collect.sinks.processors import Failover
from ingest_toolkit.rpc.client import AgentClient
from ingest_toolkit.rpc.errors import AgentUnavailableError

from ..agent.harness import AgentProcess, drain
from .harness import FleetSetup, edge_channel, forward_sink, free_port, wait_for

_LOST_ACK = AgentUnavailableError("put failed: agent unavailable (UNAVAILABLE: Stream removed)")
_REFUSED = AgentUnavailableError("put failed: agent unavailable (UNAVAILABLE: failed to connect to all addresses; "
                                 "Connection refused)")


def _put(channel: FileChannel, bodies: list[str]) -> None:
    with channel.transaction() as tx:
        tx.put_many([Event(b.encode()) for b in bodies])


def _sinks(address: str, names: tuple[str, ...], pipeline: int) -> list[Downstream]:
    return [Downstream(name, ForwardSinkSettings(type="forward", channel="events", address=address,
                                                 downstream_channel="events", batch_size=10, linger=0, timeout=5,
                                                 pipeline=pipeline)) for name in names]


def _held(agent: Any) -> list[str]:
    bodies: list[str] = []
    with AgentClient(f"127.0.0.1:{agent.config.agent.grpc.port}") as client:
        while True:
            with client.open_take("events", 1000) as take:
                if not take.events:
                    return bodies
                bodies += [e.body.decode() for e in take.events]


class Script:
    """Records every put (sink, batch id, bodies) of the group's sinks; ``act(sink, batch number,
    attempt)`` returns None (the put goes through), "lost ack" (stored, then the answer is lost),
    or "refused" (no connection). The second batch's first put waits until the third batch's
    first put has ended, so a later batch is answered while an earlier one is still in flight."""

    def __init__(self, group: SinkGroup, act: Any) -> None:
        self.calls: list[tuple[str, str, list[str]]] = []
        self.order: list[str] = []  # batch ids in the order of their first put
        self.sent: list[str] = []  # batch ids in the order the group sent them (first puts and retries)
        self.takes: list[int] = []  # the records' take numbers, in the order of their first put
        self.third_done = threading.Event()
        self._lock = threading.Lock()
        for sink in group.sinks:
            sink.put = self._wrap(group, sink, sink.put, act)  # type: ignore[method-assign]
        send = group._send

        def sending(slot: Any, sink: Downstream) -> None:
            self.sent.append(slot.record.batch_id)
            if slot.record.take not in self.takes:
                self.takes.append(slot.record.take)
            send(slot, sink)

        group._send = sending  # type: ignore[method-assign]

    def _wrap(self, group: SinkGroup, sink: Downstream, real: Any, act: Any) -> Any:
        def put(columns: EventColumns, batch_id: str) -> Any:
            assert batch_id == forward_batch_id(group.channel.channel_id, columns.seqs[0], len(columns))
            with self._lock:
                if batch_id not in self.order:
                    self.order.append(batch_id)
                number, attempt = self.order.index(batch_id) + 1, sum(c[1] == batch_id for c in self.calls) + 1
                self.calls.append((sink.name, batch_id, [b.decode() for b in columns.bodies]))
            if (number, attempt) == (2, 1):
                assert self.third_done.wait(10), "the third batch was not put while the second was in flight"
            try:
                step = act(sink.name, number, attempt)
                if step == "refused":
                    raise _REFUSED
                result = real(columns, batch_id)
                if step == "lost ack":
                    raise _LOST_ACK
                return result
            finally:
                if (number, attempt) == (3, 1):
                    self.third_done.set()

        return put

    def check_ids(self) -> None:
        """Every put of a batch id carried the same events, and no event went out under two ids."""
        by_id: dict[str, list[str]] = {}
        for _sink, batch_id, bodies in self.calls:
            assert by_id.setdefault(batch_id, bodies) == bodies, f"{batch_id} was put with other events"
        owners = Counter(body for bodies in by_id.values() for body in bodies)
        assert max(owners.values()) == 1


def _forward_all(channel: FileChannel, group: SinkGroup) -> None:
    while len(channel) or group.slots:
        group.step()


@pytest.mark.parametrize("failure", ["lost ack", "refused"])
def test_a_failure_mid_pipeline_puts_the_failed_batches_again_in_order_with_their_ids(
        tmp_path: Path, aggregator: Any, failure: str) -> None:
    # The downstream fails the first put of batches 2, 3 and 4 (batch 2: stored and the answer
    # lost, or refused; the others refused) while three are in flight: the failed ones keep their
    # takes and are put again, each with its recorded id and events (in whatever order their
    # failures and the sink's penalty let them go: a held take needs no order at the head).
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    expected = [f"m{i:02d}" for i in range(60)]
    _put(channel, expected)
    (sink,) = _sinks(agg_setup.address, ("agg",), pipeline=3)
    group = SinkGroup("g", channel, [sink], Failover({}, ["agg"]), tmp_path / "state", min_penalty=0.01,
                      max_penalty=0.02)
    script = Script(group, lambda sink, number, attempt: None if attempt > 1 or number not in (2, 3, 4) else
                    failure if number == 2 else "refused")
    _forward_all(channel, group)
    script.check_ids()
    first = list(dict.fromkeys(script.sent))
    assert len(first) == 6  # 60 events in batches of 10: no batch got a second id
    puts = Counter(script.sent)
    assert [puts[batch_id] for batch_id in first] == [1, 2, 2, 2, 1, 1]  # each failed batch put once more
    # the failed batches kept their takes: nothing was taken (nor recorded) twice
    assert [slot_take for slot_take in script.takes] == sorted(set(script.takes)) and len(script.takes) == 6
    assert sink.stats()["duplicate_batches"] == (failure == "lost ack")  # only batch 2 was stored before
    assert sorted(_held(agg)) == expected  # each event once
    assert not list((tmp_path / "state").glob("inflight*"))
    channel.close()


def test_a_batch_acknowledged_while_an_earlier_one_fails_is_committed_and_the_earlier_one_fails_over(
        tmp_path: Path, aggregator: Any) -> None:
    agg_setup, agg = aggregator
    channel = edge_channel(tmp_path / "edge")
    expected = [f"p{i:02d}" for i in range(30)]
    _put(channel, expected)
    sinks = _sinks(agg_setup.address, ("primary", "secondary"), pipeline=3)
    group = SinkGroup("g", channel, sinks, Failover({"primary": 1}, ["primary", "secondary"]), tmp_path / "state",
                      min_penalty=0.01, max_penalty=0.02)
    # the primary stores the third batch, then refuses the second (certain): the second moves to
    # the secondary; the third is committed at the edge and never sent again
    script = Script(group, lambda sink, number, attempt: "refused" if (sink, number) == ("primary", 2) else None)
    _forward_all(channel, group)
    script.check_ids()
    second, third = script.order[1], script.order[2]
    assert [sink for sink, batch_id, _b in script.calls if batch_id == third] == ["primary"]
    assert [sink for sink, batch_id, _b in script.calls if batch_id == second] == ["primary", "secondary"]
    assert sum(s.stats()["duplicate_batches"] for s in sinks) == 0
    assert sorted(_held(agg)) == expected
    channel.close()


@pytest.mark.integration
def test_an_edge_killed_with_several_batches_in_flight_resends_each_under_its_recorded_id(tmp_path: Path) -> None:
    agg = FleetSetup(tmp_path / "agg", name="agg", grpc_port=free_port())
    edge = FleetSetup(tmp_path / "edge", name="edge", grpc_port=free_port(), extra=forward_sink(
        "up", agg.address, batch_size=150, linger=0.0, timeout=60, extra="pipeline = 3\n"))
    agg_proc, edge_proc = AgentProcess(agg).wait_ready(60), AgentProcess(edge).wait_ready(60)
    sizes = [100] + [150] * 9
    expected = [f"k10-{i}" for i in range(100)] + [f"k{b}-{i}" for b, n in enumerate(sizes) for i in range(n)]
    try:
        with AgentClient(edge.address, timeout=10) as client:
            client.put([Event(f"k10-{i}".encode()) for i in range(100)], channel="events", batch_id="p10")
        with AgentClient(agg.address, timeout=10) as client:  # the edge is connected to the aggregator
            wait_for(lambda: int(client.status("events")["queue_size"]) == 100, what="the first batch downstream")
        os.kill(agg_proc.proc.pid, signal.SIGSTOP)  # puts reach the aggregator and wait there
        state = edge.root / "state" / "sinks" / "up"
        with AgentClient(edge.address, timeout=10) as client:
            for b in range(10):  # the first in-flight batch holds 100 events: a fresh take (150) would differ
                client.put([Event(f"k{b}-{i}".encode()) for i in range(sizes[b])], channel="events",
                           batch_id=f"p{b}")
                if b < 3:
                    wait_for(lambda b=b: len(list(state.glob("inflight-*.json"))) == b + 1,
                             what=f"{b + 1} batches in flight")
        records = [json.loads(p.read_text()) for p in sorted(state.glob("inflight-*.json"))]
        edge_proc.kill()
        edge_proc.wait()
        os.kill(agg_proc.proc.pid, signal.SIGCONT)  # it may store the puts of the dead edge now
        assert all(r["in_doubt"] == "up" for r in records)
        edge_proc = AgentProcess(edge).wait_ready(60)
        with AgentClient(agg.address, timeout=10) as client:
            wait_for(lambda: int(client.status("events")["queue_size"]) >= len(expected), what="every event downstream")
        wait_for(lambda: not list(state.glob("inflight-*.json")), what="the records to be cleared")
    finally:
        os.kill(agg_proc.proc.pid, signal.SIGCONT)
        edge_proc.terminate()
        agg_proc.terminate()
    held = Counter(e.body.decode() for e in drain(agg.channel_settings()))
    assert sorted(held) == sorted(expected) and max(held.values()) == 1
    with FileChannel(**agg.channel_settings()) as channel:  # each in-doubt batch was stored under its recorded id
        assert all(channel.find_tag(r["batch_id"]) is not None for r in records)


@pytest.mark.parametrize("arrow", [True, False])  # False: the core install, without the spark extra
@pytest.mark.parametrize("size", [5, 300])  # below and above the vectorized take's shortest run
def test_the_sink_take_gives_the_events_of_take_columns(tmp_path: Path, size: int, arrow: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest_toolkit.collect.sinks import take as take_module
    from ingest_toolkit.collect.sinks.take import take_batch

    if not arrow:
        monkeypatch.setattr(take_module, "arrow_available", lambda: False)
    channel = edge_channel(tmp_path / "edge")
    events = [Event(f"t{i}".encode() * (i % 7), {} if i % 3 else {"ingest.hops": str(i % 4), "k": f"v{i}"})
              for i in range(size)]
    with channel.transaction() as tx:
        tx.put_many(events)
    with channel.transaction() as tx:
        expected = tx.take_columns(size)
        tx.rollback()
    with channel.transaction() as tx:
        got = take_batch(tx, size)
        tx.rollback()
    assert got == expected
    with channel.transaction() as tx:  # header-less events: no header columns at all
        tx.take(size)
    _put(channel, [f"b{i}" for i in range(size)])
    with channel.transaction() as tx:
        expected = tx.take_columns(size)
        tx.rollback()
    with channel.transaction() as tx:
        got = take_batch(tx, size)
    assert got.bodies == expected.bodies and got.seqs == expected.seqs and not got.header_keys
    channel.close()


def test_a_partial_batch_grows_while_a_put_is_in_flight_and_a_full_one_goes_at_once(tmp_path: Path) -> None:
    from ingest_toolkit.rpc.client import PutAck

    channel = edge_channel(tmp_path / "edge")
    sink = Downstream("agg", ForwardSinkSettings(type="forward", channel="events", address="127.0.0.1:9",
                                                 downstream_channel="events", batch_size=50, linger=0, pipeline=3))
    group = SinkGroup("g", channel, [sink], Failover({}, ["agg"]), tmp_path / "state", min_penalty=0.01,
                      max_penalty=0.02)
    release, sizes = threading.Event(), []

    def put(columns: EventColumns, batch_id: str) -> PutAck:
        sizes.append(len(columns))
        assert release.wait(10)
        return PutAck(len(columns), False, ("events",))

    sink.put = put  # type: ignore[method-assign]
    _put(channel, [f"a{i}" for i in range(10)])
    group.step()  # nothing in flight: the partial batch goes (linger 0)
    for n in range(3):
        _put(channel, [f"b{n}-{i}" for i in range(10)])
        group.step()
    assert len(group.slots) == 1 and len(channel) == 30  # the next batch waits to fill up
    _put(channel, [f"c{i}" for i in range(20)])
    group.step()  # a full batch is due at once, in flight or not
    assert len(group.slots) == 2 and len(channel) == 0
    release.set()
    _forward_all(channel, group)
    assert sizes == [10, 50] and group.stats()["events"] == 60
    group.stop()
    channel.close()
