"""Where a Delta or Iceberg table lives, as the Arrow-native libraries reach it.

The landing root is a Hadoop-style URI, the one Spark uses (``file://``, ``hdfs://``,
``s3a://``); delta-rs and PyIceberg reach the same places without a JVM, each with its own
spelling and settings:

* ``file://`` roots: a local path;
* ``hdfs://host:port/...``: delta-rs natively (its Rust HDFS client, no JVM, no libhdfs);
  PyIceberg through :class:`~.hdfs_io.HdfsFileIO` (fsspec over the same Rust client:
  ``hdfs-native``);
* ``s3a://bucket/...`` (or ``s3://``): ``s3://bucket/...`` for both, with the endpoint, keys,
  region and plain-HTTP flag taken from the S3A settings the landing already gives Spark
  (``spark.hadoop.fs.s3a.*`` in ``[spark.conf]``), so one configuration serves Spark and the
  table libraries. Environment credentials (``AWS_*``) apply when S3A's are not set.

Anything else is a ConfigError naming the root: Delta and Iceberg tables need one of these.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

from ...errors import ConfigError

__all__ = ["HDFS_FILE_IO", "TableIO", "table_io"]

_S3A = "spark.hadoop.fs.s3a."
HDFS_FILE_IO = "ingest_toolkit.land.tables.hdfs_io.HdfsFileIO"  # PyIceberg loads it by name


@dataclass(frozen=True)
class TableIO:
    """The table's location for the libraries (``uri``), the Spark-side spelling of the same
    place (``spark_uri``), and each library's storage settings."""

    uri: str
    spark_uri: str
    scheme: str  # "file", "hdfs" or "s3"
    delta_options: dict[str, str] = field(default_factory=dict)
    iceberg_properties: dict[str, str] = field(default_factory=dict)

    def to_spark(self, location: str) -> str:
        """A location the libraries gave (a data file's URI) as Spark reads it."""
        if self.scheme == "file":
            path = location.removeprefix("file://")
            return f"file://{path}" if path.startswith("/") else location
        if self.scheme == "s3" and location.startswith("s3://"):
            prefix = self.spark_uri.split("://", 1)[0]
            return f"{prefix}://{location.removeprefix('s3://')}"
        return location

    def to_library(self, location: str) -> str:
        """A location as Spark names it (under ``spark_uri``) as the libraries name it."""
        if self.scheme == "file":
            return location.removeprefix("file://") if location.startswith("file:///") else location
        if self.scheme == "s3":
            return "s3://" + location.split("://", 1)[1]
        return location

    def data_written_since(self, since: float) -> bool:
        """Whether a Parquet file appeared under a local table since ``since`` (a crash test's
        probe of "the write has begun"; always False for remote tables)."""
        if self.scheme != "file":
            return False
        for directory, _dirs, files in os.walk(self.uri):
            for name in files:
                if name.endswith(".parquet") and os.path.getmtime(os.path.join(directory, name)) >= since:
                    return True
        return False

    def child(self, name: str) -> TableIO:
        """The same settings for ``<uri>/<name>`` (a channel's table below the landing root)."""
        return TableIO(f"{self.uri.rstrip('/')}/{name}", f"{self.spark_uri.rstrip('/')}/{name}", self.scheme,
                       dict(self.delta_options), dict(self.iceberg_properties))


def table_io(root: str, spark_conf: Mapping[str, str] | None = None) -> TableIO:
    """The :class:`TableIO` of a landing root URI; ``spark_conf``: the landing's Spark properties
    (where the S3A settings are)."""
    parsed = urlparse(root)
    conf = dict(spark_conf or {})
    if parsed.scheme == "file":
        return TableIO(parsed.path.rstrip("/") or "/", root, "file")
    if parsed.scheme == "hdfs":
        if not parsed.hostname:
            raise ConfigError(f"{root}: an hdfs:// root for a Delta or Iceberg table needs the NameNode "
                              "(hdfs://host:port/path)", key="landing.root")
        namenode = f"hdfs://{parsed.hostname}:{parsed.port or 8020}"
        return TableIO(root, root, "hdfs", {},
                       {"py-io-impl": HDFS_FILE_IO, "hdfs.namenode": namenode})
    if parsed.scheme in ("s3", "s3a"):
        uri = f"s3://{parsed.netloc}{parsed.path}".rstrip("/")
        delta, iceberg = _s3_settings(conf)
        return TableIO(uri, root, "s3", delta, iceberg)
    raise ConfigError(f"{root}: Delta and Iceberg tables land into file://, hdfs:// or s3a:// roots, not "
                      f"{parsed.scheme or 'a plain path'}://", key="landing.root")


def _s3_settings(conf: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """delta-rs storage options and PyIceberg properties from the S3A settings of ``conf``."""
    endpoint = conf.get(f"{_S3A}endpoint", "")
    if endpoint and "://" not in endpoint:
        plain = conf.get(f"{_S3A}connection.ssl.enabled", "true").lower() == "false"
        endpoint = f"{'http' if plain else 'https'}://{endpoint}"
    region = conf.get(f"{_S3A}endpoint.region") or conf.get(f"{_S3A}region") or ""
    key, secret = conf.get(f"{_S3A}access.key", ""), conf.get(f"{_S3A}secret.key", "")
    path_style = conf.get(f"{_S3A}path.style.access", "false").lower() == "true"
    delta: dict[str, str] = {}
    iceberg: dict[str, str] = {}
    if endpoint:
        delta["AWS_ENDPOINT_URL"], iceberg["s3.endpoint"] = endpoint, endpoint
        if endpoint.startswith("http://"):
            delta["AWS_ALLOW_HTTP"] = "true"
    if region:
        delta["AWS_REGION"], iceberg["s3.region"] = region, region
    if key and secret:
        delta["AWS_ACCESS_KEY_ID"], delta["AWS_SECRET_ACCESS_KEY"] = key, secret
        iceberg["s3.access-key-id"], iceberg["s3.secret-access-key"] = key, secret
    if path_style:
        delta["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        iceberg["s3.force-virtual-addressing"] = "false"
    return delta, iceberg
