"""A single-node HDFS on 127.0.0.1 in a JVM process of its own, and its control channel.

:meth:`MiniHdfs.start` runs ``MiniHdfs.java`` (Hadoop's ``MiniDFSCluster``: a NameNode and
``datanodes`` DataNodes in one JVM) with the jars :mod:`ingest_toolkit.hdfs.jars` fetched, its
metadata and blocks under ``data_dir``, and waits for its ``ready`` line (URI and ports). The
process stays under the control of this object through its stdin/stdout (:mod:`.control`: one
JSON line per command, paired by id, so a command that waits never holds up the others), which is
how tests stop and restart a DataNode, stop and restart the NameNode or put it in safe mode while
a landing (another process, or Spark's JVM) uses it:

======================  =====================================================================
``stop_datanode(i)``    DataNode ``i`` stops (its blocks stay on disk; the NameNode still
                        counts it live until heartbeats expire, so writes to it fail)
``start_datanode(i)``   restarts it on the same ports and waits until the NameNode has
                        registered *that* DataNode and seen its heartbeat (seconds; another
                        stopped DataNode, still counted live, is not waited for)
``safe_mode(action)``   ``enter`` / ``leave`` / ``get``: a NameNode in safe mode is read-only
``stop_namenode()``     the NameNode stops (clients get "connection refused")
``start_namenode()``    restarts it on the same port from its image and edits, and waits until
                        the running DataNodes registered and it left safe mode
``stop()``              clean shutdown; also on SIGTERM/SIGINT of the JVM
======================  =====================================================================

**The JVM ends with this process**, however this one ends (SIGKILL included): it stops when its
stdin closes (read by a thread of its own, never held up by a command), when the process that
started it exits (the JVM watches it), and, on Linux when started from the main thread, by
``PR_SET_PDEATHSIG`` (SIGTERM, a clean shutdown, the moment that thread ends).

**Client settings.** Replication is chosen by the *writer's* Hadoop client (``dfs.replication``
of the process that creates a file; Spark's client defaults to 3), not by the cluster. Every start
writes ``<data>/client-conf/hdfs-site.xml`` with the cluster's ``dfs.replication``: point
``HADOOP_CONF_DIR`` there (Spark puts it on its classpath) and a landing writes files with the
cluster's replication (docs/landing.md, "Replication").

A data directory is reused: a second start on it serves the same namespace and blocks.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from xml.sax.saxutils import escape

from ..errors import IngestError
from .control import ControlChannel, PendingReply
from .jars import classpath, java_command

__all__ = ["CLIENT_CONF_DIR", "HdfsClusterError", "HdfsInfo", "MiniHdfs"]

_JVM_OPTIONS = ["-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true"]
CLIENT_CONF_DIR = "client-conf"
"""Below the data directory: the Hadoop client settings that match the cluster (``HADOOP_CONF_DIR``)."""
_PR_SET_PDEATHSIG = 1


class HdfsClusterError(IngestError):
    """The local HDFS could not start, or refused a control command."""


@dataclass(frozen=True)
class HdfsInfo:
    """What the cluster reported when it became ready (or at the last ``status``)."""

    uri: str  # hdfs://127.0.0.1:<port>
    namenode_port: int
    namenode_http: str
    datanodes: tuple[dict[str, int], ...]  # the running ones: index, xfer_port, http_port, ipc_port
    data_dir: str
    hadoop_version: str
    pid: int
    replication: int = 3  # the cluster's dfs.replication (what its client settings give writers)

    @classmethod
    def of(cls, doc: dict[str, Any]) -> HdfsInfo:
        return cls(doc["uri"], int(doc["namenode_port"]), str(doc.get("namenode_http", "")),
                   tuple(doc.get("datanodes_running", ())), doc["data_dir"], doc["hadoop_version"], int(doc["pid"]),
                   int(doc.get("replication", 3)))

    @property
    def client_conf(self) -> Path:
        """The directory to name in ``HADOOP_CONF_DIR`` for clients of this cluster."""
        return Path(self.data_dir) / CLIENT_CONF_DIR


class MiniHdfs:
    """A running local HDFS process; a context manager that stops it."""

    def __init__(self, process: subprocess.Popen[str], info: HdfsInfo, log: Path) -> None:
        self.process, self.info, self.log = process, info, log
        assert process.stdin is not None and process.stdout is not None
        self._control = ControlChannel(process.stdin, process.stdout)

    @property
    def uri(self) -> str:
        return self.info.uri

    @property
    def client_conf(self) -> Path:
        """``<data>/client-conf``: ``hdfs-site.xml`` with the cluster's ``dfs.replication``."""
        return self.info.client_conf

    @classmethod
    def start(cls, data_dir: Path | str, *, port: int = 0, http_port: int = 0, datanodes: int = 1,
              conf: dict[str, str] | None = None, timeout: float = 180.0) -> MiniHdfs:
        """Start the cluster and wait until it serves; raises HdfsClusterError with its log's tail.
        Writes the client settings (:attr:`client_conf`) for the cluster's replication."""
        data = Path(data_dir).resolve()
        _check_data_dir(data)
        data.mkdir(parents=True, exist_ok=True)
        log = data / "minihdfs.log"
        process = subprocess.Popen(_command(data, log, port, http_port, datanodes, conf or {}), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=(data / "minihdfs.stderr").open("w"), text=True,
                                   bufsize=1, start_new_session=True, preexec_fn=_die_with_this_thread())
        try:
            ready = _read_line(process, timeout, "its ready line", log)
        except BaseException:
            process.kill()
            process.wait()
            raise
        cluster = cls(process, HdfsInfo.of(ready), log)
        write_client_conf(cluster.client_conf, cluster.info.replication)
        return cluster

    def send(self, line: str) -> PendingReply:
        """Send one control command without waiting for its reply (commands take effect in the
        order they are sent). Raises HdfsClusterError when the process has exited."""
        if self.process.poll() is not None:
            raise HdfsClusterError(f"the local HDFS (pid {self.process.pid}) has exited; see {self.log}")
        try:
            return self._control.send(line)
        except OSError as err:
            raise HdfsClusterError(f"the local HDFS (pid {self.process.pid}) no longer reads commands ({err}); "
                                   f"see {self.log}") from err

    def command(self, line: str, timeout: float = 120.0) -> dict[str, Any]:
        """Send one control command; its reply (raises HdfsClusterError when it failed)."""
        return self.reply(self.send(line), timeout)

    def reply(self, pending: PendingReply, timeout: float = 120.0) -> dict[str, Any]:
        """The reply to a command :meth:`send` sent; raises HdfsClusterError when it failed, did not
        come within ``timeout`` seconds, or the process ended first."""
        arrived, reply = pending.wait(timeout)
        if not arrived:
            raise HdfsClusterError(f"the local HDFS sent no reply to {pending.command!r} within {timeout:.0f} s; "
                                   f"see {self.log}")
        if reply is None:
            raise HdfsClusterError(f"the local HDFS exited before answering {pending.command!r}: {_tail(self.log)} "
                                   f"(log: {self.log})")
        if not reply.get("ok"):
            raise HdfsClusterError(f"local HDFS command {pending.command!r} failed: {reply.get('error')}")
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
        self._control.join(5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        return int(self.process.returncode)

    def __enter__(self) -> MiniHdfs:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _command(data: Path, log: Path, port: int, http_port: int, datanodes: int, conf: dict[str, str]) -> list[str]:
    command = [java_command(), *_JVM_OPTIONS, f"-Dorg.slf4j.simpleLogger.logFile={log}",
               "-Dorg.slf4j.simpleLogger.showDateTime=true", "-cp", os.pathsep.join(classpath("hdfs")),
               "MiniHdfs", "--data", str(data), "--port", str(port), "--http-port", str(http_port),
               "--datanodes", str(datanodes), "--stop-on-eof"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return command


def _die_with_this_thread() -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks Linux to SIGTERM the child when this thread ends (SIGKILL of the
    process included). Only from the main thread: the signal follows the *thread* that forked,
    and a worker thread's end would stop a cluster its process still uses. None elsewhere (the
    JVM's own watch of its stdin and parent still stops it)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above: no signal will come
            os._exit(1)

    return arm


def write_client_conf(directory: Path, replication: int) -> Path:
    """``hdfs-site.xml`` in ``directory`` with ``dfs.replication`` = ``replication``: the client
    side of a cluster's replication (module docstring). Only that key: ``fs.defaultFS`` would
    send every path without a scheme to this HDFS."""
    directory.mkdir(parents=True, exist_ok=True)
    site = directory / "hdfs-site.xml"
    tmp = site.with_name(f".{site.name}.{os.getpid()}")
    tmp.write_text('<?xml version="1.0"?>\n<!-- written by ingest-toolkit hdfs start: the settings a client of this '
                   'cluster needs -->\n<configuration>\n  <property><name>dfs.replication</name>'
                   f"<value>{escape(str(replication))}</value></property>\n</configuration>\n")
    os.replace(tmp, site)
    return site


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
