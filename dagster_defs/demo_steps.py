"""Steps of the demo outside Dagster: directories, sample spool files, the agent process."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from rich.console import Console

from ingest_toolkit.collect.config import load_agent_config
from ingest_toolkit.collect.sources.spool_dir import SpoolDirSettings
from ingest_toolkit.errors import ConfigError, IngestError
from ingest_toolkit.land.config import load_landing_config

from .instance import ensure_pool_limits, write_instance_yaml
from .settings import load_orchestration_settings
from .storage import local_path

__all__ = ["DEMO_CHECKPOINT_INTERVAL", "Agent", "DemoError", "DemoPaths", "clear", "prepare_instance",
           "wait_ingested", "write_spool_files"]

# The demo's agent checkpoints every few seconds, so the checks see the state after the landing
# without waiting the production interval (30 s).
DEMO_CHECKPOINT_INTERVAL = 3.0


class DemoError(IngestError):
    """The demo cannot go on; the message says why."""


@dataclass(frozen=True)
class DemoPaths:
    root: Path
    agent_conf: Path
    spool: Path
    channels: dict[str, tuple[str, ...]]  # name -> checkpoint dir + data dirs
    spool_channels: tuple[str, ...]
    state_dir: Path
    ports_file: Path
    landed: Path | None  # None: not a local directory (an hdfs:// root), cleared by the pipeline
    curated: Path | None
    dagster_home: Path
    log: Path

    @classmethod
    def from_conf(cls, root: Path) -> DemoPaths:
        settings = load_orchestration_settings()
        agent = load_agent_config(settings.agent_conf)
        spools = [s for s in agent.sources.values() if isinstance(s, SpoolDirSettings)]
        if not spools:
            raise ConfigError(f"{settings.agent_conf} has no spool_dir source: the demo drops its files into one",
                              key="sources")
        spool = spools[0]
        landing = load_landing_config(settings.landing_conf)
        return cls(root=root.resolve(), agent_conf=Path(settings.agent_conf), spool=Path(spool.dir).resolve(),
                   channels={n: (c.checkpoint_dir, *c.data_dirs) for n, c in agent.channels.items()},
                   spool_channels=tuple(spool.channels),
                   state_dir=agent.agent.state_dir, ports_file=agent.agent.ports_path,
                   landed=_local(landing.root), curated=local_path(settings.curated_root),
                   dagster_home=root.resolve() / "var" / "dagster", log=root.resolve() / "var" / "demo" / "agent.log")


def _local(uri: str) -> Path | None:
    path = local_path(uri)
    if path is None and not uri.startswith("hdfs://"):
        raise ConfigError(f"the demo lands into a local directory or HDFS; [landing] root is {uri}",
                          key="landing.root")
    return path


def clear(paths: DemoPaths) -> None:
    """Remove the demo's data (never anything outside the repository root)."""
    targets = [Path(d) for dirs in paths.channels.values() for d in dirs]
    targets += [paths.state_dir, paths.spool, *(p for p in (paths.landed, paths.curated) if p), paths.log.parent]
    for target in targets:
        target = target.resolve()
        if paths.root not in target.parents:
            raise DemoError(f"refusing to delete {target}: the demo only clears directories inside {paths.root}")
        shutil.rmtree(target, ignore_errors=True)


def prepare_instance(paths: DemoPaths) -> Path:
    """``var/dagster`` with ``dagster.yaml`` copied from ``conf/dagster.yaml`` (SQLite storage in
    that directory, every pool limited to one run) and the channels' pools created; sets
    DAGSTER_HOME for this process."""
    write_instance_yaml(paths.dagster_home)
    os.environ["DAGSTER_HOME"] = str(paths.dagster_home)
    with dg.DagsterInstance.get() as instance:
        ensure_pool_limits(instance, list(paths.channels))
    return paths.dagster_home


_ACTIONS = ("view", "click", "search", "add_to_cart", "checkout", "logout")


def write_spool_files(spool: Path, files: int, lines: int, seed: int = 7) -> int:
    """Drop ``files`` JSON-lines files into ``spool``: written beside it, then renamed in."""
    rng = random.Random(seed)
    incoming = spool.parent / f".{spool.name}.incoming"
    spool.mkdir(parents=True, exist_ok=True)
    incoming.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        path = incoming / f"events-{f:03d}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for n in range(lines):
                record = {"file": f, "n": n, "user": f"user-{rng.randrange(500):03d}",
                          "action": rng.choice(_ACTIONS), "amount": round(rng.uniform(0, 250), 2)}
                out.write(json.dumps(record) + "\n")
        os.replace(path, spool / path.name)  # atomic: the agent sees the whole file or nothing
    incoming.rmdir()
    return files * lines


@dataclass
class Agent:
    """The agent subprocess (in its own session, so a Ctrl-C of the demo reaches it only through
    :meth:`stop`)."""

    process: subprocess.Popen[bytes]
    address: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, paths: DemoPaths, console: Console) -> Agent:
        paths.log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "INGEST_AGENT__GRPC__PORT": "0", "INGEST_AGENT__ADMIN__PORT": "0"}
        for name in paths.channels:
            env[f"INGEST_CHANNELS__{name.upper()}__CHECKPOINT_INTERVAL"] = str(DEMO_CHECKPOINT_INTERVAL)
            os.environ[f"INGEST_CHANNELS__{name.upper()}__CHECKPOINT_INTERVAL"] = str(DEMO_CHECKPOINT_INTERVAL)
        with paths.log.open("wb") as log:
            process = subprocess.Popen(_agent_command(paths.agent_conf), stdout=log, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True)
        try:
            port = _wait_ports(process, paths, timeout=60.0)
        except BaseException:
            process.kill()
            process.wait()
            raise
        return cls(process, f"127.0.0.1:{port}", paths.log)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (a clean stop: channels checkpointed), SIGKILL if it does not end in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def _agent_command(conf: Path) -> list[str]:
    script = Path(sys.executable).with_name("ingest-toolkit")
    if script.exists():
        return [str(script), "agent", "--conf", str(conf)]
    return [sys.executable, "-c", "from ingest_toolkit.cli import main; main()", "agent", "--conf", str(conf)]


def _wait_ports(process: subprocess.Popen[bytes], paths: DemoPaths, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DemoError(f"the agent exited with code {process.returncode} while starting; its log "
                            f"({paths.log}) ends with:\n{_tail(paths.log)}")
        try:
            ports = json.loads(paths.ports_file.read_text())
            if ports.get("pid") in (None, process.pid) and ports.get("grpc"):
                return int(ports["grpc"])
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.1)
    raise DemoError(f"the agent wrote no ports file ({paths.ports_file}) within {timeout:.0f} s; see {paths.log}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def wait_ingested(agent: Agent, paths: DemoPaths, total: int, timeout: float) -> None:
    """Until the spool is empty and every line is committed to each of the spool's channels."""
    from ingest_toolkit.rpc.client import AgentClient

    deadline = time.monotonic() + timeout
    with AgentClient(agent.address) as client:
        while True:
            pending = [p.name for p in paths.spool.iterdir() if p.suffix == ".jsonl"]
            committed = {c: int(client.status(c)["live"]["puts_committed"]) for c in paths.spool_channels}
            if not pending and all(n >= total for n in committed.values()):
                return
            if agent.process.poll() is not None:
                raise DemoError(f"the agent died (exit code {agent.process.returncode}); log:\n{_tail(agent.log)}")
            if time.monotonic() > deadline:
                raise DemoError(f"after {timeout:.0f} s: {len(pending)} spool files not ingested, committed "
                                f"{committed} of {total}; see {agent.log}")
            time.sleep(0.2)
