"""Spark side of the landing: the session, and writing one Arrow table as partitioned Parquet.

The Arrow table goes to Spark as it is (``spark.createDataFrame(pyarrow.Table)``, Arrow record
batches straight into the JVM, or into the Spark Connect plan), with no Python row objects.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .batches import PARTITION_COLUMNS
from .config import REQUIRED_SPARK_CONF, LandingConfig, SparkSettings
from .diagnose import check_java, explain_start_failure
from .jvm_stderr import launch_gateway

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["spark_session", "write_parquet"]

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
_MIN_TASK_BYTES = 16 << 20  # smaller batches are written by fewer tasks: fewer, larger files


def spark_session(settings: SparkSettings, *, quiet: bool = False) -> SparkSession:
    """Get or create the session ``settings`` describe: Spark Connect when ``remote`` is set,
    else a classic session on ``master`` (``local[*]`` by default).

    An existing session of this process is reused (Spark allows one per process); the
    properties the landing needs are set on it at every write anyway. A new classic session
    logs through the toolkit's log4j configuration (``log4j2.properties`` beside this module) at
    ``settings.log_level``, or not at all with ``quiet`` (a command line whose errors are one
    line); its JVM's start-up notices are logged at DEBUG, not written to stderr
    (:mod:`.jvm_stderr`); a local one binds to 127.0.0.1. No Java runtime, or one Spark cannot use, raises
    SparkStartError saying what to install, before or after the JVM is launched.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    builder: Any = SparkSession.builder
    fresh = not settings.remote and SparkContext._active_spark_context is None
    if settings.remote:
        builder = builder.remote(settings.remote)
        conf = {**settings.conf, **REQUIRED_SPARK_CONF}  # static properties belong to the server
    else:
        builder = builder.master(settings.master)
        conf = _with_log_config(settings.effective_conf(), quiet)
    if fresh:
        check_java()
    builder = builder.appName(settings.app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    with _local_address(settings.master if fresh else None):
        if fresh and SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
            _launch_jvm({**conf, "spark.master": settings.master, "spark.app.name": settings.app_name})
        session: SparkSession = _get_or_create(builder)
    if not settings.remote:
        session.sparkContext.setLogLevel(settings.log_level)
    return session


def _launch_jvm(conf: dict[str, str]) -> None:
    """Launch the session's JVM with its stderr filtered (:mod:`.jvm_stderr`: its start-up notice
    logged, not written to stderr), as the gateway PySpark's session then uses."""
    from pyspark import SparkContext
    from pyspark.errors import PySparkRuntimeError

    try:
        SparkContext._ensure_initialized(gateway=launch_gateway(conf))
    except PySparkRuntimeError as err:
        if err.getCondition() == "JAVA_GATEWAY_EXITED":
            raise explain_start_failure(err) from err
        raise


def _get_or_create(builder: Any) -> SparkSession:
    from pyspark.errors import PySparkRuntimeError

    try:
        session: SparkSession = builder.getOrCreate()
    except PySparkRuntimeError as err:
        if err.getCondition() == "JAVA_GATEWAY_EXITED":
            raise explain_start_failure(err) from err
        raise
    return session


def _with_log_config(conf: dict[str, str], quiet: bool) -> dict[str, str]:
    """``conf`` with the driver JVM pointed at the toolkit's log4j configuration (its console
    off when ``quiet``), unless ``[spark.conf]`` already configures log4j for the driver."""
    options = conf.get("spark.driver.extraJavaOptions", "")
    if "log4j" in options:
        return conf
    ours = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()} -Dingest.spark.console={'off' if quiet else 'all'}"
    return {**conf, "spark.driver.extraJavaOptions": f"{options} {ours}".strip()}


@contextmanager
def _local_address(master: str | None) -> Iterator[None]:
    """While a local session's JVM starts: SPARK_LOCAL_IP=127.0.0.1 (unless set), so that Spark
    neither warns that the host name resolves to a loopback address nor binds its driver to
    another interface. Cluster masters keep Spark's choice (executors must reach the driver)."""
    if master is None or not master.startswith("local") or "SPARK_LOCAL_IP" in os.environ:
        yield
        return
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    try:
        yield
    finally:
        os.environ.pop("SPARK_LOCAL_IP", None)


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
