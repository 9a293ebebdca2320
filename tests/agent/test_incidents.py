"""An agent that opened a channel whose log recovery had to cut (issue 28): the incident is in its
status and metrics, the checks judged from its status fail naming it, and ``channel acknowledge``
run beside the live agent goes through the agent's admin endpoint (the agent owns the directory)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.cli import main
from ingest_toolkit.collect.agent import Agent
from ingest_toolkit.collect.config import load_agent_config
from ingest_toolkit.orchestrate.channel_checks import recovery_losses_acknowledged
from ingest_toolkit.orchestrate.remote import AgentAccess, AgentState
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings

from .harness import AgentSetup, http_get, metric

TOKEN_ENV = "TEST_AGENT_INCIDENT_TOKEN"


def crash_with_torn_commit(setup: AgentSetup) -> int:
    """Three put transactions in the agent's channel, then the directories as a machine crash
    leaves them: the last COMMIT frame only partly written. Returns that frame's offset."""
    settings = {**setup.channel_settings(), "preallocate_bytes": 65536, "checkpoint_interval": 3600}
    scratch = setup.root / "scratch"
    channel = FileChannel(**{**settings, "checkpoint_dir": str(scratch / "cp"), "data_dirs": [str(scratch / "d")]})
    try:
        for t in range(3):
            with channel.transaction() as tx:
                tx.put_many([Event(b"t%d-%d" % (t, i)) for i in range(4)])
        shutil.copytree(scratch / "cp", settings["checkpoint_dir"], ignore=shutil.ignore_patterns("in_use.lock"))
        shutil.copytree(scratch / "d", settings["data_dirs"][0], ignore=shutil.ignore_patterns("in_use.lock"))
    finally:
        channel.close()
    path = Path(settings["data_dirs"][0]) / "log-1"
    data = bytearray(path.read_bytes())
    pos, commit = fmt.SEGMENT_HEADER_SIZE, 0
    while data[pos: pos + 2] == fmt.FRAME_MAGIC:
        ftype, length, _txn, _seq = fmt.check_frame(data, pos, len(data))
        commit = pos if ftype == fmt.FrameType.COMMIT else commit
        pos += length
    data[commit + 8: commit + 32] = bytes(24)
    path.write_bytes(bytes(data))
    return commit


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AgentSetup:
    monkeypatch.setenv(TOKEN_ENV, "incident-token")
    return AgentSetup(tmp_path, admin=f'security = {{ token_env = "{TOKEN_ENV}" }}\n')


@pytest.fixture
def agent(setup: AgentSetup) -> Iterator[Agent]:
    running = Agent(load_agent_config(setup.conf))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def admin(agent: Agent, path: str) -> str:
    code, body = http_get(f"http://127.0.0.1:{agent.admin.port}{path}", token="incident-token")
    assert code == 200, body
    return body


def test_the_live_agent_reports_the_incident_and_acknowledges_it_through_its_admin_endpoint(
        setup: AgentSetup, monkeypatch: pytest.MonkeyPatch) -> None:
    offset = crash_with_torn_commit(setup)
    running = Agent(load_agent_config(setup.conf))
    running.start()
    try:
        status = json.loads(admin(running, "/status"))["channels"]["events"]["incidents"]
        assert status["open"] == 1 and status["events"] == 4 and status["incidents"][0]["offset"] == offset
        text = admin(running, "/metrics")
        assert metric(text, "ingest_channel_incidents_open", channel="events") == 1
        assert metric(text, "ingest_channel_incident_events", channel="events") == 4

        spec = ChannelSpec(name="events", checkpoint_dir="/nowhere/cp", data_dirs=("/nowhere/d",), capacity=1000,
                           checkpoint_interval=2.0)
        access = AgentAccess(f"127.0.0.1:{running.grpc.port}", token="incident-token")
        remote = recovery_losses_acknowledged(spec, OrchestrationSettings(), source=AgentState(spec, access))
        assert not remote.passed and f"offset {offset}" in remote.description and remote.metadata["events"] == 4

        monkeypatch.chdir(setup.root)
        result = CliRunner().invoke(main, ["channel", "acknowledge", "--conf", str(setup.conf), "--channel", "events",
                                           "--all", "--note", "senders resent, checked"])
        assert result.exit_code == 0, result.output
        assert "through agent 'test'" in result.output and f"(pid {os.getpid()})" in result.output
        assert json.loads(admin(running, "/status"))["channels"]["events"]["incidents"]["open"] == 0
        assert recovery_losses_acknowledged(spec, OrchestrationSettings(), source=AgentState(spec, access)).passed
        assert metric(admin(running, "/metrics"), "ingest_channel_incidents_open", channel="events") == 0
    finally:
        running.stop()


def test_the_admin_acknowledgement_needs_the_token_and_names_what_is_wrong(agent: Agent) -> None:
    import urllib.error
    import urllib.request

    url = f"http://127.0.0.1:{agent.admin.port}/channels/events/incidents/acknowledge"

    def post(body: bytes, token: str | None, path: str = url) -> tuple[int, str]:
        request = urllib.request.Request(path, data=body, method="POST",
                                         headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    assert post(b'{"ids": null, "note": "x"}', None)[0] == 401
    assert post(b'{"ids": null, "note": "x"}', "incident-token") == (200, '{"acknowledged": []}\n')
    code, body = post(b'{"ids": [3], "note": "x"}', "incident-token")
    assert code == 400 and "no open incident 3" in body
    assert post(b'{"ids": "all"}', "incident-token")[0] == 400
    assert post(b"[", "incident-token")[0] == 400
    assert post(b"{}", "incident-token", url.replace("/events/", "/nope/"))[0] == 404
