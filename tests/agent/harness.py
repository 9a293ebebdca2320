"""A real agent in a child process, driven the way an operator and its clients drive it.

The child is ``python -m ingest_toolkit.cli agent --conf <file>``; it announces its ephemeral
ports in the ports file, which :meth:`AgentProcess.wait_ready` polls (matching the child's pid, so
a file left by a SIGKILLed predecessor is never mistaken for the new one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ingest_toolkit.channel import Event, FileChannel

__all__ = ["LIVE", "AgentProcess", "AgentSetup", "drain", "http_get", "http_post", "metric", "write_spool_file"]

REPO = Path(__file__).resolve().parents[2]
SMALL_CHANNEL = ("min_free_bytes = 0\nmax_file_size = 4194304\nmax_event_size = 65536\n"
                 "preallocate_bytes = 0\ncheckpoint_interval = 2.0\nkeep_alive = 0.2\n")


class AgentSetup:
    """Directories and the TOML configuration of one test agent under ``root``."""

    def __init__(self, root: Path, *, channels: Iterable[str] = ("events",), sources: str = "",
                 agent: str = "", grpc: str = "", admin: str = "", security: str = "",
                 shutdown_timeout: float = 5.0) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.ports_file = root / "ports.json"
        self.channels = list(channels)
        text = (f'[agent]\nname = "test"\nstate_dir = "{root / "state"}"\nports_file = "{self.ports_file}"\n'
                f'log_format = "kv"\nshutdown_timeout = {shutdown_timeout}\n{agent}\n'
                f'[agent.grpc]\nport = 0\n{grpc}\n[agent.admin]\nport = 0\n{admin}\n'
                f'[agent.security]\n{security}\n')
        for name in self.channels:
            text += (f'[channels.{name}]\ncheckpoint_dir = "{self.checkpoint_dir(name)}"\n'
                     f'data_dirs = ["{root / "channels" / name / "data"}"]\n{SMALL_CHANNEL}\n')
        self.conf = root / "agent.toml"
        self.conf.write_text(text + sources)

    def checkpoint_dir(self, channel: str = "events") -> Path:
        return self.root / "channels" / channel / "checkpoint"

    def channel_settings(self, channel: str = "events") -> dict[str, Any]:
        return {"checkpoint_dir": str(self.checkpoint_dir(channel)),
                "data_dirs": [str(self.root / "channels" / channel / "data")],
                "min_free_bytes": 0, "max_file_size": 4 << 20, "max_event_size": 65536, "preallocate_bytes": 0}


LIVE: list[subprocess.Popen[bytes]] = []  # every child started here; conftest kills leftovers after each test


class AgentProcess:
    def __init__(self, setup: AgentSetup, *, env: dict[str, str] | None = None, conf: Path | None = None,
                 cwd: Path = REPO, process_group: bool = False) -> None:
        """``process_group``: the agent leads a process group of its own (as a shell job or a
        container's process does), which a test may signal as a whole."""
        self.setup = setup
        self.log_path = setup.root / f"agent-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf", str(conf or setup.conf)],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd, env={**os.environ, **(env or {})},
            process_group=0 if process_group else None)
        LIVE.append(self.proc)
        self.ports: dict[str, Any] = {}

    def wait_ready(self, timeout: float = 30.0) -> AgentProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited with {self.proc.returncode}:\n{self.log()}")
            try:
                ports = json.loads(self.setup.ports_file.read_text())
            except (OSError, ValueError):
                ports = {}
            if ports.get("pid") == self.proc.pid:
                self.ports = ports
                return self
            time.sleep(0.05)
        raise AssertionError(f"agent not ready after {timeout}s:\n{self.log()}")

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    def admin_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.ports['admin']}{path}"

    def source_url(self, source: str, path: str = "/events") -> str:
        return f"http://127.0.0.1:{self.ports['sources'][source]}{path}"

    def terminate(self, timeout: float = 30.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.wait(10)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")


def drain(settings: dict[str, Any]) -> list[Event]:
    """Every queued event of a stopped agent's channel, taken (and committed) in-process."""
    taken: list[Event] = []
    with FileChannel(**settings) as channel:
        while True:
            with channel.transaction() as tx:
                batch = tx.take(5000)
            if not batch:
                return taken
            taken += batch


def write_spool_file(spool: Path, name: str, lines: Iterable[str]) -> None:
    """The drop-then-rename convention: write under a hidden .tmp name, then rename into place."""
    tmp = spool / f".{name}.tmp"
    tmp.write_text("".join(f"{line}\n" for line in lines))
    os.rename(tmp, spool / name)


def http_get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def http_post(url: str, body: bytes, *, content_type: str = "text/plain", batch_id: str | None = None,
              token: str | None = None, timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": content_type}
    if batch_id:
        headers["X-Batch-Id"] = batch_id
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in a Prometheus text exposition (None when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{wanted}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return None
