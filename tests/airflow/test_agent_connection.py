"""The landing and the checks take through an agent named by an ``ingest_agent`` connection: its
address, bearer token and TLS CA come from the connection (here ``AIRFLOW_CONN_EDGE_AGENT``), not
from the DAG or the landing configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.rpc.client import AgentClient

from ..agent.harness import AgentProcess, AgentSetup
from ..certs import self_signed
from .conftest import DAGS
from .helpers import run_dag

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "airflow-test-token"
_DAG = '''
from datetime import UTC, datetime

from airflow.sdk import DAG

from ingest_toolkit.airflow import ChannelCheckOperator, LandChannelOperator

with DAG(dag_id="land_through_connection", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    land = LandChannelOperator(task_id="land", channel="events", agent_conn_id="edge_agent")
    land >> ChannelCheckOperator(task_id="landed_reconciles", check="landed_reconciles", channel="events",
                                 agent_conn_id="edge_agent")
'''


def _connection(monkeypatch: pytest.MonkeyPatch, agent: AgentProcess, ca: Path, token: str) -> None:
    host, port = agent.grpc_address.rsplit(":", 1)
    monkeypatch.setenv("AIRFLOW_CONN_EDGE_AGENT", json.dumps({
        "conn_type": "ingest_agent", "host": host, "port": int(port), "password": token,
        "extra": {"tls_ca": str(ca)}}))


def test_landing_through_the_connections_agent_with_token_and_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 airflow_db: Path, spark: SparkSession) -> None:
    cert, key = self_signed(tmp_path / "tls")
    setup = AgentSetup(tmp_path / "agent", security=(
        f'token_env = "INGEST_TEST_AGENT_TOKEN"\ntls = {{ cert_file = "{cert}", key_file = "{key}" }}\n'))
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "landing.toml").write_text(f'[landing]\nroot = "{tmp_path / "landing"}"\n[spark]\nmaster = "local[2]"\n')
    (conf / "orchestrate.toml").write_text(f'[orchestrate]\nagent_conf = "{setup.conf}"\n')
    monkeypatch.setenv("INGEST_CONF_DIR", str(conf))
    (DAGS / "land_through_connection.py").write_text(_DAG)
    agent = AgentProcess(setup, env={"INGEST_TEST_AGENT_TOKEN": TOKEN}).wait_ready()
    try:
        with AgentClient(agent.grpc_address, token=TOKEN, tls_ca=cert) as client:
            client.put([Event(f"{n}".encode(), {"timestamp": "1763798400000"}) for n in range(300)], channel="events")

        _connection(monkeypatch, agent, cert, "a-wrong-token")
        refused = run_dag("land_through_connection")
        assert refused.tasks == {"land": "failed", "landed_reconciles": "upstream_failed"}

        _connection(monkeypatch, agent, cert, TOKEN)
        landed = run_dag("land_through_connection")
        assert landed.tasks == {"land": "success", "landed_reconciles": "success"}, landed.tasks
        assert landed.xcom["land"]["events"] == 300
        assert landed.xcom["land"]["source"].startswith(f"agent {agent.grpc_address}")
        reconcile = landed.xcom["landed_reconciles"]
        assert reconcile["passed"] and reconcile["metadata"]["takes_source"] == "agent status (live counters)"
        with AgentClient(agent.grpc_address, token=TOKEN, tls_ca=cert) as client:
            assert client.status("events")["live"]["takes_committed"] == 300
        assert agent.proc.poll() is None  # the agent kept its channel all along
    finally:
        (DAGS / "land_through_connection.py").unlink()
        agent.terminate()
