"""Steps of the demo outside Dagster: its own tree, sample spool files, the agent process.

Everything the demo writes is under ``var/demo`` of the current directory (:data:`DEMO_TREE`),
and it deletes nothing else: a deployment running from ``conf/`` (an agent owning
``var/channels/...``, its state, a Dagster instance) is never touched, whatever the demo does.

* ``var/demo/conf``: the demo's own configuration, written from ``conf/`` (or
  ``INGEST_CONF_DIR``) at every run: the same channels (settings kept, directories moved into the
  tree, checkpoints every few seconds), the first ``spool_dir`` source (its directory moved),
  ephemeral ports, the landing and Dagster settings with their paths in the tree;
* ``var/demo/channels/<name>``, ``agent``, ``spool``, ``landing``, ``curated``: the data;
* ``var/demo/dagster``: the Dagster instance that recorded the demo's runs, recreated with the
  data, so the UI on it never shows partitions whose files are gone;
* ``var/demo/agent.log``: the demo agent's log.

At the start the demo deletes ``var/demo`` whole, after taking the lock of every channel and
agent state directory in it (:func:`clear`): if a live process holds one (an agent started from
``var/demo/conf``, another demo), it stops with a one-line error and deletes nothing.
``INGEST_*`` overrides of the agent, channel, source, landing and Dagster settings are not
applied to the demo (they could point it at live directories); ``INGEST_SPARK__*`` are.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import tomlkit
from rich.console import Console

from ingest_toolkit.channel.lock import LOCK_FILE, lock_holder
from ingest_toolkit.collect.config import load_agent_config
from ingest_toolkit.collect.sources.spool_dir import SpoolDirSettings
from ingest_toolkit.dagster.instance import ensure_pool_limits, write_instance_yaml
from ingest_toolkit.errors import ConfigError, IngestError
from ingest_toolkit.orchestrate.settings import conf_dir, load_orchestration_settings

__all__ = ["DEMO_CHECKPOINT_INTERVAL", "DEMO_TREE", "Agent", "DemoError", "DemoPaths", "clear", "pin_replication",
           "prepare_instance", "use_demo_configuration", "wait_ingested", "write_demo_conf", "write_spool_files"]

DEMO_TREE = Path("var") / "demo"

# The demo's agent checkpoints every few seconds, so the checks see the state after the landing
# without waiting the production interval (30 s).
DEMO_CHECKPOINT_INTERVAL = 3.0

# Environment overrides that could move the demo's paths or ports; the demo runs without them.
_PATH_OVERRIDES = ("INGEST_AGENT__", "INGEST_CHANNELS__", "INGEST_SOURCES__", "INGEST_LANDING__",
                   "INGEST_DAGSTER__", "INGEST_CHANNEL__")


class DemoError(IngestError):
    """The demo cannot go on; the message says why."""


@dataclass(frozen=True)
class DemoPaths:
    """Where the demo reads its settings (``source_conf``) and everything it writes (``tree``)."""

    root: Path
    tree: Path
    source_conf: Path
    source_agent_conf: Path
    source_landing_conf: Path
    spool_source: str
    spool_channels: tuple[str, ...]
    channels: dict[str, tuple[str, ...]]  # name -> checkpoint dir + data dirs, in the tree
    remote_root: str | None = None  # --hdfs: the landed and curated tables go under <remote_root>/demo/

    @classmethod
    def from_conf(cls, root: Path, remote_root: str | None = None) -> DemoPaths:
        """The demo's paths below ``root`` (the current directory), from the settings in ``conf/``;
        the tables under ``remote_root`` (an ``hdfs://`` URI) when given."""
        root = root.resolve()
        settings = load_orchestration_settings()
        agent = load_agent_config(settings.agent_conf)
        spools = [(n, s) for n, s in agent.sources.items() if isinstance(s, SpoolDirSettings)]
        if not spools:
            raise ConfigError(f"{settings.agent_conf} has no spool_dir source: the demo drops its files into one",
                              key="sources")
        tree = root / DEMO_TREE
        channels = {name: (str(tree / "channels" / name / "checkpoint"),
                           *(str(tree / "channels" / name / f"data{i or ''}") for i in range(len(c.data_dirs))))
                    for name, c in agent.channels.items()}
        return cls(root=root, tree=tree, source_conf=conf_dir().resolve(),
                   source_agent_conf=Path(settings.agent_conf).resolve(),
                   source_landing_conf=Path(settings.landing_conf).resolve(), spool_source=spools[0][0],
                   spool_channels=tuple(spools[0][1].channels), channels=channels,
                   remote_root=remote_root.rstrip("/") if remote_root else None)

    @property
    def conf(self) -> Path:
        return self.tree / "conf"

    @property
    def agent_conf(self) -> Path:
        return self.conf / "agent.toml"

    @property
    def spool(self) -> Path:
        return self.tree / "spool"

    @property
    def state_dir(self) -> Path:
        return self.tree / "agent"

    @property
    def ports_file(self) -> Path:
        return self.state_dir / "ports.json"

    @property
    def landed(self) -> Path:
        return self.tree / "landing"

    @property
    def curated(self) -> Path:
        return self.tree / "curated"

    @property
    def landing_root(self) -> str:
        """``[landing] root`` of the demo: ``landed``, or ``<remote_root>/demo/landing``."""
        return f"{self.remote_root}/demo/landing" if self.remote_root else str(self.landed)

    @property
    def curated_root(self) -> str:
        return f"{self.remote_root}/demo/curated" if self.remote_root else str(self.curated)

    @property
    def dagster_home(self) -> Path:
        return self.tree / "dagster"

    @property
    def log(self) -> Path:
        return self.tree / "agent.log"


def clear(paths: DemoPaths) -> None:
    """Delete the demo's tree, and nothing else. Every lock file in it is locked first (without
    waiting), and held while the tree is deleted: a live process holding one stops the demo
    with a DemoError naming it, before anything is deleted."""
    tree = paths.tree.resolve()
    if paths.root not in tree.parents:
        raise DemoError(f"refusing to delete {tree}: the demo only clears its tree inside {paths.root}")
    if not tree.exists():
        return
    with _locked(sorted(tree.rglob(LOCK_FILE)), tree):
        shutil.rmtree(tree)


@contextmanager
def _locked(lock_files: list[Path], tree: Path) -> Iterator[None]:
    held: list[int] = []
    try:
        for path in lock_files:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            held.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = lock_holder(str(path.parent))
                raise DemoError(f"{path.parent} is in use by a live process (pid {holder or 'unknown'}): the demo "
                                f"deletes {tree} at every run, and nothing while a process uses it; stop that "
                                "process first (nothing was deleted)") from None
        yield
    finally:
        for fd in held:
            os.close(fd)


def write_demo_conf(paths: DemoPaths) -> None:
    """``var/demo/conf/{agent,landing,dagster}.toml``: the settings of ``conf/`` with every path in
    the tree and ephemeral ports (module docstring)."""
    paths.conf.mkdir(parents=True, exist_ok=True)
    header = (f"# Written by `python -m dagster_defs.demo` from {{}} at every run: the demo's own settings, "
              f"every path inside {paths.tree}.\n")
    agent = _agent_document(paths)
    paths.agent_conf.write_text(header.format(paths.source_agent_conf) + tomlkit.dumps(agent))
    landing = _document(paths.source_landing_conf)
    table = _table(landing, "landing")
    for key in ("agent", "channel_conf"):
        table.pop(key, None)  # the demo's landing finds its agent (the owner of its channel)
    table.update(root=paths.landing_root, agent_conf=str(paths.agent_conf))
    (paths.conf / "landing.toml").write_text(header.format(paths.source_landing_conf) + tomlkit.dumps(landing))
    source = paths.source_conf / "dagster.toml"
    dagster = _document(source) if source.exists() else tomlkit.document()
    settings = _table(dagster, "dagster")
    settings.update(agent_conf=str(paths.agent_conf), landing_conf=str(paths.conf / "landing.toml"),
                    curated_root=paths.curated_root)
    # partitions_start stays "auto": the UI's definitions, loaded after the demo, start the curated
    # partitions at the first landed hour (pinning the hour the demo started at listed that hour as
    # missing when the events were put in the next one).
    (paths.conf / "dagster.toml").write_text(header.format(source) + tomlkit.dumps(dagster))


def _agent_document(paths: DemoPaths) -> Any:
    doc = _document(paths.source_agent_conf)
    agent = _table(doc, "agent")
    agent.update(state_dir=str(paths.state_dir), ports_file=str(paths.ports_file))
    for endpoint in ("grpc", "admin"):
        _table(agent, endpoint)["port"] = 0
    for name, (checkpoint, *data) in paths.channels.items():
        _table(_table(doc, "channels"), name).update(checkpoint_dir=checkpoint, data_dirs=data,
                                                     checkpoint_interval=DEMO_CHECKPOINT_INTERVAL)
    spool = _table(_table(doc, "sources"), paths.spool_source)
    spool["dir"] = str(paths.spool)
    doc["sources"] = {paths.spool_source: spool}  # the other sources (ports, tailed files) are not the demo's
    return doc


def pin_replication(paths: DemoPaths, replication: int) -> None:
    """``spark.hadoop.dfs.replication`` in the demo's landing.toml (``--hdfs``), unless it names
    one already: every Spark client the demo's configuration starts writes with it."""
    path = paths.conf / "landing.toml"
    landing = _document(path)
    conf = _table(_table(landing, "spark"), "conf")
    if "spark.hadoop.dfs.replication" not in conf:
        conf["spark.hadoop.dfs.replication"] = str(replication)
        path.write_text(tomlkit.dumps(landing))


def _document(path: Path) -> Any:
    try:
        return tomlkit.parse(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist", key=path.name) from None


def _table(doc: Any, key: str) -> Any:
    if key not in doc:
        doc[key] = tomlkit.table()
    return doc[key]


def use_demo_configuration(paths: DemoPaths) -> None:
    """From now on this process (and the agent it starts) reads the demo's configuration only."""
    for name in [n for n in os.environ if n.startswith(_PATH_OVERRIDES)]:
        del os.environ[name]
    os.environ["INGEST_CONF_DIR"] = str(paths.conf)


def prepare_instance(paths: DemoPaths) -> Path:
    """``var/demo/dagster`` with ``dagster.yaml`` copied from ``conf/dagster.yaml`` (SQLite storage
    in that directory, every pool limited to one run) and the channels' pools created; sets
    DAGSTER_HOME for this process."""
    write_instance_yaml(paths.dagster_home, paths.source_conf)
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
        with paths.log.open("wb") as log:
            process = subprocess.Popen(_agent_command(paths.agent_conf), stdout=log, stderr=subprocess.STDOUT,
                                       env=dict(os.environ), start_new_session=True)
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
