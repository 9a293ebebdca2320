"""Every numeric field of every request is checked at the edge, over a real server (issue 21,
item 6): an impossible number is INVALID_ARGUMENT naming the field, logged as one WARNING line,
and never granted (a NaN lease) nor reported as an unexpected failure with a traceback."""

from __future__ import annotations

import logging
import math

import grpc
import pytest

from ingest_toolkit.channel import Event, TxnState
from ingest_toolkit.errors import TransactionCapacityError
from ingest_toolkit.rpc import InvalidRequestError
from ingest_toolkit.rpc.proto import agent_pb2 as pb
from ingest_toolkit.rpc.proto import agent_pb2_grpc as pb_grpc
from tests.rpc.conftest import Agent

BAD_LEASES = [math.nan, math.inf, -math.inf, -1.0, -1e-9]
SERVICE = "/ingest_toolkit.agent.v1.Agent/"


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The one-line WARNINGs of the records; fails on any record at ERROR or with a traceback."""
    bad = [(r.name, r.levelname, r.getMessage()[:200]) for r in caplog.records
           if r.levelno >= logging.ERROR or r.exc_info is not None]
    assert not bad, bad
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert all("\n" not in line for line in lines), lines
    return lines


def one_line(err: BaseException) -> str:
    message = str(err)
    assert "\n" not in message and "Traceback" not in message, message
    return message


@pytest.mark.parametrize("lease", BAD_LEASES, ids=repr)
def test_begin_with_an_impossible_lease_is_refused(agent: Agent, caplog: pytest.LogCaptureFixture,
                                                   lease: float) -> None:
    client = agent.client()
    client.put([Event(b"kept")], channel="events")
    with caplog.at_level(logging.WARNING), pytest.raises(InvalidRequestError) as info:
        client.open_take("events", 1, lease_seconds=lease)
    message = one_line(info.value)
    assert message.startswith(f"begin.lease_seconds must be a finite number of seconds >= 0, got {lease!r}"), message
    [line] = refusals(caplog)
    assert line.startswith("refused begin transaction from ") and message in line, line
    assert len(agent.service.leases) == 0 and len(agent.channels["events"]) == 1  # nothing taken, nothing held


@pytest.mark.parametrize("lease", BAD_LEASES, ids=repr)
def test_extend_with_an_impossible_lease_is_refused_and_the_transaction_stays_usable(
        agent: Agent, caplog: pytest.LogCaptureFixture, lease: float) -> None:
    client = agent.client()
    client.put([Event(b"a"), Event(b"b")], channel="events")
    take = client.open_take("events", 2, lease_seconds=30)
    with caplog.at_level(logging.WARNING), pytest.raises(InvalidRequestError) as info:
        take.extend(lease)
    message = one_line(info.value)
    assert message.startswith(f"extend.lease_seconds must be a finite number of seconds >= 0, got {lease!r}"), message
    [line] = refusals(caplog)
    assert line.startswith("refused a request in remote transaction ") and message in line, line
    assert take.state is TxnState.OPEN and take.lease_seconds == 30
    assert take.extend() == 30  # the lease was not touched by the refused request
    take.commit()
    assert take.state is TxnState.COMMITTED and len(agent.channels["events"]) == 0


def test_large_finite_leases_are_capped_not_refused(agent: Agent) -> None:
    client = agent.client()
    with client.open_take("events", 1, lease_seconds=1e308) as take:
        assert take.lease_seconds == 600  # the fixture's max_lease_seconds
        assert take.extend(1e300) == 600
        assert take.extend(5e-324) == 5e-324  # tiny but a number: the client's choice
        assert take.extend(30) == 30


def test_a_take_count_over_the_transaction_capacity_is_the_channels_error(agent: Agent,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    client = agent.client()
    with pytest.raises(TransactionCapacityError) as info:
        client.open_take("events", 2**32 - 1)
    assert info.value.capacity == 10_000 and info.value.requested == 2**32 - 1
    refusals(caplog)


@pytest.mark.parametrize(("batch", "field"), [
    (pb.EventBatch(bodies=[b"a", b"b"], seqs=[1]), "events.seqs"),
    (pb.EventBatch(bodies=[b"a"], header_counts=[2**32 - 1], header_keys=["k"], header_values=["v"]),
     "events.header_counts"),
    (pb.EventBatch(bodies=[b"a"], header_counts=[1, 1], header_keys=["k", "k"], header_values=["v", "v"]),
     "events.header_counts"),
    (pb.EventBatch(bodies=[b"a"], header_counts=[1], header_keys=["k"], header_values=[]), "events.header_values"),
])
def test_put_batches_whose_counts_do_not_add_up_are_refused_naming_the_field(
        agent: Agent, caplog: pytest.LogCaptureFixture, batch: pb.EventBatch, field: str) -> None:
    with caplog.at_level(logging.WARNING), grpc.insecure_channel(agent.server.address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.AgentStub(channel).Put(pb.PutRequest(channel="events", events=batch), timeout=10)  # type: ignore[no-untyped-call]
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(f"{field}: "), info.value.details()
    [line] = refusals(caplog)
    assert line.startswith("refused put into events from ") and field in line, line
    assert len(agent.channels["events"]) == 0


@pytest.mark.parametrize("data", [b"\x1a\x05\x0a\x09abc", b"\x0a\x02\xff\xfe", b"\xff" * 12],
                         ids=["truncated-batch", "channel-not-utf8", "garbage"])
def test_bytes_that_are_no_put_request_are_refused_not_an_internal_error(
        agent: Agent, caplog: pytest.LogCaptureFixture, data: bytes) -> None:
    with caplog.at_level(logging.WARNING), grpc.insecure_channel(agent.server.address) as channel:
        put = channel.unary_unary(SERVICE + "Put", request_serializer=lambda b: b,
                                  response_deserializer=pb.PutAck.FromString)
        with pytest.raises(grpc.RpcError) as info:
            put(data, timeout=10)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, info.value
    assert info.value.details().startswith("the request is not a valid PutRequest message"), info.value.details()
    [line] = refusals(caplog)
    assert line.startswith("refused put from ")
    assert len(agent.channels["events"]) == 0


def test_a_garbled_request_inside_a_transaction_is_refused_and_the_transaction_stays_open(
        agent: Agent, caplog: pytest.LogCaptureFixture) -> None:
    agent.client().put([Event(b"a")], channel="events")
    begin = pb.TxnRequest(begin=pb.Begin(channel="events", lease_seconds=30, take=1)).SerializeToString()
    commit = pb.TxnRequest(commit=pb.End()).SerializeToString()
    with caplog.at_level(logging.WARNING), grpc.insecure_channel(agent.server.address) as channel:
        txn = channel.stream_stream(SERVICE + "Transaction", request_serializer=lambda b: b,
                                    response_deserializer=pb.TxnResponse.FromString)
        answers = list(txn(iter([begin, b"\x12\x03\x0a", commit]), timeout=10))
    kinds = [a.WhichOneof("result") for a in answers]
    assert kinds == ["begun", "chunk", "failure", "ended"], kinds
    failure = answers[2].failure
    assert (failure.code, failure.kind, failure.state) == ("INVALID_ARGUMENT", "InvalidRequestError",
                                                           pb.TXN_STATE_OPEN)
    assert failure.message.startswith("the request is not a valid TxnRequest message"), failure.message
    assert answers[3].ended.state == pb.TXN_STATE_COMMITTED and len(agent.channels["events"]) == 0
    [line] = refusals(caplog)
    assert line.startswith("refused a request in remote transaction ")
