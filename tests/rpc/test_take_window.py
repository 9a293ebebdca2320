"""Pipelined takes (``AgentClient.take_pipeline``, ``Begin.window``): several leased batches in
flight on one stream, exactly once and in order however the window ends."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from ingest_toolkit.channel import Event, TxnState
from ingest_toolkit.errors import IngestError, TransactionCapacityError, TransactionError
from ingest_toolkit.rpc import AgentClient, LeaseExpiredError, TakePipeline
from ingest_toolkit.rpc.proto import agent_pb2 as pb
from tests.agent.harness import AgentProcess, AgentSetup, drain
from tests.rpc.conftest import Agent, StartAgent, client_process
from tests.rpc.test_leases import wait_until


def evs(start: int, stop: int, headers: bool = False) -> list[Event]:
    return [Event(f"e{i:05d}".encode(), {"n": str(i), "h": "x"} if headers else {}) for i in range(start, stop)]


def bodies(client: AgentClient, channel: str = "events") -> list[bytes]:
    """Every queued event of ``channel``, taken and committed with one-batch takes."""
    out: list[bytes] = []
    while True:
        with client.open_take(channel, 1000) as take:
            if not take.events:
                return out
            out += [e.body for e in take.events]


def take_all(pipeline: TakePipeline) -> list[Event]:
    got: list[Event] = []
    for batch in pipeline:
        if not batch.columns:
            break
        got += batch.events
        batch.commit()
    return got


def test_pipelined_take_returns_every_event_once_in_order(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 1000, headers=True), channel="events")
    with client.take_pipeline("events", 37, window=4) as pipeline:
        assert pipeline.window == 4
        got = take_all(pipeline)
    assert [e.body for e in got] == [e.body for e in evs(0, 1000)]
    assert [e.headers for e in got] == [{"n": str(i), "h": "x"} for i in range(1000)]
    assert [e.seq for e in got] == sorted({e.seq for e in got})
    assert len(agent.channels["events"]) == 0
    assert wait_until(lambda: len(agent.service.leases) == 0) < 3.0


def test_pipeline_with_puts_meanwhile_and_other_takers_delivers_every_event_once(agent: Agent) -> None:
    client, other = agent.client(), agent.client()
    client.put(evs(0, 300), channel="events")
    stop, extra = threading.Event(), []

    def put_more() -> None:
        for i in range(300, 3000, 100):
            other.put(evs(i, i + 100), channel="events")
        stop.set()

    putter = threading.Thread(target=put_more)
    putter.start()
    got: list[bytes] = []
    with client.take_pipeline("events", 50, window=3) as pipeline:
        for batch in pipeline:
            if not batch.columns and stop.is_set():
                break
            got += [e.body for e in batch.events]
            batch.commit()
            with other.open_take("events", 7) as take:  # a second taker between the window's batches
                extra += [e.body for e in take.events]
    putter.join()
    rest = bodies(client)
    assert sorted(got + extra + rest) == [e.body for e in evs(0, 3000)]
    assert got == sorted(got)  # the window's own batches in queue order


def test_close_rolls_back_the_batches_in_flight_in_order(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 100), channel="events")
    with client.take_pipeline("events", 10, window=4) as pipeline:
        first = next(pipeline)
        first.commit()
        held = [next(pipeline), next(pipeline)]  # two handed out, two more received ahead
        wait_until(lambda: len(agent.channels["events"]) == 100 - 10 - 40)
    assert [b.state for b in held] == [TxnState.ROLLED_BACK] * 2
    assert bodies(client) == [e.body for e in evs(10, 100)]


def test_commit_out_of_take_order_is_refused(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 30), channel="events")
    with client.take_pipeline("events", 10, window=3) as pipeline:
        older, newer = next(pipeline), next(pipeline)
        with pytest.raises(TransactionError, match="cannot commit before batch 0"):
            newer.commit()
        assert newer.state is TxnState.OPEN
        wait_until(lambda: len(agent.channels["events"]) == 0)  # nothing committed: all three still held
        older.commit()
        newer.commit()
        with pytest.raises(TransactionError, match="already committed"):
            older.commit()
    assert bodies(client) == [e.body for e in evs(20, 30)]


def test_a_window_handed_out_whole_asks_for_a_commit_first(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 10), channel="events")
    with client.take_pipeline("events", 2, window=2) as pipeline:
        held = [next(pipeline), next(pipeline)]
        with pytest.raises(TransactionError, match="commit the oldest before asking for another"):
            next(pipeline)
        held[0].commit()
        assert [e.body for e in next(pipeline).events] == [b"e00004", b"e00005"]
    assert bodies(client) == [e.body for e in evs(2, 10)]


def test_batches_of_an_idle_channel_are_empty_until_events_arrive(agent: Agent) -> None:
    client = agent.client()
    with client.take_pipeline("events", 5, window=2) as pipeline:
        first = next(pipeline)
        assert len(first) == 0
        client.put(evs(0, 3), channel="events")
        first.commit()  # the batch that replaces it sees the new events
        second, third = next(pipeline), next(pipeline)
        assert len(second) == 0 and [e.body for e in third.events] == [e.body for e in evs(0, 3)]
        second.commit()
        third.commit()
    assert len(agent.channels["events"]) == 0


def test_lease_expiry_rolls_back_the_whole_window_in_order(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 40), channel="events")
    pipeline = client.take_pipeline("events", 10, window=3, lease_seconds=0.5)
    first = next(pipeline)
    first.commit()
    held = next(pipeline)
    wait_until(lambda: len(agent.channels["events"]) == 40 - 10 - 30)
    waited = wait_until(lambda: len(agent.channels["events"]) == 30)
    assert 0.3 < waited < 2.0, f"rolled back after {waited:.2f}s with a 0.5s lease"
    with pytest.raises(LeaseExpiredError, match="lease of 0.5s expired"):
        held.commit()
    assert held.state is TxnState.ROLLED_BACK
    pipeline.close()
    assert bodies(client) == [e.body for e in evs(10, 40)]


def test_commits_renew_the_lease_of_the_window(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 12), channel="events")
    with client.take_pipeline("events", 1, window=3, lease_seconds=0.4) as pipeline:
        for _ in range(6):  # 1.2 s, a commit every 0.2 s
            batch = next(pipeline)
            threading.Event().wait(0.2)
            batch.commit()
    assert bodies(client) == [e.body for e in evs(6, 12)]


def test_a_window_counts_as_one_open_transaction_and_ends_with_its_stream(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 20), channel="events")
    pipeline = client.take_pipeline("events", 5, window=3)
    assert client.status("events")["remote_transactions"]["open"] == 1
    next(pipeline)
    client.close()  # the client is gone: the agent rolls the window back at once
    assert wait_until(lambda: len(agent.channels["events"]) == 20) < 3.0
    assert wait_until(lambda: len(agent.service.leases) == 0) < 3.0
    assert bodies(agent.client()) == [e.body for e in evs(0, 20)]


def test_window_is_capped_and_requests_other_than_commit_are_refused(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 100), channel="events")
    stream = client.stream()
    stream.send(pb.TxnRequest(begin=pb.Begin(channel="events", take=1, window=1000, payloads=True)))
    assert stream.recv("begin").begun.window == 16
    chunks = [stream.recv("take") for _ in range(16)]
    assert [c.chunk.last for c in chunks] == [True] * 16
    stream.send(pb.TxnRequest(take=pb.Take(max_events=5)))
    refused = stream.recv("take").failure
    assert refused.kind == "InvalidRequestError" and refused.state == pb.TXN_STATE_OPEN
    stream.send(pb.TxnRequest(commit=pb.End()))  # commits the oldest, takes none in its place
    assert stream.recv("commit").ended.state == pb.TXN_STATE_COMMITTED
    stream.send(pb.TxnRequest(rollback=pb.End()))
    assert stream.recv("rollback").ended.state == pb.TXN_STATE_ROLLED_BACK
    assert stream.recv_or_end("end") is None
    stream.close()
    assert bodies(client) == [e.body for e in evs(1, 100)]


@pytest.mark.integration
def test_sigkilled_client_with_a_full_window_gets_every_batch_back_in_order(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 200), channel="events")
    with client_process("take_window_child.py", agent.server.address, "20", "4", "2") as child:
        assert child.stdout is not None
        committed = [int(s) for s in child.stdout.readline().split()[1:]]
        held = [int(s) for s in child.stdout.readline().split()[1:]]
        assert len(committed) == 40 and len(held) == 80, (committed, held)
        wait_until(lambda: len(agent.channels["events"]) == 200 - 40 - 80)  # the 4 held
        os.kill(child.pid, signal.SIGKILL)
        child.wait(5)
    wait_until(lambda: len(agent.channels["events"]) == 160, timeout=3.0)
    with client.open_take("events", 1000) as again:
        assert [e.body for e in again.events] == [e.body for e in evs(40, 200)]
        assert [e.seq for e in again.events[:80]] == held


@pytest.mark.integration
def test_sigkilled_agent_with_a_full_window_has_every_uncommitted_event_in_order(tmp_path: Path) -> None:
    setup = AgentSetup(tmp_path)  # checkpoint_interval 2 s: a checkpoint is written while the window is open
    agent = AgentProcess(setup).wait_ready()
    try:
        with AgentClient(agent.grpc_address) as client:
            for i in range(0, 2000, 500):
                client.put(evs(i, i + 500), channel="events")
            pipeline = client.take_pipeline("events", 100, window=4, lease_seconds=600)
            for _ in range(3):
                next(pipeline).commit()
            held = [next(pipeline) for _ in range(4)]
            assert sum(map(len, held)) == 400
            meta = setup.checkpoint_dir() / "checkpoint.meta"
            before = meta.stat().st_mtime_ns if meta.exists() else 0
            wait_until(lambda: meta.exists() and meta.stat().st_mtime_ns != before, timeout=10.0)
            agent.kill()  # SIGKILL, with the window open
    finally:
        if agent.proc.poll() is None:  # a failed assertion leaves no agent behind
            agent.kill()
    assert [e.body for e in drain(setup.channel_settings())] == [e.body for e in evs(300, 2000)]


def test_a_commit_whose_answer_never_comes_is_unknown_and_the_window_rolls_back(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 10), channel="events")
    pipeline = client.take_pipeline("events", 5, window=2)
    batch = next(pipeline)
    agent.server.stop(grace=0.2)  # the stream is cancelled: the agent rolls the window back
    with pytest.raises(IngestError):
        batch.commit()
    assert batch.state is TxnState.UNKNOWN
    assert wait_until(lambda: len(agent.channels["events"]) == 10) < 3.0
    with pytest.raises(StopIteration):
        next(pipeline)


def test_a_batch_above_the_transaction_capacity_is_refused_at_begin(start_agent: StartAgent) -> None:
    agent = start_agent(transaction_capacity=10)
    client = agent.client()
    with pytest.raises(TransactionCapacityError) as info:
        client.take_pipeline("events", 11, window=2)
    assert info.value.capacity == 10
    assert wait_until(lambda: len(agent.service.leases) == 0) < 3.0
    with client.take_pipeline("events", 10, window=2) as pipeline:
        assert len(next(pipeline)) == 0
