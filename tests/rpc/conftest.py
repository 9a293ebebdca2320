"""Fixtures: a real agent gRPC server on 127.0.0.1 (ephemeral port) over real FileChannels."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.rpc import AgentClient, AgentService, RunningServer, channel_put_handler, start_server
from ingest_toolkit.security import TlsSettings

REPO = Path(__file__).resolve().parents[2]


def wait_threads_gone(prefix: str, timeout: float = 5.0) -> None:
    """Wait until no thread whose name starts with ``prefix`` runs (the threads of ended streams
    end with them); fail naming the ones left after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = [t.name for t in threading.enumerate() if t.name.startswith(prefix)]
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"threads left behind: {left}")
        time.sleep(0.01)


@contextmanager
def client_process(script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``tests/rpc/<script>`` with ``args`` in a process of its own (a client the test SIGKILLs),
    its stdout a text pipe; killed at the end if it still runs."""
    child = subprocess.Popen([sys.executable, str(REPO / "tests" / "rpc" / script), *args], stdout=subprocess.PIPE,
                             text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)


def channel_settings(root: Path, name: str, **overrides: Any) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / name / "checkpoint"), "data_dirs": [str(root / name / "data")],
            "min_free_bytes": 0, "checkpoint_interval": 0, **overrides}


@dataclass
class Agent:
    """A server over ``channels`` plus the clients opened against it (closed at teardown)."""

    root: Path
    channels: dict[str, FileChannel]
    service: AgentService
    server: RunningServer
    clients: list[AgentClient] = field(default_factory=list)

    def client(self, **kwargs: Any) -> AgentClient:
        self.clients.append(AgentClient(self.server.address, **kwargs))
        return self.clients[-1]

    def reopen(self, name: str, **settings: Any) -> FileChannel:
        """Close channel ``name`` (if open) and open it again on the same directories."""
        old = self.channels.pop(name, None)
        if old is not None:
            old.close()
        self.channels[name] = FileChannel(**channel_settings(self.root, name, **settings))
        return self.channels[name]


StartAgent = Callable[..., Agent]


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[StartAgent]:
    agents: list[Agent] = []

    def start(names: tuple[str, ...] = ("events",), *, token: str | None = None, tls: TlsSettings | None = None,
              default_lease: float = 30.0, max_message_bytes: int | None = None, max_open_transactions: int = 48,
              **settings: Any) -> Agent:
        channels = {n: FileChannel(**channel_settings(tmp_path, n, **settings)) for n in names}
        service = AgentService(channels, channel_put_handler(channels, default=names[0]), token=token,
                               default_lease_seconds=default_lease, max_lease_seconds=600,
                               max_open_transactions=max_open_transactions)
        extra = {"max_message_bytes": max_message_bytes} if max_message_bytes else {}
        server = start_server(service, "127.0.0.1", 0, tls=tls, **extra)
        agents.append(Agent(tmp_path, channels, service, server))
        return agents[-1]

    yield start
    for agent in agents:
        for client in agent.clients:
            client.close()
        agent.server.stop(grace=1.0)
        for channel in agent.channels.values():
            channel.close()


@pytest.fixture
def agent(start_agent: StartAgent) -> Agent:
    return start_agent()
