"""Bearer-token auth and TLS on a real server."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.rpc import AgentClient, AgentUnavailableError, AuthenticationError
from ingest_toolkit.rpc.proto import agent_pb2 as pb
from ingest_toolkit.rpc.proto import agent_pb2_grpc as pb_grpc
from ingest_toolkit.security import TlsSettings
from tests.certs import self_signed
from tests.rpc.conftest import StartAgent

TOKEN = "s3cret-token-value"


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_calls_without_the_right_token_are_refused_and_logged(
        start_agent: StartAgent, caplog: pytest.LogCaptureFixture, token: str | None) -> None:
    agent = start_agent(token=TOKEN)
    client = agent.client(token=token)
    caplog.set_level(logging.WARNING, logger="ingest_toolkit.rpc")
    with pytest.raises(AuthenticationError, match="Bearer"):
        client.put([Event(b"x")], channel="events")
    with pytest.raises(AuthenticationError):
        client.open_take("events", 1)
    with pytest.raises(AuthenticationError):
        client.status("events")
    assert len(agent.channels["events"]) == 0
    refusals = [r for r in caplog.records if r.name == "ingest_toolkit.rpc" and "refused" in r.getMessage()]
    assert len(refusals) == 3
    assert all("127.0.0.1" in r.getMessage() and TOKEN not in r.getMessage() for r in refusals)
    reason = "no bearer token" if token is None else "a wrong bearer token"
    assert all(reason in r.getMessage() for r in refusals)


def test_status_code_is_unauthenticated(start_agent: StartAgent) -> None:
    agent = start_agent(token=TOKEN)
    with grpc.insecure_channel(agent.server.address) as channel:
        stub = pb_grpc.AgentStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as info:
            stub.Status(pb.StatusRequest(channel="events"), metadata=(("authorization", "Bearer nope"),))
    assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED


def test_the_right_token_is_accepted(start_agent: StartAgent) -> None:
    agent = start_agent(token=TOKEN)
    client = agent.client(token=TOKEN)
    assert client.put([Event(b"x")], channel="events").accepted == 1
    with client.open_take("events", 5) as take:
        assert [e.body for e in take.events] == [b"x"]


def test_tls_with_a_self_signed_certificate(start_agent: StartAgent, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    agent = start_agent(tls=TlsSettings(cert_file=cert, key_file=key), token=TOKEN)
    client = agent.client(tls_ca=cert, token=TOKEN)
    assert client.put([Event(b"secure", {"k": "v"})], channel="events").accepted == 1
    with client.open_take("events", 5) as take:
        assert [(e.body, dict(e.headers)) for e in take.events] == [(b"secure", {"k": "v"})]
    plaintext = AgentClient(agent.server.address, token=TOKEN, timeout=3)
    try:
        with pytest.raises(AgentUnavailableError):
            plaintext.status("events")
    finally:
        plaintext.close()
