"""Puts, remote takes, status and batch-id dedup through a real agent server on 127.0.0.1."""

from __future__ import annotations

import threading
import time

from ingest_toolkit.channel import Event, TxnState
from ingest_toolkit.land.source import TakeBatch, TakeSource
from ingest_toolkit.rpc import RemoteSource, RemoteTake
from tests.rpc.conftest import Agent, StartAgent


def evs(start: int, stop: int, **headers: str) -> list[Event]:
    return [Event(f"e{i:05d}".encode(), dict(headers)) for i in range(start, stop)]


def bodies(events: list[Event]) -> list[bytes]:
    return [e.body for e in events]


def test_put_is_committed_when_acknowledged_and_take_commit_removes(agent: Agent) -> None:
    client = agent.client()
    ack = client.put(evs(0, 10), channel="events")
    assert (ack.accepted, ack.duplicate, ack.channels) == (10, False, ("events",))
    assert len(agent.channels["events"]) == 10  # durable and queued before the ack came back
    take = client.open_take("events", 4)
    assert isinstance(take, RemoteTake)
    assert bodies(take.events) == bodies(evs(0, 4))
    assert take.channel_id == agent.channels["events"].channel_id
    assert len(agent.channels["events"]) == 6  # invisible to other takers while open
    take.commit()
    assert take.state is TxnState.COMMITTED
    assert agent.channels["events"].stats()["takes_committed"] == 4
    with client.open_take("events", 100) as rest:
        assert bodies(rest.events) == bodies(evs(4, 10))
    assert len(agent.channels["events"]) == 0


def test_rollback_returns_events_to_the_head_in_order(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 6), channel="events")
    take = client.open_take("events", 4)
    client.put(evs(6, 8), channel="events")  # committed while the take is open
    take.rollback()
    assert take.state is TxnState.ROLLED_BACK
    with client.open_take("events", 100) as again:
        assert bodies(again.events) == bodies(evs(0, 8))


def test_exception_inside_take_context_rolls_back(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 3), channel="events")
    try:
        with client.open_take("events", 3):
            raise RuntimeError("landing failed")
    except RuntimeError:
        pass
    assert len(agent.channels["events"]) == 3


def test_fifo_across_batches_headers_seqs_and_many_chunks(start_agent: StartAgent) -> None:
    agent = start_agent(transaction_capacity=5000, capacity=100_000)
    agent.service._chunk_bytes = 4096  # force many chunks per take
    client = agent.client()
    sent = [Event(bytes([i % 256]) * (i % 700), {"i": str(i), "x": "y" * (i % 3)} if i % 4 else {})
            for i in range(3000)]
    for start in range(0, 3000, 1000):
        client.put(sent[start:start + 1000], channel="events")
    got: list[Event] = []
    while True:
        with client.open_take("events", 1200) as take:
            if not take.events:
                break
            got.extend(take.events)
    assert [(e.body, dict(e.headers)) for e in got] == [(e.body, dict(e.headers)) for e in sent]
    seqs = [e.seq for e in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_empty_take_and_default_pipeline(agent: Agent) -> None:
    client = agent.client()
    with client.open_take("events", 10) as take:
        assert take.events == []
    ack = client.put(evs(0, 2))  # no channel: the agent's default pipeline
    assert ack.channels == ("events",) and len(agent.channels["events"]) == 2


def test_batch_id_dedup_through_the_service(agent: Agent) -> None:
    client = agent.client()
    first = client.put(evs(0, 5), channel="events", batch_id="host-a/0001")
    retry = client.put(evs(0, 5), channel="events", batch_id="host-a/0001")
    other = client.put(evs(5, 7), channel="events", batch_id="host-a/0002")
    assert (first.accepted, first.duplicate) == (5, False)
    assert (retry.accepted, retry.duplicate, retry.channels) == (5, True, ())  # as the agent's pipeline answers
    assert (other.accepted, other.duplicate) == (2, False)
    with client.open_take("events", 100) as take:
        assert bodies(take.events) == bodies(evs(0, 7))


def test_concurrent_retries_of_one_batch_store_it_once(agent: Agent) -> None:
    client = agent.client()
    acks = []
    barrier = threading.Barrier(6)

    def send() -> None:
        barrier.wait()
        acks.append(client.put(evs(0, 50), channel="events", batch_id="same-batch"))

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(a.duplicate for a in acks) == [False] + [True] * 5
    assert len(agent.channels["events"]) == 50


def test_status_holds_checkpoint_meta_and_live_counters(agent: Agent) -> None:
    client = agent.client()
    channel = agent.channels["events"]
    client.put(evs(0, 7), channel="events")
    channel.checkpoint()
    client.put(evs(7, 9), channel="events")
    take = client.open_take("events", 3)
    status = client.status("events")
    assert status["channel"] == "events"
    assert status["channel_id"] == channel.channel_id.hex()
    assert status["queue_size"] == 6
    checkpoint = status["checkpoint"]
    assert checkpoint["queue_size"] == 7 and checkpoint["puts_committed"] == 7  # as of the checkpoint
    assert checkpoint["path"].endswith("checkpoint.meta") and checkpoint["age_seconds"] >= 0
    assert set(checkpoint) >= {"log_refcounts", "takes_committed", "capacity", "backlog_age_seconds"}
    live = status["live"]
    assert live["puts_committed"] == 9 and live["queue_size"] == 6 and live["open_transactions"] == 1
    # how far back the channel's batch ids reach: a day, its retention, as its window is not full
    assert 0 <= time.time_ns() - live["tags_since_unix_ns"] - 86_400 * 10**9 < 60 * 10**9
    assert status["remote_transactions"]["open"] == 1
    take.rollback()


def test_remote_source_is_a_take_source(start_agent: StartAgent) -> None:
    agent = start_agent(transaction_capacity=4)
    client = agent.client()
    for start in range(0, 12, 4):
        client.put(evs(start, start + 4), channel="events")
    source = RemoteSource(client, "events", lease_seconds=10)
    assert isinstance(source, TakeSource)
    assert source.name == "events" and source.backlog() == 12
    batch = source.open_take(3)
    assert isinstance(batch, TakeBatch)
    assert [e.seq for e in batch.events] == sorted(e.seq for e in batch.events)
    assert source.backlog() == 9
    batch.commit()
    assert source.backlog() == 9
    big = source.open_take(1000)  # capped at transaction_capacity, as in-process
    assert bodies(list(big.events)) == bodies(evs(3, 7))
    big.rollback()


def test_concurrent_putters_and_takers_deliver_every_event_once(agent: Agent) -> None:
    """3 putter threads (with batch ids, each batch sent twice) and 3 taker threads on one client."""
    client = agent.client()
    taken: list[Event] = []
    guard, done = threading.Lock(), threading.Event()

    def putter(p: int) -> None:
        for b in range(20):
            batch = [Event(f"p{p}-b{b:02d}-{i}".encode()) for i in range(25)]
            client.put(batch, channel="events", batch_id=f"p{p}/{b}")
            client.put(batch, channel="events", batch_id=f"p{p}/{b}")  # a retry: stored once

    def taker() -> None:
        while not done.is_set() or len(agent.channels["events"]):
            with client.open_take("events", 40) as take:
                with guard:
                    taken.extend(take.events)

    putters = [threading.Thread(target=putter, args=(p,)) for p in range(3)]
    takers = [threading.Thread(target=taker) for _ in range(3)]
    for t in putters + takers:
        t.start()
    for t in putters:
        t.join()
    done.set()
    for t in takers:
        t.join()
    got = [e.body for e in taken]
    assert len(got) == len(set(got)) == 3 * 20 * 25
    for p in range(3):  # each putter's events were taken in its put order
        mine = [b for b in sorted(taken, key=lambda e: e.seq) if b.body.startswith(f"p{p}-".encode())]
        assert [e.body for e in mine] == [f"p{p}-b{b:02d}-{i}".encode() for b in range(20) for i in range(25)]


def test_status_of_a_damaged_checkpoint_meta_still_answers_with_the_live_counters(agent: Agent) -> None:
    """checkpoint.meta damaged under a running agent: status answers (the live counters, the reason),
    the next checkpoint rewrites the file."""
    import os

    client = agent.client()
    channel = agent.channels["events"]
    client.put(evs(0, 4), channel="events")
    channel.checkpoint()
    with open(os.path.join(channel.config.checkpoint_dir, "checkpoint.meta"), "r+b") as meta:
        meta.seek(10)
        meta.write(b"\xff\xff\xff\xff")
    status = client.status("events")
    assert status["checkpoint"] is None and "checkpoint.meta" in status["checkpoint_error"]
    assert status["live"]["queue_size"] == 4
    channel.checkpoint()
    assert client.status("events")["checkpoint"]["queue_size"] == 4


def test_status_before_the_first_checkpoint_and_of_each_channel(start_agent: StartAgent) -> None:
    agent = start_agent(("events", "audit"))
    client = agent.client()
    client.put(evs(0, 2), channel="audit")
    audit, events = client.status("audit"), client.status("events")
    assert audit["queue_size"] == 2 and events["queue_size"] == 0
    assert audit["channel_id"] != events["channel_id"]
    for status in (audit, events):
        assert status["checkpoint"] is None or status["checkpoint"]["queue_size"] == 0
