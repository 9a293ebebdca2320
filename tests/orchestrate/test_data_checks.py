"""Reconciliation and duplicate-id verdicts over real Parquet files and manifests (pyarrow, no Spark, no Dagster)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ingest_toolkit.land.config import load_landing_config
from ingest_toolkit.land.manifest import MANIFEST_DIR, Manifest, ManifestFile
from ingest_toolkit.land.storage.hadoop_replication import FileReplication, ReplicationReport
from ingest_toolkit.orchestrate import data_checks
from ingest_toolkit.orchestrate.data_checks import (
    landed_fully_replicated,
    landed_no_duplicate_event_ids,
    landed_reconciles,
)
from ingest_toolkit.orchestrate.verdict import PathValue, Severity

from .helpers import Setup, make_setup

HOUR = "event_date=2026-11-20/event_hour=08"


def _no_spark() -> None:
    raise AssertionError("a local table is read with pyarrow, without Spark")


def _write(table_dir: Path, name: str, ids: list[str]) -> None:
    (table_dir / HOUR).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"event_id": ids}), table_dir / HOUR / name)


def _landed(setup: Setup, ids: list[str], manifest_events: int) -> Path:
    """A landed table of ``ids`` and one committed manifest that records ``manifest_events``."""
    table = setup.root / "landing" / "events"
    _write(table, "part-0.parquet", ids)
    manifest = Manifest(channel="events", channel_id="ab" * 16, batch_id="b1", seq_ranges=((1, manifest_events),),
                        count=manifest_events, files=(ManifestFile(f"{HOUR}/part-0.parquet", 1, "_staging/b1"),),
                        created="2026-11-20T08:30:00+00:00", partitions=(HOUR,), commit=1)
    (table / MANIFEST_DIR).mkdir(parents=True)
    (table / MANIFEST_DIR / manifest.name).write_text(json.dumps(manifest.to_json()))
    return table


def test_reconcile_and_duplicates_pass_on_a_consistent_table(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, landing_only_taker=False)
    _landed(setup, [f"id-{i}" for i in range(30)], 30)
    config = load_landing_config(setup.conf / "landing.toml")
    reconciled = landed_reconciles(setup.spec, setup.settings, config, _no_spark)
    assert reconciled.passed and reconciled.description == "30 events in 1 manifests = 30 landed rows"
    assert reconciled.metadata["manifest_events"] == 30 and reconciled.metadata["landed_rows"] == 30
    unique = landed_no_duplicate_event_ids(setup.spec, setup.settings, config.root, _no_spark)
    assert unique.passed and unique.metadata["table"] == PathValue(f"{config.root}/events")
    assert isinstance(unique.metadata["table"], PathValue)


def test_duplicates_and_extra_rows_fail_with_the_numbers(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, landing_only_taker=False)
    table = _landed(setup, [f"id-{i}" for i in range(30)], 30)
    _write(table, "part-1.parquet", ["id-1", "id-2", "id-3"])  # landed twice
    config = load_landing_config(setup.conf / "landing.toml")
    reconciled = landed_reconciles(setup.spec, setup.settings, config, _no_spark)
    assert not reconciled.passed and reconciled.severity == Severity.ERROR
    assert reconciled.description == "manifests record 30 events but the landed table holds 33 rows"
    unique = landed_no_duplicate_event_ids(setup.spec, setup.settings, config.root, _no_spark)
    assert not unique.passed and unique.description == "landed table: 3 event_ids occur more than once (3 extra rows)"
    assert sorted(unique.metadata["sample_duplicates"]) == ["id-1", "id-2", "id-3"]
    assert unique.metadata["duplicates_by_partition"] == {HOUR: 3}  # the copies sit in the same hour
    assert unique.runbook.endswith("docs/runbook.md#landed_no_duplicate_event_ids")


def test_reconcile_fails_with_the_reason_when_the_agent_does_not_answer(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)  # landing_only_taker: takes_committed must be read from the agent
    _landed(setup, ["x"], 1)
    landing = (setup.conf / "landing.toml").read_text()
    (setup.conf / "landing.toml").write_text(landing.replace("[landing]\n", '[landing]\nagent = "127.0.0.1:9"\n'))
    config = load_landing_config(setup.conf / "landing.toml")
    verdict = landed_reconciles(setup.spec, setup.settings, config, _no_spark)
    assert not verdict.passed
    assert "could not be read from the agent at 127.0.0.1:9" in verdict.description, verdict.description


def test_replication_is_not_judged_off_hdfs_and_no_spark_starts(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    _landed(setup, ["id-1"], 1)
    config = load_landing_config(setup.conf / "landing.toml")
    verdict = landed_fully_replicated(setup.spec, setup.settings, config.root, _no_spark)
    assert verdict.passed and verdict.severity == Severity.WARN and "is not on HDFS" in verdict.description
    assert verdict.metadata["on_hdfs"] is False and verdict.runbook.endswith("docs/runbook.md#landed_fully_replicated")


def _replicated(tmp_path: Path, files: list[tuple[int, int]], cluster: int, live: int | None) -> data_checks.Verdict:
    """The verdict on files of (asked, replicas), as if read from an HDFS whose dfs.replication is ``cluster``."""
    setup = make_setup(tmp_path)
    report = ReplicationReport(tuple(FileReplication(f"p/f{i}.parquet", asked, replicas)
                                     for i, (asked, replicas) in enumerate(files)), cluster, 3, live)
    return data_checks._replication_verdict(setup.settings, "hdfs://nn:8020/landing/events", report)


def test_replication_verdicts_name_the_cause_and_the_fix(tmp_path: Path) -> None:
    healthy = _replicated(tmp_path, [(2, 2), (2, 2)], cluster=2, live=2)
    assert healthy.passed and healthy.metadata["files_by_replication"] == {"2": 2}, healthy.description
    beyond = _replicated(tmp_path, [(3, 1), (1, 1)], cluster=1, live=1)  # Spark's default 3 on one DataNode
    assert not beyond.passed and beyond.severity == Severity.WARN and beyond.metadata["under_replicated"] == 1
    assert "1 of 2 landed files are under-replicated" in beyond.description
    assert "p/f0.parquet: 1 of 3, more than the 1 live DataNodes" in beyond.description
    assert "spark.hadoop.dfs.replication = 1" in beyond.description and "hdfs dfs -setrep 1 " in beyond.description
    below = _replicated(tmp_path, [(1, 1)], cluster=3, live=None)  # a client set lower than the cluster
    assert not below.passed and "ask for 1 replicas, below the cluster's dfs.replication 3" in below.description
    assert str(below.metadata["live_datanodes"]).startswith("unknown")
    lost = _replicated(tmp_path, [(3, 2)], cluster=3, live=3)  # a DataNode lost, re-replication pending
    assert not lost.passed and "bring back the DataNodes" in lost.description
    assert "\n" not in beyond.description + below.description + lost.description
