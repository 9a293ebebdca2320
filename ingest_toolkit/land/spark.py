"""Spark side of the landing: the session, and writing one Arrow table as partitioned Parquet.

The Arrow table goes to Spark as it is (``spark.createDataFrame(pyarrow.Table)``, Arrow record
batches straight into the JVM, or into the Spark Connect plan), with no Python row objects.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .batches import PARTITION_COLUMNS
from .config import REQUIRED_SPARK_CONF, LandingConfig, SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["spark_session", "write_parquet"]

_MIN_TASK_BYTES = 16 << 20  # smaller batches are written by fewer tasks: fewer, larger files


def spark_session(settings: SparkSettings) -> SparkSession:
    """Get or create the session ``settings`` describe: Spark Connect when ``remote`` is set,
    else a classic session on ``master`` (``local[*]`` by default).

    An existing session of this process is reused (Spark allows one per process); the
    properties the landing needs are set on it at every write anyway.
    """
    from pyspark.sql import SparkSession

    builder: Any = SparkSession.builder
    if settings.remote:
        builder = builder.remote(settings.remote)
        conf = {**settings.conf, **REQUIRED_SPARK_CONF}  # static properties belong to the server
    else:
        builder = builder.master(settings.master)
        conf = settings.effective_conf()
    builder = builder.appName(settings.app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    if not settings.remote:
        session.sparkContext.setLogLevel(settings.log_level)
    return session


def ensure_landing_conf(spark: SparkSession) -> None:
    """Set the runtime properties the landed schema depends on (a shared session may lack them)."""
    for key, value in REQUIRED_SPARK_CONF.items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)


def write_parquet(spark: SparkSession, table: pa.Table, uri: str, config: LandingConfig) -> None:
    """Write ``table`` under ``uri`` (which must not exist) partitioned by event date and hour.

    Returns after Spark's job commit: every file is in place and ``_SUCCESS`` written, or it
    raises. ``maxRecordsPerFile`` comes from ``target_file_bytes`` and the batch's row size.
    """
    ensure_landing_conf(spark)
    rows = max(1, table.num_rows)
    row_bytes = max(1, table.nbytes // rows)
    frame = spark.createDataFrame(table).coalesce(_tasks(spark, config, table.nbytes))
    (frame.write.mode("error")
     .option("compression", config.compression)
     .option("maxRecordsPerFile", max(1, config.target_file_bytes // row_bytes))
     .partitionBy(*PARTITION_COLUMNS)
     .parquet(uri))


def _tasks(spark: SparkSession, config: LandingConfig, nbytes: int) -> int:
    if config.write_partitions:
        return config.write_partitions
    try:
        parallelism = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext on the client
        parallelism = 2
    return max(1, min(parallelism, math.ceil(nbytes / _MIN_TASK_BYTES)))
