"""The ``ingest_agent`` connection as Airflow users meet it: the form a real ``airflow api-server``
serves to its UI (``GET /ui/connections/hook_meta``) and its Test button (``POST
/api/v2/connections/test``) against a real agent process with a token and TLS; and
:meth:`IngestAgentHook.test_connection` called directly, as ``airflow connections test`` does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.airflow import IngestAgentHook

from ..agent.harness import AgentProcess, AgentSetup
from ..certs import self_signed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "form-test-token"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _call(url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def api_server(airflow_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``airflow api-server`` on a free port of 127.0.0.1 (one worker, every user an admin: no
    login), with the connection test enabled; its base URL."""
    port = _free_port()
    log = (tmp_path_factory.mktemp("api-server") / "api-server.log").open("wb")
    env = {**os.environ, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
           "AIRFLOW__CORE__TEST_CONNECTION": "Enabled"}
    proc = subprocess.Popen([sys.executable, "-m", "airflow", "api-server", "-H", "127.0.0.1", "-p", str(port),
                             "-w", "1"], stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, Path(log.name).read_text()[-3000:]
            try:
                _call(f"{base}/api/v2/monitor/health")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, Path(log.name).read_text()[-3000:]
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()


def test_the_connection_form_hides_login_and_schema_and_names_the_agents_fields(api_server: str) -> None:
    forms = {form["connection_type"]: form for form in _call(f"{api_server}/ui/connections/hook_meta")}
    form = forms["ingest_agent"]
    assert (form["hook_name"], form["hook_class_name"]) == (
        "Ingest Toolkit agent", "ingest_toolkit.airflow.hooks.IngestAgentHook")
    standard = form["standard_fields"]
    assert standard["login"]["hidden"] and standard["url_schema"]["hidden"]
    assert (standard["host"]["title"], standard["host"]["placeholder"]) == ("Agent host", "127.0.0.1")
    assert (standard["port"]["title"], standard["port"]["placeholder"]) == ("Agent gRPC port", "7431")
    assert standard["password"]["title"] == "Bearer token" and not standard["password"]["hidden"]
    extra = form["extra_fields"]
    assert {name: field["schema"]["title"] for name, field in extra.items()} == {
        "channel": "Channel", "token_env": "Token variable", "tls_ca": "TLS CA file",
        "tls_cert": "TLS client certificate", "tls_key": "TLS client key"}
    assert extra["channel"]["value"] == "events"


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AgentProcess, Path]]:
    """A real agent serving channel ``events`` with a bearer token and TLS; its certificate."""
    root = tmp_path_factory.mktemp("form-agent")
    cert, key = self_signed(root / "tls")
    setup = AgentSetup(root / "agent", security=(
        f'token_env = "INGEST_TEST_AGENT_TOKEN"\ntls = {{ cert_file = "{cert}", key_file = "{key}" }}\n'))
    process = AgentProcess(setup, env={"INGEST_TEST_AGENT_TOKEN": TOKEN}).wait_ready()
    try:
        yield process, cert
    finally:
        process.terminate()


def _conn(agent: AgentProcess, ca: Path, password: str | None = TOKEN, **extra: str) -> dict[str, Any]:
    host, port = agent.grpc_address.rsplit(":", 1)
    return {"conn_type": "ingest_agent", "host": host, "port": int(port), "password": password,
            "extra": {"tls_ca": str(ca), **extra}}


def test_the_test_button_reaches_the_agent_or_says_why_not(api_server: str,
                                                          agent: tuple[AgentProcess, Path]) -> None:
    process, ca = agent

    def test(conn: dict[str, Any]) -> tuple[bool, str]:
        body = {"connection_id": "edge_agent", **conn, "extra": json.dumps(conn["extra"])}
        answer = _call(f"{api_server}/api/v2/connections/test", body)
        return answer["status"], answer["message"]

    ok, message = test(_conn(process, ca))
    assert ok, message
    assert message.startswith(f"agent {process.grpc_address} serves channel events (id ")
    assert "0 events queued" in message and message.endswith("TLS, token accepted")
    assert test(_conn(process, ca, "a-wrong-token")) == (
        False, f"agent {process.grpc_address} refused the token: set Bearer token (or Token variable) to the "
               "agent's token")
    assert test(_conn(process, ca, channel="clicks")) == (
        False, f"agent {process.grpc_address} has no channel 'clicks' (it hosts events): set Channel in the "
               "connection")
    ok, message = test({**_conn(process, ca), "port": _free_port()})
    assert not ok and message.startswith("no agent answers at 127.0.0.1:") and "\n" not in message, message
    assert message.endswith("check Host and Port (the agent's [agent.grpc] host and port) and that the agent runs")


def test_the_hook_tests_the_connection_with_a_token_variable(agent: tuple[AgentProcess, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    process, ca = agent
    monkeypatch.setenv("AIRFLOW_CONN_EDGE_AGENT", json.dumps(_conn(process, ca, None, token_env="EDGE_TOKEN")))
    assert IngestAgentHook("edge_agent").test_connection() == (
        False, "the token variable EDGE_TOKEN is not set where this test runs")
    monkeypatch.setenv("EDGE_TOKEN", TOKEN)
    ok, message = IngestAgentHook("edge_agent").test_connection()
    assert ok and message.endswith("TLS, token accepted"), message
    assert IngestAgentHook("edge_agent").landing_overrides() == {
        "agent": process.grpc_address, "agent_token_env": "EDGE_TOKEN", "agent_tls_ca": str(ca)}
    monkeypatch.setenv("AIRFLOW_CONN_EDGE_AGENT", json.dumps({**_conn(process, ca), "port": None}))
    ok, message = IngestAgentHook("edge_agent").test_connection()
    assert (ok, message) == (False, "Airflow connection 'edge_agent' has no host or port: set them to the agent's "
                                    "gRPC address (host 127.0.0.1, port 7431 for the shipped conf/agent.toml)")
