"""``python -m dagster_defs.demo --hdfs URI`` on the one-DataNode HDFS: every check passes, the
replication check included, because the demo's Spark client writes the cluster's replication."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ingest_toolkit.hdfs import MiniHdfs
from ingest_toolkit.land.storage.hadoop_replication import read_replication
from ingest_toolkit.orchestrate.verdict import CHECKS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.integration
def test_the_demo_on_hdfs_lands_files_with_the_clusters_replication(tmp_path: Path, hdfs: MiniHdfs,
                                                                      spark: SparkSession) -> None:
    shutil.copytree(REPO / "conf", tmp_path / "conf")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INGEST_", "DAGSTER_HOME", "HADOOP_CONF_DIR"))}
    env["PYTHONPATH"] = str(REPO)  # dagster_defs is the checkout's project, not installed
    remote = f"{hdfs.uri}/t-demo"
    done = subprocess.run([sys.executable, "-m", "dagster_defs.demo", "--files", "2", "--lines", "300",
                           "--hdfs", remote], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "HDFS files are written with replication 1" in output, output[-3000:]
    assert f"{len(CHECKS)} of {len(CHECKS)} checks passed" in output, output[-3000:]
    report = read_replication(f"{remote}/demo/landing/events", spark)
    assert report.files and {(f.replication, f.replicas) for f in report.files} == {(1, 1)}, report
    landing_toml = (tmp_path / "var" / "demo" / "conf" / "landing.toml").read_text()
    assert '"spark.hadoop.dfs.replication" = "1"' in landing_toml  # dg dev on the demo's state writes 1 too
