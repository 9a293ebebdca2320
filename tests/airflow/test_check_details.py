"""A failed channel check tells on-call what the runbook says to read (issue 31, item 4).

Its task used to log only the verdict's one-line description: the details (``orphaned``,
``mismatches``, the segments) went neither to the log nor to XCom, as a failed task returns
nothing. ``dag.test()`` of a DAG of real check tasks on a real channel, damaged as the runbook
describes: drained segments copied back into the data directory (``orphaned``) and a reference
count in ``checkpoint.meta`` that a recount contradicts (``mismatches``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ..orchestrate.helpers import damage_channel, load_channel_specs
from .conftest import DAGS
from .helpers import airflow_setup, run_dag

pytestmark = pytest.mark.integration

_DAG = '''
from datetime import UTC, datetime

from airflow.sdk import DAG

from ingest_toolkit.airflow import ChannelCheckOperator

with DAG(dag_id="damaged_channel", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    for check in ("drained_logs_deleted", "refcounts_match_recount"):
        ChannelCheckOperator(task_id=check, check=check, channel="events")
'''


def test_a_failed_check_logs_its_details_and_pushes_its_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                airflow_db: Path, capfd: pytest.CaptureFixture[str],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    setup = airflow_setup(tmp_path, drained_log_grace_seconds=0)
    monkeypatch.setenv("INGEST_CONF_DIR", str(setup.conf))
    restored = damage_channel(load_channel_specs(setup.conf / "agent.toml")[0], tmp_path / "saved")
    assert restored, "the drain should have deleted segments"
    (DAGS / "damaged_channel.py").write_text(_DAG)
    try:
        run = run_dag("damaged_channel")
    finally:
        (DAGS / "damaged_channel.py").unlink()
    out, err = capfd.readouterr()
    log = out + err + caplog.text
    assert run.state == "failed" and run.tasks == dict.fromkeys(["drained_logs_deleted",
                                                                 "refcounts_match_recount"], "failed")
    drained = run.xcom["drained_logs_deleted"]
    assert drained["passed"] is False and drained["severity"] == "ERROR"
    segments = [name for name in restored if not name.endswith(".meta")]
    assert sorted(os.path.basename(p) for p in drained["metadata"]["orphaned"]) == segments
    mismatches = run.xcom["refcounts_match_recount"]["metadata"]["mismatches"]
    assert len(mismatches) == 1 and next(iter(mismatches.values()))["recorded"] == (
        next(iter(mismatches.values()))["recounted"] + 7)
    assert f"orphaned: {json.dumps(drained['metadata']['orphaned'])}" in log
    assert f"mismatches: {json.dumps(mismatches, sort_keys=True)}" in log
