"""A real HDFS on one machine, for trying and testing landings into ``hdfs://``.

* :mod:`.jars`: fetch ``hadoop-client-minicluster`` (and for ``s3a://``, ``hadoop-aws`` with the
  AWS SDK bundle) with Maven, at the Hadoop version PySpark bundles.
* :mod:`.cluster`: :class:`MiniHdfs`, a NameNode + DataNodes in a JVM of its own (which ends with
  the process that started it) with a control channel (:mod:`.control`: stop/restart a DataNode
  or the NameNode, safe mode; commands answer while another one waits), and the Hadoop client
  settings that match it (``<data>/client-conf``, for ``HADOOP_CONF_DIR``).
* ``ingest-toolkit hdfs fetch`` / ``ingest-toolkit hdfs start --data DIR`` (or
  ``python -m ingest_toolkit.hdfs --data DIR``).
"""

from __future__ import annotations

from .cluster import HdfsClusterError, HdfsInfo, MiniHdfs
from .jars import HadoopJarsError, cache_dir, classpath, fetch, hadoop_version

__all__ = ["HadoopJarsError", "HdfsClusterError", "HdfsInfo", "MiniHdfs", "cache_dir", "classpath", "fetch",
           "hadoop_version"]
