"""A fleet in one code location: two aggregator agents (processes, TLS and a bearer token), each with a
channel ``events``, one component instance per agent and channel, and a Dagster side that knows the
channels only by their agents' addresses (no agent configuration, no channel directory here). The
sensors, the drain schedules, the observers, the landings and every channel check work from the
agents' gRPC status; both channels land into one table; a stopped agent is a skip and failed
checks that name its address."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pyarrow.compute as pc
import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.dagster.naming import checks_job_name, landed_key, landing_op_name
from ingest_toolkit.orchestrate.verdict import CHECKS
from ingest_toolkit.rpc.client import AgentClient
from tests.agent.harness import AgentProcess, AgentSetup
from tests.certs import self_signed
from tests.fleet.harness import wait_for
from tests.land.helpers import read_landed

from .test_component import _edit, _load, _names, _scaffold, project  # noqa: F401  (project: a fixture)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "fleet-token"
COUNTS = {"agg1": 300, "agg2": 200}
CHANNEL_CHECKS = [name for name, info in CHECKS.items() if info.target == "channel"]


@pytest.fixture
def aggregators(tmp_path: Path) -> Iterator[dict[str, AgentProcess]]:
    cert, key = self_signed(tmp_path / "tls")
    security = f'token_env = "FLEET_TOKEN"\ntls = {{ cert_file = "{cert}", key_file = "{key}" }}\n'
    agents = {name: AgentProcess(AgentSetup(tmp_path / "hosts" / name, security=security),
                                 env={"FLEET_TOKEN": TOKEN}).wait_ready() for name in COUNTS}
    yield agents
    for agent in agents.values():
        if agent.proc.poll() is None:
            agent.terminate()


def _client(agent: AgentProcess, cert: Path) -> AgentClient:
    return AgentClient(agent.grpc_address, token=TOKEN, tls_ca=cert, timeout=10)


def _wait_checkpointed(client: AgentClient, queued: int, what: str) -> None:
    """Until the agent's checkpoint.meta (what the sensor judges) holds ``queued`` events."""
    def done() -> bool:
        return bool((client.status("events")["checkpoint"] or {}).get("queue_size") == queued)
    wait_for(done, what=what)


def test_a_fleet_is_orchestrated_over_grpc_without_the_channel_directories(
        project: Path, aggregators: dict[str, AgentProcess], spark: SparkSession,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    cert = project / "tls" / "cert.pem"
    (project / "conf").mkdir(exist_ok=True)
    assert not (project / "conf" / "agent.toml").exists()  # this side knows the channels by their agents only
    (project / "conf" / "landing.toml").write_text(
        f'[landing]\nroot = "var/landing"\nagent_token_env = "FLEET_TOKEN"\nagent_tls_ca = "{cert}"\n'
        '[spark]\nmaster = "local[2]"\n')
    monkeypatch.setenv("FLEET_TOKEN", TOKEN)
    for name, agent in aggregators.items():
        defs_yaml = _scaffold(project, f"{name}_events", channel="events", agent=agent.grpc_address,
                              agent_name=name)
        _edit(defs_yaml, sensor__min_backlog=100)
        with _client(agent, cert) as client:
            client.put([Event(f"{name}-{n}".encode(), {"timestamp": "1763798400000"})
                        for n in range(COUNTS[name])], channel="events")
            _wait_checkpointed(client, COUNTS[name], f"a checkpoint of {name} with its events")
    defs = _load(project)
    names = _names(defs)
    for name in COUNTS:  # one set of definitions per agent and channel, named after the agent
        assert {f"{name}_events_channel", f"{name}_events_landed", f"{name}_events_curated"} <= names["assets"]
        assert {f"landing_sensor_{name}_events", f"channel_observer_{name}_events"} <= names["sensors"]
        assert f"drain_schedule_{name}_events" in names["schedules"]
        assert f"landing_{name}_events" in names["resources"]
        assert defs.get_assets_def(landed_key(f"{name}_events")).op.pool == f"landing-{name}_events"

    with dg.instance_for_test() as instance:
        for name, agent in aggregators.items():
            node = f"{name}_events"
            fired = defs.get_sensor_def(f"landing_sensor_{node}")(
                dg.build_sensor_context(instance=instance, definitions=defs))
            assert isinstance(fired, dg.SensorResult) and fired.run_requests, fired
            (request,) = fired.run_requests
            assert request.tags["ingest/channel"] == node
            drain = defs.get_schedule_def(f"drain_schedule_{node}")(
                dg.build_schedule_context(instance=instance, scheduled_execution_time=dt.datetime(2026, 11, 26)))
            assert isinstance(drain, dg.RunRequest) and drain.tags["ingest/trigger"] == "schedule"
            observed = defs.get_sensor_def(f"channel_observer_{node}")(
                dg.build_sensor_context(instance=instance, definitions=defs))
            assert isinstance(observed, dg.SensorResult)
            (observation,) = observed.asset_events
            assert observation.metadata["committed_backlog"].value == COUNTS[name]
            assert agent.grpc_address in str(observation.metadata["state_from"].value)

            result = dg.materialize([defs.get_assets_def(landed_key(node))], instance=instance,
                                    resources=defs.resources)
            assert result.success
            (materialization,) = result.asset_materializations_for_node(landing_op_name(node))
            assert materialization.metadata["events"].value == COUNTS[name]
            assert materialization.metadata["backlog_after"].value == 0

        table = read_landed(project / "var" / "landing", "events")  # both aggregators' events, one table
        assert table.num_rows == sum(COUNTS.values())
        assert pc.count_distinct(table.column("event_id")).as_py() == table.num_rows

        for name, agent in aggregators.items():
            node = f"{name}_events"
            with _client(agent, cert) as client:  # the next checkpoint holds the landing's takes
                _wait_checkpointed(client, 0, "a checkpoint after the landing")
            checks = {c.check_name: c for c in defs.resolve_job_def(checks_job_name(node)).execute_in_process(
                instance=instance, raise_on_error=False).get_asset_check_evaluations()}
            for check in CHANNEL_CHECKS:
                assert checks[check].passed, (node, checks[check])
                assert str(checks[check].metadata["state_from"].value) == f"agent {agent.grpc_address} (gRPC status)"
            reconcile = checks["landed_reconciles"]
            assert reconcile.passed, reconcile
            assert reconcile.metadata["channels_in_table"].value == 2
            assert reconcile.metadata["manifest_events_of_channel"].value == COUNTS[name]
            assert checks["landed_no_duplicate_event_ids"].passed

        stopped = aggregators["agg2"]
        stopped.terminate()
        skipped = defs.get_sensor_def("landing_sensor_agg2_events")(
            dg.build_sensor_context(instance=instance, definitions=defs))
        assert isinstance(skipped, dg.SensorResult) and not skipped.run_requests
        assert skipped.skip_reason is not None and stopped.grpc_address in str(skipped.skip_reason.skip_message)
        checks = {c.check_name: c for c in defs.resolve_job_def(checks_job_name("agg2_events")).execute_in_process(
            instance=instance, raise_on_error=False).get_asset_check_evaluations()}
        for check in CHANNEL_CHECKS:
            assert not checks[check].passed and stopped.grpc_address in str(checks[check].description), check
