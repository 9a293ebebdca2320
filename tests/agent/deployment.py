"""A deployment as a user makes one: ``ingest-toolkit init DIR``, its agent on ephemeral ports (the
ports file says where), and every command run from DIR as a subprocess, the way a user types it.

The agent's ports are set to 0 in ``conf/agent.toml`` itself (not by environment variables), so
that the client commands read the same configuration the agent runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["CLI", "Deployment"]

CLI = [sys.executable, "-m", "ingest_toolkit.cli"]
# The test process's own INGEST_* settings must not reach the deployment's commands.
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("INGEST_")}


class Deployment:
    """``root`` after ``ingest-toolkit init``; :meth:`start` runs its agent until :meth:`stop`."""

    def __init__(self, root: Path) -> None:
        subprocess.run([*CLI, "init", str(root)], check=True, capture_output=True, env=CLEAN_ENV, timeout=120)
        self.root = root
        conf = root / "conf" / "agent.toml"
        text = conf.read_text().replace("port = 7431 ", "port = 0    ").replace("port = 7432", "port = 0")
        assert text.count("port = 0") >= 2, "conf/agent.toml no longer has the ports this test sets to 0"
        conf.write_text(text)
        self.ports_file = root / "var" / "agent" / "ports.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, Any] = {}

    def start(self, timeout: float = 60.0) -> Deployment:
        log = (self.root / "agent.log").open("ab")
        self.proc = subprocess.Popen([*CLI, "agent"], cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                     env=CLEAN_ENV)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the agent exited with {self.proc.returncode}:\n{self.log()}")
            try:
                ports = json.loads(self.ports_file.read_text())
            except (OSError, ValueError):
                ports = {}
            if ports.get("pid") == self.proc.pid:
                self.ports = ports
                return self
            time.sleep(0.05)
        raise AssertionError(f"the agent wrote no ports file in {timeout} s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log(self) -> str:
        path = self.root / "agent.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    def run(self, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``ingest-toolkit ARGS`` from the deployment's directory, as a user runs it."""
        return subprocess.run([*CLI, *args], cwd=self.root, input=stdin, capture_output=True, text=True,
                              env=CLEAN_ENV, timeout=timeout)

    def channel_status(self, channel: str = "events") -> dict[str, Any]:
        """The agent's own status of ``channel`` (over gRPC, by its address: no lookup involved)."""
        from ingest_toolkit.rpc.client import AgentClient

        with AgentClient(self.grpc) as client:
            return client.status(channel)

    def puts(self, channel: str = "events") -> int:
        return int(self.channel_status(channel)["live"]["puts_committed"])

    def backlog(self, channel: str = "events") -> int:
        return int(self.channel_status(channel)["queue_size"])
