"""The provider without a database: the example DAGs parse, the connection type, the missing extra."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import CronDataIntervalTimetable

from ingest_toolkit.airflow import (
    ChannelCheckOperator,
    CurateHourOperator,
    IngestAgentHook,
    LandChannelOperator,
    curated_asset,
    landed_asset,
)
from ingest_toolkit.errors import ConfigError

from .conftest import EXAMPLES, REPO


def test_the_example_dags_load_without_import_errors() -> None:
    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["curate_events", "ingest_events", "maintain_events"]
    ingest, curate = bag.dags["ingest_events"], bag.dags["curate_events"]
    assert ingest.max_active_runs == 1 and curate.max_active_runs == 1
    assert ingest.get_task("wait_for_backlog").downstream_task_ids == {"land"}
    assert ingest.get_task("land").downstream_task_ids == {
        "refcounts_match_recount", "referenced_logs_intact", "drained_logs_deleted", "checkpoint_fresh",
        "recovery_losses_acknowledged", "backlog_below_capacity", "forward_sinks_reachable", "landed_reconciles",
        "landed_no_duplicate_event_ids", "landed_files_per_partition", "landed_fully_replicated"}
    assert ingest.get_task("land").outlets == [landed_asset("events")]
    assert curate.get_task("curate_hour").outlets == [curated_asset("events")]
    assert isinstance(curate.timetable, CronDataIntervalTimetable) and curate.catchup


def test_operators_take_their_asset_per_channel_and_refuse_an_unknown_check() -> None:
    assert LandChannelOperator(task_id="l", channel="clicks").outlets == [landed_asset("clicks")]
    assert CurateHourOperator(task_id="c", channel="clicks").outlets == [curated_asset("clicks")]
    assert landed_asset("clicks") != landed_asset("events") != curated_asset("events")
    with pytest.raises(ConfigError, match="unknown check 'landed_unique'; the checks: refcounts_match_recount"):
        ChannelCheckOperator(task_id="x", check="landed_unique", channel="events")


def test_the_connection_gives_the_agent_its_token_and_tls_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_EDGE_AGENT", json.dumps({
        "conn_type": "ingest_agent", "host": "10.0.0.7", "port": 7431, "password": "s3cret",
        "extra": {"tls_ca": "/etc/ingest/ca.pem", "tls_cert": "/etc/ingest/client.pem",
                  "tls_key": "/etc/ingest/client.key"}}))
    hook = IngestAgentHook("edge_agent")
    assert hook.landing_overrides() == {"agent": "10.0.0.7:7431", "agent_tls_ca": "/etc/ingest/ca.pem",
                                        "agent_tls_cert": "/etc/ingest/client.pem",
                                        "agent_tls_key": "/etc/ingest/client.key"}
    assert hook.token() == "s3cret"
    monkeypatch.setenv("AIRFLOW_CONN_PLAIN", json.dumps({"conn_type": "ingest_agent", "host": "::1", "port": 7431}))
    assert IngestAgentHook("plain").landing_overrides() == {"agent": "[::1]:7431"}
    assert IngestAgentHook("plain").token() is None


@pytest.mark.parametrize(("conn", "message"), [
    ({"host": "10.0.0.7"}, "Airflow connection 'bad' has no host or port"),
    ({"host": "10.0.0.7", "port": 7431, "extra": {"tls_ca_file": "x"}},
     "Airflow connection 'bad': unknown extra keys ['tls_ca_file']"),
])
def test_a_bad_connection_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch, conn: dict[str, object],
                                                message: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BAD", json.dumps({"conn_type": "ingest_agent", **conn}))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        IngestAgentHook("bad").landing_overrides()


def test_airflow_lists_the_connection_type() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hooks = ProvidersManagerTaskRuntime().hooks
    assert "ingest_agent" in hooks
    info = hooks["ingest_agent"]
    assert info is not None and info.hook_class_name == "ingest_toolkit.airflow.hooks.IngestAgentHook"


_BLOCKED = f"""
import sys
sys.path.insert(0, {str(REPO / "tests" / "adoption")!r})
from blocked_cli import RefuseExtras
sys.meta_path.insert(0, RefuseExtras())
import ingest_toolkit, ingest_toolkit.cli
try:
    import ingest_toolkit.airflow
except Exception as err:
    print(type(err).__name__ + ": " + str(err))
"""


def test_without_the_extra_the_provider_is_one_line_naming_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _BLOCKED], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("MissingExtraError: ingest_toolkit.airflow needs Airflow: "
                           "pip install 'ingest-toolkit[airflow]'\n")
