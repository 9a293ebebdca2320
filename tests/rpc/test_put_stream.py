"""The ordered put stream (``PutStream``): batches committed in the order sent, acknowledged
after their commit, a failure ending the stream with every acknowledged batch stored and nothing
after it. Against a real agent server on 127.0.0.1."""

from __future__ import annotations

import threading

import pytest

from ingest_toolkit.channel import EventColumns
from ingest_toolkit.errors import ChannelFullError
from ingest_toolkit.rpc import AuthenticationError, InvalidRequestError
from tests.rpc.conftest import Agent, StartAgent, wait_threads_gone
from tests.rpc.test_columns_and_stream_reuse import columns


def _taken(agent: Agent, name: str = "events") -> list[bytes]:
    ch, bodies = agent.channels[name], []
    while True:
        with ch.transaction() as tx:
            got = tx.take_columns(10_000)
        if not got.bodies:
            return bodies
        bodies += got.bodies


def test_batches_are_committed_in_the_order_sent_and_acked_after_their_commit(agent: Agent) -> None:
    client = agent.client()
    ch = agent.channels["events"]
    batches = [(columns(i * 10, i * 10 + 10, headers=i % 2 == 0), f"b-{i}") for i in range(30)]
    stored_at_ack = []
    for ack in client.put_stream(batches, channel="events", window=4):
        stored_at_ack.append(len(ch))
        assert (ack.accepted, ack.duplicate, ack.channels) == (10, False, ("events",))
    # each ack came after its batch's commit: the channel held at least that many events
    assert all(stored >= 10 * (i + 1) for i, stored in enumerate(stored_at_ack))
    with ch.transaction() as tx:
        taken = tx.take_columns(10_000)
    assert taken.bodies == columns(0, 300).bodies  # FIFO across batches: the order of the stream
    assert taken.events()[0].headers == {"host": "web-1", "i": "0"} and taken.events()[10].headers == {}


def test_a_repeated_batch_id_on_the_stream_is_stored_once(agent: Agent) -> None:
    client = agent.client()
    first = list(client.put_stream([(columns(0, 5), "dup-1"), (columns(5, 10), "dup-2")], channel="events"))
    again = list(client.put_stream([(columns(5, 10), "dup-2"), (columns(10, 15), "dup-3")], channel="events"))
    assert [a.duplicate for a in first] == [False, False] and [a.duplicate for a in again] == [True, False]
    assert _taken(agent) == columns(0, 15).bodies


def test_a_failing_batch_ends_the_stream_after_the_acked_ones_and_stores_nothing_after_it(
        start_agent: StartAgent) -> None:
    agent = start_agent(capacity=25)
    client = agent.client()
    acks = []
    with pytest.raises(ChannelFullError):
        for ack in client.put_stream(((columns(i * 10, i * 10 + 10), f"f-{i}") for i in range(6)),
                                     channel="events", window=3):
            acks.append(ack)
    assert len(acks) == 2  # 20 events fit, the third batch does not
    assert _taken(agent) == columns(0, 20).bodies  # nothing sent after the failure was stored
    wait_threads_gone("put-stream")  # the agent's threads of the stream (rpc/ordered.py)


def test_a_batch_that_cannot_be_sent_raises_after_the_acks_before_it(agent: Agent) -> None:
    client = agent.client()
    bad = EventColumns([b"a", b"b"], [0, 0], [1, 1], ["k"], ["v"])  # counts add up to 2, one key
    batches = [(columns(0, 5), None), (columns(5, 10), None), (bad, None), (columns(10, 15), None)]
    acks = []
    with pytest.raises(InvalidRequestError, match="header counts"):
        for ack in client.put_stream(batches, channel="events"):
            acks.append(ack)
    assert len(acks) == 2
    assert _taken(agent) == columns(0, 10).bodies


def test_the_stream_needs_the_token(start_agent: StartAgent) -> None:
    agent = start_agent(token="s3cret")
    with pytest.raises(AuthenticationError, match="bearer token"):
        list(agent.client().put_stream([(columns(0, 3), None)], channel="events"))
    assert len(agent.channels["events"]) == 0
    assert len(list(agent.client(token="s3cret").put_stream([(columns(0, 3), None)], channel="events"))) == 1


def test_no_more_than_the_window_is_in_flight(agent: Agent) -> None:
    client = agent.client()
    pulled, lock = [], threading.Lock()
    acked = []

    def batches():
        for i in range(12):
            with lock:
                pulled.append(i)
                ahead = len(pulled) - len(acked)
            assert ahead <= 2 + 1, f"{ahead} batches read ahead of the acks"  # the window, plus one being built
            yield columns(i, i + 1), None

    for ack in client.put_stream(batches(), channel="events", window=2):
        with lock:
            acked.append(ack)
    assert len(acked) == 12 and _taken(agent) == columns(0, 12).bodies


def test_a_client_that_stops_reading_cancels_the_stream(agent: Agent) -> None:
    client = agent.client()
    stream = client.put_stream(((columns(i, i + 1), f"c-{i}") for i in range(1000)), channel="events", window=2)
    assert next(stream).accepted == 1
    stream.close()  # the caller stops reading: the call is cancelled, nothing more is sent
    stored = len(agent.channels["events"])
    assert 1 <= stored <= 3  # the acked batch, and at most the window that was in flight
    client.put_columns(columns(0, 1), channel="events", batch_id="after")  # the client still works
    wait_threads_gone("put-stream")  # the agent's threads of the stream (rpc/ordered.py)


def test_batches_read_ahead_are_not_stored_after_a_failure_even_when_they_fit(start_agent: StartAgent) -> None:
    """The agent reads the next batches while one commits; the first failure still ends the
    stream there: a later, smaller batch that would fit is not stored."""
    agent = start_agent(capacity=25)
    sizes = [10, 10, 10, 1, 1, 1]  # the third does not fit; the ones after it would
    at = [sum(sizes[:i]) for i in range(len(sizes))]
    batches = [(columns(a, a + k), f"r-{i}") for i, (a, k) in enumerate(zip(at, sizes, strict=True))]
    with pytest.raises(ChannelFullError):
        list(agent.client().put_stream(batches, channel="events", window=6))
    assert _taken(agent) == columns(0, 20).bodies
    wait_threads_gone("put-stream")  # the agent's threads of the stream (rpc/ordered.py)
