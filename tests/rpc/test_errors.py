"""Errors keep their class across the wire and map to precise gRPC status codes."""

from __future__ import annotations

import grpc
import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.errors import (
    ChannelClosedError,
    ChannelFailedError,
    ChannelFullError,
    DiskSpaceError,
    EventTooLargeError,
    IngestError,
    TransactionCapacityError,
    TransactionError,
    TransientError,
)
from ingest_toolkit.rpc import (
    AuthenticationError,
    InvalidRequestError,
    LeaseExpiredError,
    RemoteError,
    RequestTooLargeError,
    UnknownChannelError,
)
from ingest_toolkit.rpc.errors import describe, rebuild
from ingest_toolkit.rpc.proto import agent_pb2 as pb
from ingest_toolkit.rpc.proto import agent_pb2_grpc as pb_grpc
from tests.rpc.conftest import Agent, StartAgent


def raw_put(agent: Agent, request: pb.PutRequest) -> grpc.RpcError:
    """The status of a put sent with the bare generated stub."""
    with grpc.insecure_channel(agent.server.address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.AgentStub(channel).Put(request, timeout=10)  # type: ignore[no-untyped-call]
    return info.value


def test_unknown_channel_names_it_and_the_known_ones(start_agent: StartAgent) -> None:
    agent = start_agent(("events", "audit"))
    client = agent.client()
    with pytest.raises(UnknownChannelError, match=r"unknown channel 'nope'; this agent hosts: audit, events") as info:
        client.put([Event(b"x")], channel="nope")
    assert info.value.channel == "nope" and sorted(info.value.known) == ["audit", "events"]
    with pytest.raises(UnknownChannelError):
        client.open_take("nope", 1)
    with pytest.raises(UnknownChannelError):
        client.status("nope")
    assert raw_put(agent, pb.PutRequest(channel="nope")).code() is grpc.StatusCode.NOT_FOUND


def test_channel_full_is_transient_resource_exhausted(start_agent: StartAgent) -> None:
    agent = start_agent(capacity=5, transaction_capacity=5, keep_alive=0)
    client = agent.client()
    client.put([Event(b"x")] * 4, channel="events")
    with pytest.raises(ChannelFullError, match="retry") as info:
        client.put([Event(b"y")] * 2, channel="events")
    assert isinstance(info.value, TransientError)
    assert (info.value.capacity, info.value.used, info.value.requested) == (5, 4, 2)
    status = raw_put(agent, pb.PutRequest(channel="events", events=pb.EventBatch(bodies=[b"y"] * 2)))
    assert status.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(agent.channels["events"]) == 4


def test_disk_space_is_resource_exhausted(agent: Agent) -> None:
    channel = agent.channels["events"]
    channel.config = channel.config.model_copy(update={"min_free_bytes": 1 << 62})  # "the disk is full"
    client = agent.client()
    with pytest.raises(DiskSpaceError) as info:
        client.put([Event(b"x" * 10_000)] * 500, channel="events")
    assert isinstance(info.value, TransientError) and info.value.min_free_bytes == 1 << 62
    status = raw_put(agent, pb.PutRequest(channel="events", events=pb.EventBatch(bodies=[b"x" * 10_000] * 500)))
    assert status.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_event_and_transaction_limits_are_invalid_argument(start_agent: StartAgent) -> None:
    agent = start_agent(capacity=100, transaction_capacity=10, max_event_size=2048)
    client = agent.client()
    with pytest.raises(EventTooLargeError) as too_large:
        client.put([Event(b"x" * 4096)], channel="events")
    assert too_large.value.limit == 2048
    with pytest.raises(TransactionCapacityError):
        client.put([Event(b"x")] * 11, channel="events")
    with pytest.raises(TransactionCapacityError):
        client.open_take("events", 11)
    status = raw_put(agent, pb.PutRequest(channel="events", events=pb.EventBatch(bodies=[b"x" * 4096])))
    assert status.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert len(agent.channels["events"]) == 0


def test_malformed_requests_are_invalid_argument(agent: Agent) -> None:
    client = agent.client()
    with pytest.raises(InvalidRequestError, match="128"):
        client.put([Event(b"x")], channel="events", batch_id="b" * 129)
    bad = pb.PutRequest(channel="events", events=pb.EventBatch(bodies=[b"a", b"b"], header_counts=[1]))
    status = raw_put(agent, bad)
    assert status.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert status.details().startswith("events.header_counts: 1 counts for 2 bodies")


def test_oversized_request_is_refused_clearly(start_agent: StartAgent) -> None:
    agent = start_agent(max_message_bytes=1 << 20)
    big = [Event(b"z" * 1000)] * 1500  # about 1.5 MB
    with pytest.raises(RequestTooLargeError, match=r"exceeds the max message size of 1048576 bytes") as info:
        agent.client().put(big, channel="events")  # the client's limit is larger: the agent refuses
    assert info.value.size > 1 << 20 and info.value.limit == 1 << 20
    with pytest.raises(RequestTooLargeError, match="send smaller batches"):
        agent.client(max_message_bytes=1 << 20).put(big, channel="events")  # refused before sending
    assert raw_put(agent, pb.PutRequest(channel="events", events=pb.EventBatch(
        bodies=[b"z" * 1000] * 1500))).code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(agent.channels["events"]) == 0
    assert agent.client().put(big[:500], channel="events").accepted == 500  # the connection still works


@pytest.mark.parametrize(("err", "code"), [
    (UnknownChannelError(channel="x", known=["a"]), "NOT_FOUND"),
    (ChannelFullError(capacity=1, used=1, requested=1), "RESOURCE_EXHAUSTED"),
    (DiskSpaceError(path="/d", free_bytes=1, needed_bytes=2, min_free_bytes=3), "RESOURCE_EXHAUSTED"),
    (RequestTooLargeError(size=2, limit=1), "RESOURCE_EXHAUSTED"),
    (EventTooLargeError(size=2, limit=1), "INVALID_ARGUMENT"),
    (TransactionCapacityError(capacity=1, requested=2), "INVALID_ARGUMENT"),
    (InvalidRequestError("bad"), "INVALID_ARGUMENT"),
    (LeaseExpiredError(lease_seconds=1.0, events=3), "FAILED_PRECONDITION"),
    (TransactionError("misuse"), "FAILED_PRECONDITION"),
    (AuthenticationError("no"), "UNAUTHENTICATED"),
    (ChannelClosedError(), "UNAVAILABLE"),
    (ChannelFailedError(OSError(5, "EIO")), "INTERNAL"),
    (KeyError("unexpected"), "INTERNAL"),
])
def test_every_error_has_its_status_and_comes_back_as_its_class(err: BaseException, code: str) -> None:
    info = describe(err)
    assert info.code.name == code
    back = rebuild(info.code.name, info.kind, info.message, info.attrs_json)
    if isinstance(err, IngestError):
        assert type(back) is type(err) and str(back) == str(err)
        scalars = {k: v for k, v in vars(err).items() if isinstance(v, (int, float, str, list))}
        assert {k: getattr(back, k) for k in scalars} == scalars
    else:
        assert isinstance(back, RemoteError) and "KeyError" in str(back) and back.code == "INTERNAL"


def test_unknown_kinds_from_the_wire_are_not_instantiated() -> None:
    back = rebuild("INTERNAL", "SystemExit", "nope", '{"code": 1}')
    assert type(back) is RemoteError and "nope" in str(back)
