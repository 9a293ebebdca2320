"""The stderr of a local Spark session's JVM, read line by line instead of inherited.

A JVM launched by PySpark writes to this process's stderr directly. Most of what it writes there is
its log4j console (``log4j2.properties``), which stays as it is; but the JVM itself prints
``WARNING: Using incubator modules: jdk.incubator.vector`` at every start (Spark asks for that
module; no Java option silences the notice), and where stderr is captured as errors (an Airflow
task's log records every stderr line at ERROR) a routine start looks like a failure.

:func:`launch_gateway` launches the JVM as PySpark does, with its stderr on a pipe; a thread
reads it and passes every line through to this process's stderr (file descriptor 2, as the JVM
would have written it), except the known notices of :data:`BENIGN`, which go to this module's
logger at DEBUG. The thread reads until the JVM closes its stderr: a pipe nobody reads would
block the JVM once full.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from typing import IO, Any

__all__ = ["BENIGN", "launch_gateway"]

log = logging.getLogger(__name__)

# The JVM's notices at start that say nothing about the landing (a regular expression per notice).
BENIGN = (re.compile(r"^WARNING: Using incubator modules: "),)


def launch_gateway(conf: Mapping[str, str]) -> Any:
    """Launch the JVM and its Py4J gateway with the properties ``conf`` (what PySpark passes to
    ``spark-submit``), its stderr filtered; PySpark's sessions then use this gateway. Returns it.

    The pipe is this module's, read from before the launch: a JVM that exits at start (a Java too
    old, a bad option) has its messages on stderr before the error is raised here."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway as pyspark_launch

    spark_conf = SparkConf(loadDefaults=False)
    for key, value in conf.items():
        spark_conf.set(key, value)
    read, write = os.pipe()
    reader = threading.Thread(target=pump, args=(os.fdopen(read, "rb"),), name="spark-jvm-stderr", daemon=True)
    reader.start()
    try:
        return pyspark_launch(spark_conf, popen_kwargs={"stderr": write})  # type: ignore[no-untyped-call]
    except BaseException:
        os.close(write)
        write = -1
        reader.join(timeout=5.0)  # the JVM exited: its last lines, then EOF
        raise
    finally:
        if write >= 0:
            os.close(write)  # the JVM holds its own copy


def pump(stream: IO[bytes], out_fd: int = 2) -> None:
    """Pass the lines of ``stream`` to ``out_fd``, logging the benign ones instead, until EOF."""
    for raw in iter(stream.readline, b""):
        try:
            line = raw.decode(errors="replace").rstrip("\r\n")
            if any(pattern.match(line) for pattern in BENIGN):
                log.debug("Spark's JVM: %s", line)
            else:
                os.write(out_fd, raw)
        except Exception:  # never stop reading: a full pipe would block the JVM
            continue
    stream.close()
