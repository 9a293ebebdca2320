"""``ingest-toolkit hdfs start --data DIR``, the documented way to try the toolkit on HDFS: it
prints the URI and ports, serves on 127.0.0.1, keeps its data in DIR across restarts, and stops
cleanly on SIGTERM; its commands answer while one of them waits, and its JVM does not outlive
it (SIGKILL included)."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from ingest_toolkit.hdfs import fetch
from ingest_toolkit.hdfs.cluster import HdfsClusterError, MiniHdfs

from .helpers import HdfsFiles

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def _start(data: Path, *options: str) -> tuple[subprocess.Popen[str], str, list[str]]:
    """The command started; its URI and the lines it printed up to "stop with Ctrl-C"."""
    process = subprocess.Popen([sys.executable, "-m", "ingest_toolkit.hdfs", "--data", str(data), "--port", "0",
                                *options], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines: list[str] = []
    deadline = time.monotonic() + 180
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        assert line, f"the command ended early: {lines}"
        lines.append(line.rstrip())
        if line.startswith("stop with"):
            (uri,) = [m.group(1) for ln in lines if (m := re.match(r"HDFS ready: (hdfs://127\.0\.0\.1:\d+)", ln))]
            return process, uri, lines
    raise AssertionError(f"no ready line: {lines}")


def test_the_hdfs_command_serves_keeps_its_data_and_stops_on_sigterm(tmp_path: Path, spark: SparkSession,
                                                                     hdfs: MiniHdfs) -> None:
    fetch(("hdfs",))
    data = tmp_path / "my-hdfs"
    process, uri, lines = _start(data)
    try:
        assert any("NameNode web UI: http://" in ln for ln in lines), lines
        assert any(re.search(r"DataNode 0: data port \d+", ln) for ln in lines), lines
        conf_dir = data / "client-conf"
        assert any(f"HADOOP_CONF_DIR={conf_dir} (dfs.replication=1" in ln for ln in lines), lines
        assert "<name>dfs.replication</name><value>1</value>" in (conf_dir / "hdfs-site.xml").read_text()
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


class _Replies:
    """The JSON replies the command prints, read by a thread (a reply may come late, or never)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process, self.lines, self.sent = process, queue.Queue[str](), 0
        assert process.stdout is not None
        stdout = process.stdout
        threading.Thread(target=lambda: [self.lines.put(ln) for ln in stdout], daemon=True).start()

    def send(self, command: str) -> str:
        """The id the command's reply will carry (the command numbers what it sends from 1)."""
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        self.sent += 1
        return str(self.sent)

    def next(self, timeout: float) -> dict[str, Any]:
        while True:
            line = self.lines.get(timeout=timeout)
            if line.startswith("{"):
                return dict(json.loads(line))
            assert not line.startswith("error"), line


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # ended, not reaped by its new parent yet
    except psutil.NoSuchProcess:
        return True


def test_a_datanode_restart_answers_in_seconds_commands_never_wait_on_each_other_and_no_jvm_outlives_the_command(
        tmp_path: Path) -> None:
    """The issue's sequence (two DataNodes, both stopped, one restarted while the NameNode still
    counts the other live) answers in seconds; a restart that cannot finish (no NameNode) does
    not hold up the commands after it; a SIGKILLed command leaves no JVM behind."""
    fetch(("hdfs",))
    process, _uri, lines = _start(tmp_path / "two", "--datanodes", "2", "--conf", "dfs.namenode.safemode.extension=0")
    (jvm,) = [int(m.group(1)) for ln in lines if (m := re.search(r"HDFS ready: \S+\s+\(pid (\d+)\)", ln))]
    cli = _Replies(process)
    try:
        for index in (0, 1):
            cli.send(f"stop-datanode {index}")
            assert cli.next(30)["datanodes_stopped"] == list(range(index + 1))
        sent = time.monotonic()
        cli.send("start-datanode 0")
        restarted = cli.next(60)
        took = time.monotonic() - sent
        assert restarted["ok"] and restarted["datanodes_stopped"] == [1], restarted
        assert [n["index"] for n in restarted["datanodes_running"]] == [0]
        assert took < 20, f"the restart answered after {took:.1f} s"

        cli.send("stop-namenode")
        assert cli.next(60)["namenode"] is False
        waiting = cli.send("start-datanode 1")  # cannot register while the NameNode is down: it waits
        status = cli.send("status")
        assert cli.next(30)["id"] == status  # answered while the restart waits
        sent = time.monotonic()
        namenode = cli.send("start-namenode")
        replies = {r["id"]: r for r in (cli.next(90), cli.next(90))}
        assert set(replies) == {waiting, namenode} and all(r["ok"] for r in replies.values()), replies
        assert replies[namenode]["datanodes_stopped"] == [] and time.monotonic() - sent < 60

        process.send_signal(signal.SIGKILL)
        process.wait(10)
        deadline = time.monotonic() + 20
        while not _gone(jvm) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(jvm), f"the cluster's JVM (pid {jvm}) outlived its SIGKILLed command"
    finally:
        if process.poll() is None:
            process.kill()
        if not _gone(jvm):
            psutil.Process(jvm).kill()
