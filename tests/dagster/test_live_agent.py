"""The Dagster landing asset (the UI's Materialize) while an agent runs as a service and owns the
channel: it finds the agent and takes through its leased gRPC takes; the checks read the agent's
live counters."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.dagster.factory import build_definitions
from ingest_toolkit.dagster.naming import checks_job_name, landed_key, landing_op_name
from ingest_toolkit.orchestrate.settings import OrchestrationSettings, load_channel_specs
from ingest_toolkit.rpc.client import AgentClient
from tests.agent.harness import AgentProcess, AgentSetup

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_materializing_the_landing_asset_takes_through_the_agent_that_owns_the_channel(
        tmp_path: Path, spark: SparkSession) -> None:
    agent = AgentProcess(AgentSetup(tmp_path / "agent")).wait_ready()
    try:
        with AgentClient(agent.grpc_address) as client:
            client.put([Event(f"{n}".encode(), {"timestamp": "1763798400000"}) for n in range(800)], channel="events")
        landing_conf = tmp_path / "landing.toml"
        landing_conf.write_text(f'[landing]\nroot = "{tmp_path / "landing"}"\n[spark]\nmaster = "local[2]"\n')
        settings = OrchestrationSettings(agent_conf=str(agent.setup.conf), landing_conf=str(landing_conf),
                                         curated_root=str(tmp_path / "curated"))
        defs = build_definitions(settings, load_channel_specs(agent.setup.conf))
        with dg.instance_for_test() as instance:
            result = dg.materialize([defs.get_assets_def(landed_key("events"))], instance=instance,
                                    resources=defs.resources)
            assert result.success
            (materialization,) = result.asset_materializations_for_node(landing_op_name("events"))
            meta = materialization.metadata
            assert meta["events"].value == 800 and meta["backlog_after"].value == 0
            assert str(meta["source"].value).startswith(f"agent {agent.grpc_address} (pid {agent.proc.pid}")
            notices = [e.user_message for e in instance.all_logs(result.run_id) if "is owned by agent" in
                       e.user_message]
            assert notices and agent.grpc_address in notices[0]
            checks = defs.resolve_job_def(checks_job_name("events")).execute_in_process(
                instance=instance, raise_on_error=False).get_asset_check_evaluations()
            reconcile = next(c for c in checks if c.check_name == "landed_reconciles")
            assert reconcile.passed and "agent status" in str(reconcile.metadata), reconcile
        assert agent.proc.poll() is None  # the agent kept its channel all along
    finally:
        agent.terminate()
