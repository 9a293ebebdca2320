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
import time
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
    activity = [time.monotonic()]  # when the reader last got a line
    reader = threading.Thread(target=pump, args=(os.fdopen(read, "rb"),), kwargs={"activity": activity},
                              name="spark-jvm-stderr", daemon=True)
    reader.start()
    try:
        return pyspark_launch(spark_conf, popen_kwargs={"stderr": write})  # type: ignore[no-untyped-call]
    except BaseException:
        os.close(write)
        write = -1
        _drain(reader, activity)
        raise
    finally:
        if write >= 0:
            os.close(write)  # the JVM holds its own copy


def _drain(reader: threading.Thread, activity: list[float], *, quiet: float = 0.3, limit: float = 5.0) -> None:
    """A failed launch: let the reader pass on the JVM's last lines. A JVM that exited closes its
    stderr (the reader ends); one that still runs (its gateway refused the connection) may write
    nothing more, so stop waiting once the pipe has been quiet for ``quiet`` seconds."""
    deadline = time.monotonic() + limit
    while reader.is_alive() and time.monotonic() < deadline and time.monotonic() - activity[0] < quiet:
        reader.join(timeout=0.05)


def pump(stream: IO[bytes], out_fd: int = 2, activity: list[float] | None = None) -> None:
    """Pass the lines of ``stream`` to ``out_fd``, logging the benign ones instead, until EOF;
    ``activity[0]`` is set to the time of each line."""
    for raw in iter(stream.readline, b""):
        if activity is not None:
            activity[0] = time.monotonic()
        try:
            line = raw.decode(errors="replace").rstrip("\r\n")
            if any(pattern.match(line) for pattern in BENIGN):
                log.debug("Spark's JVM: %s", line)
            else:
                os.write(out_fd, raw)
        except Exception:  # never stop reading: a full pipe would block the JVM
            continue
    stream.close()
