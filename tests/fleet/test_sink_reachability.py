"""A sink that does not answer for longer than its group's ``unreachable_after`` is named: in the
edge's status, in its metrics, and by the ``forward_sinks_reachable`` check (WARN), which reads
the edge's gRPC status as an orchestrator does. A forward target with port 0 is refused when the
configuration loads (tests/fleet/test_sink_config.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest_toolkit.channel import Event
from ingest_toolkit.orchestrate.forwarding_checks import forward_sinks_reachable
from ingest_toolkit.orchestrate.remote import AgentAccess, AgentState
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings
from ingest_toolkit.orchestrate.verdict import Severity
from ingest_toolkit.rpc.client import AgentClient

from ..agent.harness import metric
from .harness import FleetSetup, forward_sink, free_port, in_process, wait_for

SETTINGS = OrchestrationSettings()


def _check(edge: FleetSetup) -> Any:
    spec = ChannelSpec(name="events", checkpoint_dir=str(edge.root / "elsewhere"), data_dirs=(), capacity=1000,
                       checkpoint_interval=2.0)
    return forward_sinks_reachable(spec, SETTINGS, source=AgentState(spec, AgentAccess(edge.address)))


def test_a_sink_unanswered_past_the_threshold_is_named_and_clears_when_it_answers(tmp_path: Path) -> None:
    port = free_port()  # the aggregator is not there yet
    edge = FleetSetup(tmp_path / "edge", name="edge", grpc_port=free_port(), extra=(
        forward_sink("agg", f"127.0.0.1:{port}") + forward_sink("spare", f"127.0.0.1:{free_port()}") +
        '[sink_groups.up]\nsinks = ["agg", "spare"]\npriorities = { agg = 10 }\nmin_penalty = 0.1\n'
        "max_penalty = 0.2\nunreachable_after = 1.0\n"))
    agent = in_process(edge)
    agg = None
    try:
        with AgentClient(edge.address) as client:
            client.put([Event(b"x")], channel="events", batch_id="x")
        group = wait_for(lambda: (g := agent.status()["sinks"]["up"])["unreachable"] == ["agg", "spare"] and g,
                         timeout=10, what="both sinks named unreachable")
        assert group["unreachable_after"] == 1.0 and group["sinks"]["agg"]["unreachable_seconds"] >= 1.0
        text = agent.metrics_text()
        assert metric(text, "ingest_sink_unreachable", sink="agg", group="up") == 1.0
        assert metric(text, "ingest_sink_unreachable_seconds", sink="agg", group="up") >= 1.0  # type: ignore[operator]
        verdict = _check(edge)
        assert not verdict.passed and verdict.severity == Severity.WARN
        assert f"sink agg (127.0.0.1:{port}) unanswered for" in verdict.description
        assert "sink spare" in verdict.description and "fixed" in verdict.description
        assert verdict.metadata["unreachable"] == ["agg", "spare"] and verdict.metadata["group"] == "up"

        agg_setup = FleetSetup(tmp_path / "agg", name="agg", grpc_port=port)
        agg = in_process(agg_setup)  # the aggregator comes up at the sink's address
        wait_for(lambda: agent.status()["sinks"]["up"]["unreachable"] == ["spare"], timeout=10,
                 what="agg to answer")
        assert metric(agent.metrics_text(), "ingest_sink_unreachable", sink="agg", group="up") == 0.0
        verdict = _check(edge)
        assert not verdict.passed and "sink agg" not in verdict.description  # spare is still unreachable
        assert len(agg.channels["events"]) == 1
    finally:
        agent.stop()
        if agg is not None:
            agg.stop()


def test_the_check_passes_for_a_channel_no_sink_group_forwards(tmp_path: Path) -> None:
    setup = FleetSetup(tmp_path / "agg", name="agg", grpc_port=free_port())
    agent = in_process(setup)
    try:
        verdict = _check(setup)
        assert verdict.passed and "no sink group" in verdict.description
        assert verdict.metadata["state_from"] == f"agent {setup.address} (gRPC status)"
    finally:
        agent.stop()
