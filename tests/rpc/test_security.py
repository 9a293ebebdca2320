"""Bearer-token auth, TLS and mutual TLS on a real server; the client's TLS file checks."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization

from ingest_toolkit.channel import Event
from ingest_toolkit.cli import main
from ingest_toolkit.errors import ConfigError
from ingest_toolkit.rpc import AgentClient, AgentUnavailableError, AuthenticationError
from ingest_toolkit.rpc.proto import agent_pb2 as pb
from ingest_toolkit.rpc.proto import agent_pb2_grpc as pb_grpc
from ingest_toolkit.security import TlsSettings
from tests.certs import client_cert, self_signed
from tests.rpc.conftest import Agent, StartAgent

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


def _mtls_agent(start_agent: StartAgent, tmp_path: Path) -> tuple[Agent, Path, Path, Path]:
    """An agent requiring client certificates signed by its own client CA; returns the agent, the
    server certificate (the clients' tls_ca) and a valid client certificate and key."""
    server_cert, server_key = self_signed(tmp_path / "server")
    client_ca, client_ca_key = self_signed(tmp_path / "client-ca", name="client CA")
    cert, key = client_cert(tmp_path / "client", client_ca, client_ca_key)
    agent = start_agent(tls=TlsSettings(cert_file=server_cert, key_file=server_key, client_ca_file=client_ca))
    return agent, server_cert, cert, key


def test_mutual_tls_accepts_a_client_certificate_and_refuses_clients_without_one(
        start_agent: StartAgent, tmp_path: Path) -> None:
    agent, server_cert, cert, key = _mtls_agent(start_agent, tmp_path)
    client = agent.client(tls_ca=server_cert, tls_cert=cert, tls_key=key, timeout=5)
    assert client.put([Event(b"mutual")], channel="events").accepted == 1
    with client.open_take("events", 5) as take:
        assert [e.body for e in take.events] == [b"mutual"]
    without = agent.client(tls_ca=server_cert, timeout=5)
    with pytest.raises(AgentUnavailableError):
        without.put([Event(b"anonymous")], channel="events")
    other_ca, other_key = self_signed(tmp_path / "other-ca", name="other CA")
    foreign_cert, foreign_key = client_cert(tmp_path / "foreign", other_ca, other_key)
    foreign = agent.client(tls_ca=server_cert, tls_cert=foreign_cert, tls_key=foreign_key, timeout=5)
    with pytest.raises(AgentUnavailableError):
        foreign.put([Event(b"foreign")], channel="events")
    assert len(agent.channels["events"]) == 0  # only the mutual-TLS event was stored, and taken


def test_send_with_a_client_certificate(start_agent: StartAgent, tmp_path: Path) -> None:
    agent, server_cert, cert, key = _mtls_agent(start_agent, tmp_path)
    base = ["send", "--agent", agent.server.address, "--channel", "events", "--tls-ca", str(server_cert),
            "--retries", "0"]
    result = CliRunner().invoke(main, [*base, "--tls-cert", str(cert), "--tls-key", str(key)], input="a\nb\n")
    assert result.exit_code == 0, result.output
    assert "2 accepted" in result.output and len(agent.channels["events"]) == 2
    refused = CliRunner().invoke(main, base, input="c\n")
    assert refused.exit_code == 1 and "--tls-cert/--tls-key" in refused.output
    half = CliRunner().invoke(main, [*base, "--tls-cert", str(cert)], input="c\n")
    assert half.exit_code == 2 and "--tls-cert is set but --tls-key is not" in half.output
    assert len(agent.channels["events"]) == 2


def test_client_tls_files_are_checked_with_errors_naming_them(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "a")
    other_cert, other_key = self_signed(tmp_path / "b")
    encrypted = tmp_path / "encrypted.key"
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    encrypted.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.BestAvailableEncryption(b"pw")))
    cases: list[tuple[dict[str, Path], str, str]] = [
        ({"tls_cert": cert}, "tls_key", "tls_cert is set but tls_key is not"),
        ({"tls_key": key}, "tls_cert", "tls_key is set but tls_cert is not"),
        ({"tls_cert": cert, "tls_key": other_key}, "tls_key", f"{other_key} is not the private key of the certificate"),
        ({"tls_cert": cert, "tls_key": tmp_path / "missing.key"}, "tls_key", "cannot read .*missing.key"),
        ({"tls_cert": key, "tls_key": key}, "tls_cert", "holds no PEM certificate"),
        ({"tls_cert": cert, "tls_key": other_cert}, "tls_key", "is not an unencrypted PEM private key"),
        ({"tls_cert": cert, "tls_key": encrypted}, "tls_key", "is not an unencrypted PEM private key"),
        ({"tls_ca": key}, "tls_ca", "holds no PEM certificate"),
    ]
    for files, name, message in cases:
        with pytest.raises(ConfigError, match=message) as info:
            AgentClient("127.0.0.1:1", **files)  # type: ignore[arg-type]
        assert info.value.key == name
