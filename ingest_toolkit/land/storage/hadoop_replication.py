"""How the files of a table on HDFS are replicated, read through a Spark session's Hadoop client.

HDFS keeps with every file the replication its *writer's* client asked for (``dfs.replication``
of the process that created it: Spark's client defaults to 3, whatever the cluster is set to),
and the NameNode reports, for each block, the DataNodes that hold a replica. :func:`read_replication`
lists a directory once (``FileSystem.listFiles``, which returns the block locations with the
statuses) and gathers, per file with data, what it asks for and the fewest replicas any of its
blocks has, together with the cluster's own default (the NameNode's server defaults), the
replication this client writes with, and the live DataNodes (a report only a superuser may read:
None otherwise). The asset check ``landed_fully_replicated`` judges it
(:mod:`ingest_toolkit.orchestrate.data_checks`).

:func:`use_cluster_replication` is for development setups (the demo's ``--hdfs``): it gives a
Spark session's client the cluster's replication when its configuration names none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FileReplication", "ReplicationReport", "read_replication", "use_cluster_replication"]

_SKIPPED = ("_staging/",)  # transient: Spark's output before its manifest


@dataclass(frozen=True, slots=True)
class FileReplication:
    path: str  # relative to the directory read
    replication: int  # what the file asks for (FileStatus.getReplication: its writer's dfs.replication)
    replicas: int  # the fewest replicas the NameNode reports for any of its blocks


@dataclass(frozen=True, slots=True)
class ReplicationReport:
    """The replication of the files with data below one directory (module docstring)."""

    files: tuple[FileReplication, ...]
    cluster_replication: int  # the NameNode's dfs.replication (server defaults)
    client_replication: int  # what the reading client (the landing's Spark session) writes with
    live_datanodes: int | None  # None: the NameNode refused its DataNode report (not a superuser)


def read_replication(uri: str, spark: Any) -> ReplicationReport:
    """The replication of every file with at least one block below ``uri`` (recursively;
    ``_staging`` skipped), through ``spark``'s JVM. An absent directory has no files."""
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    files = _files(fs, path) if fs.exists(path) else ()
    return ReplicationReport(files, int(fs.getServerDefaults(path).getReplication()),
                             int(fs.getDefaultReplication(path)), _live_datanodes(fs, jvm))


def _files(fs: Any, path: Any) -> tuple[FileReplication, ...]:
    base = str(fs.makeQualified(path).toString()).rstrip("/") + "/"
    found = []
    statuses = fs.listFiles(path, True)
    while statuses.hasNext():
        status = statuses.next()
        rel = str(status.getPath().toString()).removeprefix(base)
        blocks = status.getBlockLocations()
        if rel.startswith(_SKIPPED) or not len(blocks):
            continue  # an empty file (an index entry) has no block to replicate
        found.append(FileReplication(rel, int(status.getReplication()), min(len(b.getNames()) for b in blocks)))
    return tuple(found)


def _live_datanodes(fs: Any, jvm: Any) -> int | None:
    """The DataNodes the NameNode counts live; None when it does not tell this user (the report
    needs superuser rights) or the file system is not HDFS."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]

    try:
        live = jvm.org.apache.hadoop.hdfs.protocol.HdfsConstants.DatanodeReportType.LIVE
        return len(fs.getDataNodeStats(live))
    except Py4JError:
        return None


def use_cluster_replication(uri: str, spark: Any) -> int:
    """Make ``spark``'s Hadoop client write files under ``uri`` with the cluster's replication (its
    NameNode's server defaults) unless the client's configuration names one
    (``spark.hadoop.dfs.replication``, ``dfs.replication`` in ``HADOOP_CONF_DIR``). Returns the
    replication the client writes with. Hadoop keeps one client per cluster, with the settings
    it was created with: this must run before anything in the JVM opened ``uri``'s cluster
    (the return value tells whether it did)."""
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(uri)
    if not _names_replication(conf):
        probe = jvm.org.apache.hadoop.fs.FileSystem.newInstance(path.toUri(), conf)  # not the cached client
        try:
            conf.set("dfs.replication", str(int(probe.getServerDefaults(path).getReplication())))
        finally:
            probe.close()
    return int(path.getFileSystem(conf).getDefaultReplication(path))


def _names_replication(conf: Any) -> bool:
    """Whether ``dfs.replication`` is set by something other than Hadoop's own defaults."""
    sources = conf.getPropertySources("dfs.replication")
    return conf.get("dfs.replication") is not None and not (
        sources is not None and all(str(s).endswith("-default.xml") for s in sources))
