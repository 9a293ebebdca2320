"""The deferrable sensor's trigger polls the agent's gRPC status (TLS, the token of an ``ingest_agent``
connection) for a channel whose directories the triggerer cannot read; the token is read in the
triggerer, never serialized; an absent agent is a reason naming it, not a crash of the trigger."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from ingest_toolkit.airflow import ChannelBacklogSensor, ChannelBacklogTrigger, ChannelCheckOperator
from ingest_toolkit.airflow.operators import CHANNEL_CHECKS, CheckFailedError
from ingest_toolkit.channel import Event
from ingest_toolkit.orchestrate.settings import OrchestrationSettings
from ingest_toolkit.security import TlsSettings

from ..certs import self_signed
from ..fleet.harness import free_port
from ..rpc.conftest import Agent, StartAgent, start_agent  # noqa: F401  (a fixture)
from .test_trigger import POLL, _as_triggerer_runs_it, _first_event

TOKEN = "trigger-remote-token"


def _put(agent: Agent, count: int) -> None:
    channel = agent.channels["events"]
    with channel.transaction() as tx:
        tx.put_many([Event(f"e{n}".encode()) for n in range(count)])
    channel.checkpoint()


def _conf(tmp_path: Path, cert: Path) -> Path:
    """The triggerer's side: thresholds and the landing settings, no agent configuration, no channel dirs."""
    conf = tmp_path / "airflow-conf"
    conf.mkdir()
    (conf / "orchestrate.toml").write_text(
        "[orchestrate]\nsensor_min_backlog = 100\nsensor_max_backlog_age_seconds = 3600.0\n")
    (conf / "landing.toml").write_text(f'[landing]\nroot = "{tmp_path / "landing"}"\n')
    return conf


def _connection(monkeypatch: pytest.MonkeyPatch, address: str, cert: Path, token: str) -> None:
    host, port = address.rsplit(":", 1)
    monkeypatch.setenv("AIRFLOW_CONN_AGG_AGENT", json.dumps({
        "conn_type": "ingest_agent", "host": host, "port": int(port), "password": token,
        "extra": {"tls_ca": str(cert)}}))


def test_the_trigger_polls_the_agent_status_with_the_connections_token_and_tls(
        start_agent: StartAgent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    cert, key = self_signed(tmp_path / "tls")
    agent = start_agent(tls=TlsSettings(cert_file=cert, key_file=key), token=TOKEN, checkpoint_interval=30)
    _connection(monkeypatch, agent.server.address, cert, TOKEN)
    _put(agent, 60)  # below the threshold: the sensor defers
    sensor = ChannelBacklogSensor(task_id="wait", channel="events", conf_dir=str(_conf(tmp_path, cert)),
                                  agent_conn_id="agg_agent")
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, ChannelBacklogTrigger)
    assert trigger.agent is not None and trigger.agent["address"] == agent.server.address
    rebuilt: Any = _as_triggerer_runs_it(trigger)
    assert TOKEN not in json.dumps(rebuilt.serialize()[1])  # the secret stays in the connection
    rebuilt.poll_seconds = POLL

    payload = asyncio.run(_first_event(rebuilt, quiet=0.6, then=lambda: _put(agent, 40)))
    assert payload["trigger"] == "backlog" and "committed backlog 100 events (threshold 100)" in payload["reason"]
    assert payload["state_from"] == f"agent {agent.server.address} (gRPC status)"
    assert agent.channels["events"].channel_id.hex() in payload["run_key"]

    _connection(monkeypatch, agent.server.address, cert, "a-wrong-token")  # the token is read at each poll
    event, reason = rebuilt.poll(OrchestrationSettings(**rebuilt.settings))
    assert event is None and f"agent {agent.server.address} did not serve the status" in reason


def test_an_absent_agent_is_a_reason_that_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, _key = self_signed(tmp_path / "tls")
    address = f"127.0.0.1:{free_port()}"
    _connection(monkeypatch, address, cert, TOKEN)
    trigger = ChannelBacklogTrigger("events", "", OrchestrationSettings.model_validate({}).model_dump(), POLL,
                                    agent={"address": address, "tls_ca": str(cert), "timeout": 2.0},
                                    agent_conn_id="agg_agent")
    event, reason = trigger.poll(OrchestrationSettings.model_validate({}))
    assert event is None and f"agent {address} did not serve the status of channel events" in reason


def test_every_channel_check_task_judges_the_connections_agent(
        start_agent: StartAgent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    cert, key = self_signed(tmp_path / "tls")
    agent = start_agent(tls=TlsSettings(cert_file=cert, key_file=key), token=TOKEN, checkpoint_interval=30)
    _put(agent, 30)
    conf = _conf(tmp_path, cert)
    _connection(monkeypatch, agent.server.address, cert, TOKEN)
    for check in CHANNEL_CHECKS:
        task = ChannelCheckOperator(task_id=check, check=check, channel="events", conf_dir=str(conf),
                                    agent_conn_id="agg_agent")
        outcome = task.execute({})
        assert outcome["passed"], outcome
        assert outcome["metadata"]["state_from"] == f"agent {agent.server.address} (gRPC status)"
    _connection(monkeypatch, agent.server.address, cert, "a-wrong-token")
    task = ChannelCheckOperator(task_id="fresh", check="checkpoint_fresh", channel="events", conf_dir=str(conf),
                                agent_conn_id="agg_agent")
    with pytest.raises(CheckFailedError, match=f"agent {agent.server.address} did not serve the status"):
        task.execute({})
