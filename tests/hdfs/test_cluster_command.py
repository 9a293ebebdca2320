"""``ingest-toolkit hdfs start --data DIR``, the documented way to try the toolkit on HDFS: it
prints the URI and ports, serves on 127.0.0.1, keeps its data in DIR across restarts, and stops
cleanly on SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ingest_toolkit.hdfs import fetch
from ingest_toolkit.hdfs.cluster import HdfsClusterError, MiniHdfs

from .helpers import HdfsFiles

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def _start(data: Path) -> tuple[subprocess.Popen[str], str, list[str]]:
    process = subprocess.Popen([sys.executable, "-m", "ingest_toolkit.hdfs", "--data", str(data), "--port", "0"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + 180
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        assert line, f"the command ended early: {lines}"
        lines.append(line.rstrip())
        match = re.match(r"HDFS ready: (hdfs://127\.0\.0\.1:\d+)", line)
        if match:
            for _ in range(4):
                lines.append((process.stdout.readline() or "").rstrip())
            return process, match.group(1), lines
    raise AssertionError(f"no ready line: {lines}")


def test_the_hdfs_command_serves_keeps_its_data_and_stops_on_sigterm(tmp_path: Path, spark: SparkSession,
                                                                     hdfs: MiniHdfs) -> None:
    fetch(("hdfs",))
    data = tmp_path / "my-hdfs"
    process, uri, lines = _start(data)
    try:
        assert any("NameNode web UI: http://" in ln for ln in lines), lines
        assert any(re.search(r"DataNode 0: data port \d+", ln) for ln in lines), lines
        files = HdfsFiles(spark)
        files.store(f"{uri}/tryout").create_exclusive("hello.txt", b"kept")
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0 and "HDFS stopped" in out, out
        assert (data / "cluster" / "name-0-1").is_dir() and (data / "minihdfs.log").exists()
        again, uri2, _lines = _start(data)  # the same directory: the same namespace and blocks
        try:
            assert files.store(f"{uri2}/tryout").read_bytes("hello.txt") == b"kept"
        finally:
            again.send_signal(signal.SIGINT)  # Ctrl-C
            again.communicate(timeout=120)
        assert again.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()


def test_a_data_directory_that_is_not_an_hdfs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("not HDFS data")
    with pytest.raises(HdfsClusterError, match="is not empty and holds no local HDFS"):
        MiniHdfs.start(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "not HDFS data"
