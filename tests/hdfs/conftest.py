"""A real HDFS for the tests of this directory: one MiniDFSCluster process per test session.

The cluster runs in a JVM of its own (``ingest_toolkit.hdfs.MiniHdfs``), not in the Spark
driver's, so a landing process can be SIGKILLed without touching HDFS, and a test can stop a
DataNode or the NameNode, or enter safe mode, through the cluster's control channel while a
landing runs. One DataNode, ``dfs.replication=1`` (a dead DataNode fails the write pipeline;
the test session's Spark client writes with replication 1 too: tests/conftest.py),
permissions on, ``dfs.datanode.synconclose=true``. ``two_datanodes`` is a second cluster, with
two DataNodes and ``dfs.replication=2``, for the module that asks for it. The jars are fetched with Maven on first
use (offline and quick once cached); without Maven or a network the session fails with one
line saying so. Every test lands under its own directory of the one namespace.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ingest_toolkit.hdfs import MiniHdfs, fetch

from .helpers import HdfsFiles

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniHdfs]:
    fetch(("hdfs",))
    data = tmp_path_factory.mktemp("minihdfs") / "data"
    # No 30 s safe-mode extension after a NameNode restart (the fault tests restart it).
    with MiniHdfs.start(data, conf={"dfs.replication": "1", "dfs.namenode.safemode.extension": "0"}) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def two_datanodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniHdfs]:
    """A cluster of two DataNodes with ``dfs.replication=2`` (its client settings say so too:
    ``client_conf``), for the tests of one module."""
    fetch(("hdfs",))
    data = tmp_path_factory.mktemp("minihdfs-two") / "data"
    with MiniHdfs.start(data, datanodes=2, conf={"dfs.replication": "2"}) as cluster:
        yield cluster


@pytest.fixture
def healthy_hdfs(hdfs: MiniHdfs) -> Iterator[MiniHdfs]:
    """The cluster, restored after the test whatever the test did to it (safe mode, a stopped
    DataNode or NameNode), so that later tests see a healthy HDFS."""
    try:
        yield hdfs
    finally:
        if not hdfs.command("status").get("namenode", True):
            hdfs.start_namenode()
        for index in hdfs.command("status").get("datanodes_stopped", []):
            hdfs.start_datanode(int(index))
        hdfs.safe_mode("leave")


@pytest.fixture
def hdfs_root(hdfs: MiniHdfs) -> str:
    """A landing root of its own for the test: hdfs://127.0.0.1:<port>/t-<id>/landing."""
    return f"{hdfs.uri}/t-{uuid.uuid4().hex[:12]}/landing"


@pytest.fixture
def files(hdfs: MiniHdfs, spark: SparkSession) -> HdfsFiles:
    return HdfsFiles(spark)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
