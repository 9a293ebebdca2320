"""A single-node HDFS on 127.0.0.1 in a JVM process of its own, and its control channel.

:meth:`MiniHdfs.start` runs ``MiniHdfs.java`` (Hadoop's ``MiniDFSCluster``: a NameNode and
``datanodes`` DataNodes in one JVM) with the jars :mod:`ingest_toolkit.hdfs.jars` fetched, its
metadata and blocks under ``data_dir``, and waits for its ``ready`` line (URI and ports). The
process stays under the control of this object through its stdin/stdout, one JSON line per
command, which is how tests stop and restart a DataNode, stop and restart the NameNode or put it
in safe mode while a landing (another process, or Spark's JVM) uses it:

======================  =====================================================================
``stop_datanode(i)``    DataNode ``i`` stops (its blocks stay on disk; the NameNode still
                        counts it live until heartbeats expire, so writes to it fail)
``start_datanode(i)``   restarts it on the same ports and waits until it is registered
``safe_mode(action)``   ``enter`` / ``leave`` / ``get``: a NameNode in safe mode is read-only
``stop_namenode()``     the NameNode stops (clients get "connection refused")
``start_namenode()``    restarts it on the same port from its image and edits
``stop()``              clean shutdown; also on SIGTERM/SIGINT of the JVM, and when this
                        process dies (end of the JVM's stdin)
======================  =====================================================================

A data directory is reused: a second start on it serves the same namespace and blocks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ..errors import IngestError
from .jars import classpath, java_command

__all__ = ["HdfsClusterError", "HdfsInfo", "MiniHdfs"]

_JVM_OPTIONS = ["-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true"]


class HdfsClusterError(IngestError):
    """The local HDFS could not start, or refused a control command."""


@dataclass(frozen=True)
class HdfsInfo:
    """What the cluster reported when it became ready (or at the last ``status``)."""

    uri: str  # hdfs://127.0.0.1:<port>
    namenode_port: int
    namenode_http: str
    datanodes: tuple[dict[str, int], ...]
    data_dir: str
    hadoop_version: str
    pid: int

    @classmethod
    def of(cls, doc: dict[str, Any]) -> HdfsInfo:
        return cls(doc["uri"], int(doc["namenode_port"]), str(doc.get("namenode_http", "")),
                   tuple(doc.get("datanodes_running", ())), doc["data_dir"], doc["hadoop_version"], int(doc["pid"]))


class MiniHdfs:
    """A running local HDFS process; a context manager that stops it."""

    def __init__(self, process: subprocess.Popen[str], info: HdfsInfo, log: Path) -> None:
        self.process, self.info, self.log = process, info, log
        self._lock = threading.Lock()

    @property
    def uri(self) -> str:
        return self.info.uri

    @classmethod
    def start(cls, data_dir: Path | str, *, port: int = 0, http_port: int = 0, datanodes: int = 1,
              conf: dict[str, str] | None = None, timeout: float = 180.0) -> MiniHdfs:
        """Start the cluster and wait until it serves; raises HdfsClusterError with its log's tail."""
        data = Path(data_dir).resolve()
        _check_data_dir(data)
        data.mkdir(parents=True, exist_ok=True)
        log = data / "minihdfs.log"
        command = [java_command(), *_JVM_OPTIONS, f"-Dorg.slf4j.simpleLogger.logFile={log}",
                   "-Dorg.slf4j.simpleLogger.showDateTime=true", "-cp", os.pathsep.join(classpath("hdfs")),
                   "MiniHdfs", "--data", str(data), "--port", str(port), "--http-port", str(http_port),
                   "--datanodes", str(datanodes), "--stop-on-eof"]
        for key, value in (conf or {}).items():
            command += ["--conf", f"{key}={value}"]
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=(data / "minihdfs.stderr").open("w"), text=True, bufsize=1,
                                   start_new_session=True)
        try:
            ready = _read_line(process, timeout, "its ready line", log)
        except BaseException:
            process.kill()
            process.wait()
            raise
        return cls(process, HdfsInfo.of(ready), log)

    def command(self, line: str, timeout: float = 120.0) -> dict[str, Any]:
        """Send one control command; its reply (raises HdfsClusterError when it failed)."""
        with self._lock:
            if self.process.poll() is not None:
                raise HdfsClusterError(f"the local HDFS (pid {self.process.pid}) has exited; see {self.log}")
            assert self.process.stdin is not None
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
            reply = _read_line(self.process, timeout, f"the reply to {line!r}", self.log)
        if not reply.get("ok"):
            raise HdfsClusterError(f"local HDFS command {line!r} failed: {reply.get('error')}")
        if "uri" in reply:
            self.info = HdfsInfo.of(reply)
        return reply

    def status(self) -> HdfsInfo:
        self.command("status")
        return self.info

    def stop_datanode(self, index: int = 0) -> None:
        self.command(f"stop-datanode {index}")

    def start_datanode(self, index: int = 0) -> None:
        self.command(f"start-datanode {index}")

    def safe_mode(self, action: str) -> bool:
        """``enter``, ``leave`` or ``get``; whether the NameNode is in safe mode afterwards."""
        return bool(self.command(f"safemode {action}")["safemode"])

    def stop_namenode(self) -> None:
        self.command("stop-namenode")

    def start_namenode(self) -> None:
        self.command("start-namenode")

    def stop(self, timeout: float = 60.0) -> int:
        """Shut the cluster down: the ``shutdown`` command (exit code 0), else SIGTERM, else
        SIGKILL after ``timeout``; its exit code."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write("shutdown\n")
                self.process.stdin.flush()
                self.process.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        return int(self.process.returncode)

    def __enter__(self) -> MiniHdfs:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _check_data_dir(data: Path) -> None:
    """A data directory is new (absent or empty) or one this command made (the cluster lives in
    its ``cluster`` subdirectory, which Hadoop empties when it formats a new namespace)."""
    if data.is_dir() and any(data.iterdir()) and not (data / "cluster" / "name-0-1").exists():
        raise HdfsClusterError(f"{data} is not empty and holds no local HDFS (no cluster/name-0-1): name an "
                               "empty or new directory, or one an earlier 'ingest-toolkit hdfs start' used")
    if data.exists() and not data.is_dir():
        raise HdfsClusterError(f"{data} is a file: name a directory for the HDFS data")


def _read_line(process: subprocess.Popen[str], timeout: float, what: str, log: Path) -> dict[str, Any]:
    """The next JSON line of the cluster's stdout, within ``timeout`` seconds."""
    assert process.stdout is not None
    stdout: IO[str] = process.stdout
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not box:
        raise HdfsClusterError(f"the local HDFS sent no {what} within {timeout:.0f} s; see {log}")
    if not box[0]:
        code = process.wait()
        raise HdfsClusterError(f"the local HDFS exited (code {code}) before {what}: {_tail(log)} (log: {log})")
    return dict(json.loads(box[0]))


def _tail(log: Path) -> str:
    errors = log.with_name("minihdfs.stderr")
    for path in (errors, log):
        try:
            lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        except FileNotFoundError:
            continue
        if lines:
            return lines[-1][:300]
    return "no output"
