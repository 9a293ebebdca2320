"""Replication is the writing client's setting: files landed on a real HDFS carry the replication
the landing's Hadoop client is configured with, and ``landed_fully_replicated`` warns on files
that ask for more copies than the DataNodes can hold, or fewer than the cluster's.

* the development setup (``HADOOP_CONF_DIR`` = the ``client-conf`` that ``hdfs start`` writes)
  with ``ingest-toolkit land`` on a two-DataNode cluster set to 2: every landed file has 2 replicas;
* the test session's client (``spark.hadoop.dfs.replication = 1``) on the one-DataNode cluster:
  every file has 1, the check passes; a file raised to 3 (Spark's default) is under-replicated
  and the check names it and the fix; on the two-DataNode cluster the same client writes fewer
  copies than the cluster's 2, which the check reports too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.hdfs import MiniHdfs
from ingest_toolkit.land import InProcessSource, land_once
from ingest_toolkit.land.storage.hadoop_replication import read_replication
from ingest_toolkit.orchestrate.data_checks import landed_fully_replicated
from ingest_toolkit.orchestrate.verdict import Severity, Verdict

from ..land.helpers import assert_landed_exactly_once, channel_settings, landing_config, make_events, put_events
from ..orchestrate.helpers import make_setup
from .helpers import HdfsFiles, run_land, write_toml

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def _land_in_process(tmp_path: Path, root: str, spark: SparkSession, n: int = 200) -> None:
    ch = FileChannel(**channel_settings(tmp_path))
    try:
        put_events(ch, make_events(n))
        assert land_once(InProcessSource(ch, "events"), landing_config(root, max_events=1000),  # type: ignore[arg-type]
                         spark).events == n
    finally:
        ch.close()


def _check(tmp_path: Path, root: str, spark: SparkSession) -> Verdict:
    setup = make_setup(tmp_path / "orchestration")
    return landed_fully_replicated(setup.spec, setup.settings, root, lambda: spark)


def test_the_session_client_writes_replication_1_and_the_check_warns_on_a_file_asking_for_3(
        tmp_path: Path, hdfs_root: str, spark: SparkSession) -> None:
    _land_in_process(tmp_path, hdfs_root, spark)
    report = read_replication(f"{hdfs_root}/events", spark)
    assert report.cluster_replication == 1 and report.client_replication == 1 and report.live_datanodes == 1
    assert any(f.path.startswith("_manifests/") for f in report.files)  # the commit log is judged too
    assert {(f.replication, f.replicas) for f in report.files} == {(1, 1)}, report
    healthy = _check(tmp_path, hdfs_root, spark)
    assert healthy.passed and healthy.metadata["files"] == len(report.files), healthy.description

    parquet = next(f.path for f in report.files if f.path.endswith(".parquet"))
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{hdfs_root}/events/{parquet}")
    assert path.getFileSystem(spark._jsc.hadoopConfiguration()).setReplication(path, 3)  # what Spark's default writes
    warned = _check(tmp_path, hdfs_root, spark)
    assert not warned.passed and warned.severity == Severity.WARN and warned.metadata["under_replicated"] == 1
    assert f"{parquet}: 1 of 3, more than the 1 live DataNodes" in warned.description, warned.description
    assert "spark.hadoop.dfs.replication = 1" in warned.description and "\n" not in warned.description


@pytest.mark.slow
def test_the_development_client_settings_land_files_with_the_clusters_replication(
        tmp_path: Path, two_datanodes: MiniHdfs, spark: SparkSession) -> None:
    """The README's command on a cluster of two DataNodes set to 2: ``HADOOP_CONF_DIR`` = the
    client settings ``hdfs start`` wrote. Every landed file (data and manifest) has 2 replicas;
    the session's own client (set to 1) lands fewer copies than the cluster's, and the check says so."""
    root = f"{two_datanodes.uri}/dev/landing"
    settings = channel_settings(tmp_path)
    ch = FileChannel(**settings)
    expected, channel_id = put_events(ch, make_events(300)), ch.channel_id
    ch.close()
    channel_toml = write_toml(tmp_path / "channel.toml", {"channel": settings})
    landing_toml = write_toml(tmp_path / "landing.toml", {
        "landing": {"root": root, "max_events": 1000}, "spark": {"master": "local[2]"},
        "spark.conf": {"spark.driver.memory": "512m",
                       "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}})
    done = run_land(["--conf", str(landing_toml), "--channel", "events", "--channel-conf", str(channel_toml)],
                    {"HADOOP_CONF_DIR": str(two_datanodes.client_conf)})
    assert done.returncode == 0, done.stderr[-3000:]
    report = read_replication(f"{root}/events", spark)
    assert report.cluster_replication == 2 and report.live_datanodes == 2
    assert len(report.files) >= 2 and {(f.replication, f.replicas) for f in report.files} == {(2, 2)}, report
    assert _check(tmp_path, root, spark).passed
    assert_landed_exactly_once(HdfsFiles(spark).landed(root), expected, channel_id)

    other = f"{two_datanodes.uri}/session/landing"
    _land_in_process(tmp_path / "session", other, spark)  # the session's client: replication 1
    below = _check(tmp_path, other, spark)
    assert not below.passed and "ask for 1 replicas, below the cluster's dfs.replication 2" in below.description
