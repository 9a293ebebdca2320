"""A new user's first session with the core install, driven through the command line.

From an empty directory: ``init``, the agent from the generated configuration (its ports made
ephemeral through ``INGEST_AGENT__*``), ``send`` of some lines (to that agent, found through its
ports file), SIGTERM, and ``channel inspect``, which must show every event sent. ``cli`` is how
the command is started: the installed ``ingest-toolkit`` script of a virtualenv, or ``python
blocked_cli.py`` (the extras refused).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["EPHEMERAL_PORTS", "clean_env", "first_session", "run"]

EPHEMERAL_PORTS = {"INGEST_AGENT__GRPC__PORT": "0", "INGEST_AGENT__ADMIN__PORT": "0"}


def run(cli: list[str], args: list[str], cwd: Path, env: dict[str, str], *, input: str | None = None,
        check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*cli, *args], cwd=cwd, env=env, input=input, capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def _wait_for_ports(ports_file: Path, agent: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if agent.poll() is not None:
            raise AssertionError(f"the agent exited with {agent.returncode}:\n{log.read_text()}")
        try:
            ports: dict[str, Any] = json.loads(ports_file.read_text())
        except (OSError, ValueError):
            ports = {}
        if ports.get("pid") == agent.pid:
            return ports
        time.sleep(0.05)
    raise AssertionError(f"the agent wrote no ports file in 30 s:\n{log.read_text()}")


def first_session(cli: list[str], workdir: Path, env: dict[str, str], *, events: int = 500) -> dict[str, Any]:
    """Run the session in ``workdir`` (empty); returns ``channel inspect --json``'s document."""
    env = {**env, **EPHEMERAL_PORTS}
    run(cli, ["init"], workdir, env)
    log = workdir / "agent.log"
    with log.open("wb") as out:
        agent = subprocess.Popen([*cli, "agent", "--conf", "conf/agent.toml"], cwd=workdir, env=env,
                                 stdout=out, stderr=subprocess.STDOUT)
    try:
        ports = _wait_for_ports(workdir / "var" / "agent" / "ports.json", agent, log)
        assert ports["grpc"] != 7431 and ports["admin"] != 7432, ports  # the overrides were applied
        lines = "".join(f"event {i}\n" for i in range(events))
        sent = run(cli, ["send", "--channel", "events", "--json"],  # the agent of conf/agent.toml
                   workdir, env, input=lines)
        assert json.loads(sent.stdout)["accepted"] == events, sent.stdout
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 0, log.read_text()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    inspected = run(cli, ["channel", "inspect", "--channel", "events", "--json"], workdir, env)
    document: dict[str, Any] = json.loads(inspected.stdout)
    return document


def clean_env() -> dict[str, str]:
    """The environment without the suite's own INGEST_* settings (a user's shell has none)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("INGEST_")}
