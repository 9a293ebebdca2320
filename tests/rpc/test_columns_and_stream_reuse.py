"""The columnar put and the take stream reused per lease (``End.take_next``), against a real agent."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingest_toolkit.channel import Event, EventColumns, TxnState
from ingest_toolkit.cli import main
from ingest_toolkit.rpc import InvalidRequestError
from ingest_toolkit.rpc.proto import agent_pb2 as pb
from ingest_toolkit.rpc.service import AgentService
from ingest_toolkit.rpc.wire import decode_taken, payload_chunks
from tests.rpc.conftest import Agent, StartAgent


def columns(start: int, stop: int, *, headers: bool = False) -> EventColumns:
    n = stop - start
    bodies = [f"e{i:05d}".encode() for i in range(start, stop)]
    if not headers:
        return EventColumns(bodies, [0] * n, [0] * n)
    return EventColumns(bodies, [0] * n, [2] * n, ["host", "i"] * n,
                        [v for i in range(start, stop) for v in ("web-1", str(i))])


def test_put_columns_stores_bodies_and_headers_durably_before_the_ack(agent: Agent) -> None:
    client = agent.client()
    ack = client.put_columns(columns(0, 5, headers=True), channel="events", batch_id="b-1")
    assert (ack.accepted, ack.duplicate, ack.channels) == (5, False, ("events",))
    assert len(agent.channels["events"]) == 5
    again = client.put_columns(columns(0, 5, headers=True), channel="events", batch_id="b-1")
    assert (again.accepted, again.duplicate) == (5, True)  # batch-id dedup holds for columns
    client.put_columns(columns(5, 7), channel="events")
    with client.open_take("events", 100) as take:
        events = take.events
    assert [e.body for e in events] == columns(0, 7).bodies
    assert [e.headers for e in events[:2]] == [{"host": "web-1", "i": "0"}, {"host": "web-1", "i": "1"}]
    assert [e.headers for e in events[5:]] == [{}, {}]


def test_put_columns_refuses_header_columns_that_disagree_before_sending(agent: Agent) -> None:
    client = agent.client()
    bad = EventColumns([b"a", b"b"], [0, 0], [1, 1], ["k"], ["v"])  # counts add up to 2, one key
    with pytest.raises(InvalidRequestError, match="header counts"):
        client.put_columns(bad, channel="events")
    assert len(agent.channels["events"]) == 0


def test_commit_and_take_reuses_one_stream_and_commits_each_batch(agent: Agent) -> None:
    client = agent.client()
    client.put_columns(columns(0, 25), channel="events")
    ch = agent.channels["events"]
    take = client.open_take("events", 10)
    seen = list(take.columns.bodies)
    streams = {id(take._txn._stream)}
    take = take.commit_and_take(10)
    assert ch.stats()["takes_committed"] == 10  # durable before the next batch came back
    assert len(agent.service.leases) == 1  # the committed transaction's lease is gone
    while len(take.columns):
        streams.add(id(take._txn._stream))
        seen += take.columns.bodies
        take = take.commit_and_take(10)
    take.commit()
    assert seen == columns(0, 25).bodies
    assert len(streams) == 1
    assert ch.stats()["takes_committed"] == 25 and len(ch) == 0


def test_the_next_take_rolls_back_when_the_client_drops_it(agent: Agent) -> None:
    client = agent.client()
    client.put_columns(columns(0, 6), channel="events")
    first = client.open_take("events", 2)
    second = first.commit_and_take(3)
    assert second.columns.bodies == columns(2, 5).bodies
    second.rollback()
    assert second.state is TxnState.ROLLED_BACK
    with client.open_take("events", 100) as rest:
        assert rest.columns.bodies == columns(2, 6).bodies
    third = client.open_take("events", 5)
    fourth = third.commit_and_take(5)  # the channel is empty: an empty take, still open
    fourth._txn.discard()  # client gone without a word: the agent rolls back, nothing leaks
    deadline = time.monotonic() + 5
    while len(agent.service.leases) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(agent.service.leases) == 0


def test_commit_and_take_falls_back_to_a_new_stream_on_an_agent_without_take_next(
        start_agent: StartAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AgentService, "_take_next", lambda self, *args: None)  # as an older agent
    agent = start_agent()
    client = agent.client()
    client.put_columns(columns(0, 4), channel="events")
    first = client.open_take("events", 2)
    second = first.commit_and_take(2)
    assert first.state is TxnState.COMMITTED
    assert second.columns.bodies == columns(2, 4).bodies
    assert second._txn._stream is not first._txn._stream
    second.commit()
    assert len(agent.channels["events"]) == 0


def test_send_puts_lines_as_columns_with_headers_batches_and_ids(agent: Agent, tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"a\nb\r\nc\nlast-without-newline")
    args = ["send", str(lines), "--agent", agent.server.address, "--channel", "events", "--batch-size", "3",
            "--header", "host=web-1", "--header", "env=prod", "--batch-id", "f1", "--retries", "0"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "sent 4 events in 2 batches: 4 accepted" in result.output
    again = CliRunner().invoke(main, args)  # the same batch ids: nothing stored twice
    assert "2 duplicate batches (4 events already stored)" in again.output, again.output
    with agent.client().open_take("events", 100) as take:
        events = take.events
    assert [e.body for e in events] == [b"a", b"b", b"c", b"last-without-newline"]
    assert all(e.headers == {"host": "web-1", "env": "prod"} for e in events)


def _peek(agent: Agent) -> tuple[list[bytes], EventColumns]:
    """The queue's PUT payloads as stored and its events as a local take decodes them, each from a
    take that is rolled back (nothing is taken)."""
    ch = agent.channels["events"]
    tx = ch.transaction()
    payloads, _seqs = tx.take_payloads(1000)
    tx.rollback()
    tx = ch.transaction()
    columns = tx.take_columns(1000)
    tx.rollback()
    return payloads, columns


def test_a_remote_take_receives_the_stored_payloads_and_decodes_them_as_a_local_take_would(
        agent: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    client = agent.client()
    client.put_columns(columns(0, 5, headers=True), channel="events")
    client.put_columns(columns(5, 8), channel="events")
    client.put([Event(b""), Event(b"", {"only": "headers"}), Event(b"x" * 70_000, {"k" * 200: "v"})],
               channel="events")
    stored, expected = _peek(agent)
    sent: list[pb.EventBatch] = []
    real = AgentService._take_payloads

    def spy(self: AgentService, payloads: list[bytes], seqs: list[int]) -> list[pb.TxnResponse]:
        responses = real(self, payloads, seqs)
        sent.extend(r.chunk.events for r in responses)
        return responses

    monkeypatch.setattr(AgentService, "_take_payloads", spy)
    with client.open_take("events", 1000) as take:
        got = take.columns
    assert [list(b.payloads) for b in sent] == [stored] and not any(b.bodies for b in sent)
    assert (got.bodies, got.header_counts, got.header_keys, got.header_values) == (
        expected.bodies, expected.header_counts, expected.header_keys, expected.header_values)
    assert got.seqs == expected.seqs and len(got) == 11


def test_a_client_that_does_not_ask_for_payloads_gets_bodies_and_header_columns(agent: Agent) -> None:
    # What an older client (no Begin.payloads) receives: the agent decodes, as before.
    client = agent.client()
    client.put_columns(columns(0, 6, headers=True), channel="events")
    stream = client.stream()
    stream.send(pb.TxnRequest(begin=pb.Begin(channel="events", lease_seconds=30, take=100)))
    assert stream.recv("begin").WhichOneof("result") == "begun"
    chunk = stream.recv("take").chunk
    assert chunk.last and not chunk.events.payloads
    assert list(chunk.events.bodies) == columns(0, 6).bodies
    assert list(chunk.events.header_keys) == ["host", "i"] * 6
    stream.send(pb.TxnRequest(rollback=pb.End()))
    assert stream.recv("rollback").ended.state == pb.TXN_STATE_ROLLED_BACK
    stream.close()
    assert len(agent.channels["events"]) == 6


def test_payload_chunks_split_a_large_take_and_keep_every_event() -> None:
    payloads = [bytes([i % 256]) * (i * 37 % 5000) for i in range(400)]
    seqs = list(range(1, 401))
    chunks = list(payload_chunks(payloads, seqs, chunk_bytes=64 << 10))
    assert len(chunks) > 1 and all(chunk for chunk, _ in chunks)
    assert [p for chunk, _ in chunks for p in chunk] == payloads and [s for _, c in chunks for s in c] == seqs
    assert all(sum(map(len, chunk)) + 16 * len(chunk) < (64 << 10) + 5016 for chunk, _ in chunks)
    assert list(payload_chunks([], [])) == []


def test_a_payload_that_is_not_a_put_message_is_refused_naming_the_field() -> None:
    batch = pb.EventBatch(payloads=[b"\x0a\x01a", b"\xff\xff\xff"], seqs=[1, 2])
    with pytest.raises(InvalidRequestError, match=r"chunk.events.payloads: a payload is not a Put message"):
        decode_taken(batch)
    with pytest.raises(InvalidRequestError, match="2 payloads with 1 seqs"):
        decode_taken(pb.EventBatch(payloads=[b"", b""], seqs=[1]))
