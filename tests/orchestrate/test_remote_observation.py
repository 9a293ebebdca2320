"""The sensor's decision, the drain and every channel check judged from the agent's gRPC status (TLS
and a bearer token), for a channel whose directories this side cannot read: the same verdicts as
from the directories, a state that says where it came from, and a refused or absent agent as a
failed verdict or a skip that names its address."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.errors import ConfigError
from ingest_toolkit.orchestrate import channel_checks
from ingest_toolkit.orchestrate.backlog import drain_decision, evaluate_landing
from ingest_toolkit.orchestrate.forwarding_checks import forward_sinks_reachable
from ingest_toolkit.orchestrate.log_presence import referenced_logs_intact
from ingest_toolkit.orchestrate.remote import AgentAccess, AgentState, LocalState, StateSource, state_source
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings, remote_channel_spec
from ingest_toolkit.orchestrate.verdict import Verdict
from ingest_toolkit.security import TlsSettings
from tests.certs import self_signed
from tests.fleet.harness import free_port
from tests.rpc.conftest import Agent, StartAgent, start_agent  # noqa: F401  (a fixture)

TOKEN = "remote-observation-token"
SETTINGS = OrchestrationSettings.model_validate({"sensor_min_backlog": 10, "drained_log_grace_seconds": 0.0})
CHECKS = {
    "refcounts_match_recount": channel_checks.refcounts_match_recount,
    "referenced_logs_intact": referenced_logs_intact,
    "drained_logs_deleted": channel_checks.drained_logs_deleted,
    "checkpoint_fresh": channel_checks.checkpoint_fresh,
    "recovery_losses_acknowledged": channel_checks.recovery_losses_acknowledged,
    "backlog_below_capacity": channel_checks.backlog_below_capacity,
    "forward_sinks_reachable": forward_sinks_reachable,
}


@pytest.fixture
def secured(start_agent: StartAgent, tmp_path: Path) -> tuple[Agent, Path]:  # noqa: F811
    cert, key = self_signed(tmp_path / "tls")
    agent = start_agent(tls=TlsSettings(cert_file=cert, key_file=key), token=TOKEN, checkpoint_interval=30)
    return agent, cert


def _fill(agent: Agent, count: int) -> None:
    channel = agent.channels["events"]
    with channel.transaction() as tx:
        for n in range(count):
            tx.put(Event(f"e{n}".encode()))
    channel.checkpoint()


def _elsewhere(tmp_path: Path) -> ChannelSpec:
    """The channel as this side's configuration names it: directories that do not exist here."""
    return ChannelSpec(name="events", checkpoint_dir=str(tmp_path / "on-the-agent-host" / "checkpoint"),
                       data_dirs=(str(tmp_path / "on-the-agent-host" / "data"),), capacity=1000,
                       checkpoint_interval=30.0)


def _verdicts(spec: ChannelSpec, source: StateSource | None) -> dict[str, Verdict]:
    return {name: check(spec, SETTINGS, source=source) for name, check in CHECKS.items()}


def test_every_channel_check_judges_the_agent_status_as_it_judges_the_directories(
        secured: tuple[Agent, Path], tmp_path: Path) -> None:
    agent, cert = secured
    _fill(agent, 40)
    spec = _elsewhere(tmp_path)
    access = AgentAccess(agent.server.address, token=TOKEN, tls_ca=str(cert))
    source = state_source(spec, access, "auto")
    assert isinstance(source, AgentState)  # the directories cannot be read here: the agent's status

    local_spec = ChannelSpec(name="events", checkpoint_dir=agent.channels["events"].config.checkpoint_dir,
                             data_dirs=tuple(agent.channels["events"].config.data_dirs), capacity=1000,
                             checkpoint_interval=30.0)
    assert isinstance(state_source(local_spec, access, "auto"), LocalState)  # readable: the files
    remote, local = _verdicts(spec, source), _verdicts(local_spec, None)
    for name in CHECKS:
        assert remote[name].passed and local[name].passed, (name, remote[name], local[name])
        assert remote[name].metadata["state_from"] == f"agent {agent.server.address} (gRPC status)"
        assert local[name].metadata["state_from"].startswith("checkpoint directory ")
    for key in ("checkpoint_id", "queue_size_recorded", "queue_size_recounted", "events_recounted"):
        assert remote["refcounts_match_recount"].metadata[key] == local["refcounts_match_recount"].metadata[key]
    assert remote["backlog_below_capacity"].metadata["queued"] == 40
    assert remote["referenced_logs_intact"].metadata["events_referenced"] == 40

    # the same spec without an agent judges the absent directories: every check fails naming them
    for name, verdict in _verdicts(spec, state_source(spec, None, "auto")).items():
        assert not verdict.passed and "does not exist" in verdict.description, name


def test_a_segment_lost_on_the_agent_host_fails_the_remote_check(secured: tuple[Agent, Path], tmp_path: Path) -> None:
    agent, cert = secured
    _fill(agent, 25)
    channel = agent.channels["events"]
    data_dir = channel.config.data_dirs[0]
    segment = next(name for name in sorted(os.listdir(data_dir)) if name.startswith("log-"))
    os.unlink(os.path.join(data_dir, segment))
    channel.checkpoint()  # a new checkpoint: the agent judges its segments again
    source = AgentState(_elsewhere(tmp_path), AgentAccess(agent.server.address, token=TOKEN, tls_ca=str(cert)))
    verdict = referenced_logs_intact(_elsewhere(tmp_path), SETTINGS, source=source)
    assert not verdict.passed and verdict.metadata["events_in_damaged_segments"] == 25
    assert segment in verdict.description and agent.server.address in verdict.description

    # judged from the directories, the same numbers give the same verdict: only the disk named differs
    local_spec = ChannelSpec(name="events", checkpoint_dir=channel.config.checkpoint_dir,
                             data_dirs=tuple(channel.config.data_dirs), capacity=1000, checkpoint_interval=30.0)
    local = referenced_logs_intact(local_spec, SETTINGS)
    assert not local.passed
    for key in ("damaged", "events_in_damaged_segments", "segments_needed", "events_referenced"):
        assert local.metadata[key] == verdict.metadata[key], key
    assert local.description == verdict.description.replace(
        f"on the disk of agent {agent.server.address}", "on disk")
    assert "(25 queued or in-flight events point into it)" in local.description


def test_the_sensor_and_the_drain_decide_on_the_agent_status(secured: tuple[Agent, Path], tmp_path: Path) -> None:
    agent, cert = secured
    spec = _elsewhere(tmp_path)
    access = AgentAccess(agent.server.address, token=TOKEN, tls_ca=str(cert))

    def tick(cursor: str | None = None):  # type: ignore[no-untyped-def]
        return evaluate_landing("events", spec.checkpoint_dir, SETTINGS, cursor, previous_run=lambda _k: None,
                                landing_in_progress=lambda: None, source=state_source(spec, access, "auto"))

    _fill(agent, 3)
    quiet = tick()
    assert not quiet.decision.run and "below thresholds" in quiet.decision.reason
    assert quiet.decision.reason.endswith(f"(state from agent {agent.server.address} (gRPC status))")
    drain = drain_decision("events", spec.checkpoint_dir, state_source(spec, access, "auto"))
    assert drain.run  # 3 events: the schedule drains them
    _fill(agent, 20)
    fired = tick(quiet.cursor)
    assert fired.decision.run and "committed backlog 23 events" in fired.decision.reason
    channel_id = agent.channels["events"].channel_id.hex()
    assert fired.decision.run_key is not None and channel_id in fired.decision.run_key


def test_an_agent_that_refuses_or_is_absent_is_a_verdict_and_a_skip_naming_its_address(
        secured: tuple[Agent, Path], tmp_path: Path) -> None:
    agent, cert = secured
    _fill(agent, 20)
    spec = _elsewhere(tmp_path)
    absent = f"127.0.0.1:{free_port()}"
    cases = {agent.server.address: AgentAccess(agent.server.address, token="wrong", tls_ca=str(cert), timeout=5),
             absent: AgentAccess(absent, token=TOKEN, tls_ca=str(cert), timeout=2)}
    for address, access in cases.items():
        for name, verdict in _verdicts(spec, AgentState(spec, access)).items():
            assert not verdict.passed, name
            assert f"agent {address} did not serve the status of channel events" in verdict.description, name
            assert verdict.metadata["agent"] == address
        tick = evaluate_landing("events", spec.checkpoint_dir, SETTINGS, None, previous_run=lambda _k: None,
                                landing_in_progress=lambda: None, source=AgentState(spec, access))
        assert not tick.decision.run and address in tick.decision.reason and tick.cursor is None
        drain = drain_decision("events", spec.checkpoint_dir, AgentState(spec, access))
        assert not drain.run and address in drain.reason


def test_observe_remote_needs_an_agent_and_local_never_asks_one(tmp_path: Path) -> None:
    spec = remote_channel_spec("events")
    with pytest.raises(ConfigError, match="observe = \"remote\" needs an agent"):
        state_source(spec, None, "remote")
    access = AgentAccess("127.0.0.1:1")
    assert isinstance(state_source(spec, access, "local"), LocalState)
    readable = ChannelSpec(name="events", checkpoint_dir=str(tmp_path), data_dirs=(str(tmp_path),), capacity=1,
                           checkpoint_interval=1.0)
    assert isinstance(state_source(readable, access, "remote"), AgentState)
