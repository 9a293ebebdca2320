"""Agents of a fleet on 127.0.0.1: configuration text, in-process agents and helpers.

Aggregators listen on fixed ports chosen here (a restarted aggregator must come back where its
edges forward to); edges use ephemeral ports and announce them in their ports file.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.collect.agent import Agent
from ingest_toolkit.collect.config import load_agent_config

from ..agent.harness import SMALL_CHANNEL, AgentSetup

__all__ = ["FleetSetup", "edge_channel", "free_port", "forward_sink", "in_process", "wait_for"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FleetSetup(AgentSetup):
    """An agent under ``root`` with ``channels``, a gRPC port (0: ephemeral) and more TOML (sinks, sources)."""

    def __init__(self, root: Path, *, name: str = "test", channels: Iterable[str] = ("events",), grpc_port: int = 0,
                 extra: str = "", channel_extra: str = "", shutdown_timeout: float = 5.0) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.ports_file = root / "ports.json"
        self.channels = list(channels)
        self.grpc_port = grpc_port
        text = (f'[agent]\nname = "{name}"\nstate_dir = "{root / "state"}"\nports_file = "{self.ports_file}"\n'
                f'log_format = "kv"\nshutdown_timeout = {shutdown_timeout}\n'
                f'[agent.grpc]\nport = {grpc_port}\n[agent.admin]\nport = 0\n')
        for channel in self.channels:
            text += (f'[channels.{channel}]\ncheckpoint_dir = "{self.checkpoint_dir(channel)}"\n'
                     f'data_dirs = ["{root / "channels" / channel / "data"}"]\n{SMALL_CHANNEL}{channel_extra}\n')
        self.conf = root / "agent.toml"
        self.conf.write_text(text + extra)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


def forward_sink(name: str, address: str, *, channel: str = "events", downstream_channel: str | None = "events",
                 batch_size: int = 200, linger: float = 0.02, timeout: float = 5.0, extra: str = "") -> str:
    text = (f'[sinks.{name}]\ntype = "forward"\nchannel = "{channel}"\naddress = "{address}"\n'
            f'batch_size = {batch_size}\nlinger = {linger}\ntimeout = {timeout}\n{extra}')
    if downstream_channel:
        text += f'downstream_channel = "{downstream_channel}"\n'
    return text + "\n"


def edge_channel(root: Path) -> FileChannel:
    """A small channel under ``root`` opened in this process: the local channel of a sink group."""
    return FileChannel(checkpoint_dir=str(root / "cp"), data_dirs=[str(root / "data")], min_free_bytes=0,
                       preallocate_bytes=0, max_file_size=4 << 20)


def in_process(setup: AgentSetup) -> Agent:
    agent = Agent(load_agent_config(setup.conf))
    agent.start()
    return agent


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
