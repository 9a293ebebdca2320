"""The JVM's stderr, read instead of inherited: its start-up notice is logged at DEBUG, every other
line reaches this process's stderr as the JVM wrote it."""

from __future__ import annotations

import io
import logging
import os

import pytest

from ingest_toolkit.land.jvm_stderr import pump

LINES = (b"WARNING: Using incubator modules: jdk.incubator.vector\n"
         b"26/11/29 09:40:01 WARN SparkContext: a warning of Spark's own\n"
         b"\xff not UTF-8, passed as it is\n")


def test_the_incubator_notice_is_logged_and_every_other_line_passed_through(caplog: pytest.LogCaptureFixture) -> None:
    read, write = os.pipe()
    with caplog.at_level(logging.DEBUG, logger="ingest_toolkit.land.jvm_stderr"):
        pump(io.BytesIO(LINES), out_fd=write)
    os.close(write)
    with os.fdopen(read, "rb") as passed:
        assert passed.read() == LINES.split(b"\n", 1)[1]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "Spark's JVM: WARNING: Using incubator modules: jdk.incubator.vector")]
