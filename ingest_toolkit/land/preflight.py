"""Before a landing takes anything: everything it would trip over later, found in seconds.

``land --check`` prints these checks and exits. A normal ``land`` makes each of them before its
first take and takes nothing when one fails: the root and the channel here (:func:`ensure_ready`),
the others in the run, where they already came before any take (the Spark start, the agent's
first status call). An unwritable landing root
used to be found only when Spark wrote the batch: 20 s in, with the events taken, and an error
naming a Hadoop ``_temporary`` path. Each check gives one line:

* **landing root**: a local root (``file://``) is tried the way the landing writes it: a file is
  created and removed in ``<root>/<channel>``, or in its nearest existing parent. An ``hdfs://``
  root: the name node's port answers (permissions are not checked: that needs the Hadoop client
  of a JVM). Any other scheme (``s3a://``, ...) is not checked, and the line says so. An Iceberg
  table's SQLite catalog must be writable too.
* **java** and **spark**, for plain Parquet only (Delta and Iceberg tables are written by delta-rs
  and PyIceberg, without a JVM): a Java 17 or newer (``java -version``, found as Spark's scripts
  find it) and an installed PySpark with its jars; a ``spark://`` master or a Spark Connect
  server answers on its port. No Spark session is started.
* **agent**: the agent the landing would take through (:mod:`.route`) answers a status call,
  within :data:`AGENT_TIMEOUT`, and serves the channel the configuration describes.
* **channel**: its committed backlog as the agent reports it; in-process, its directories are
  writable (a take writes to its log) and what its ``checkpoint.meta`` says (one that cannot be
  read is noted, not failed: opening the channel recovers from a backup or the log).
"""

from __future__ import annotations

import importlib.util
import os
import socket
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from ..errors import IngestError
from .config import LandingConfig, agent_client
from .diagnose import JAVA_MAJOR, check_java, find_java, java_version
from .errors import PreflightError, SparkStartError
from .route import Route
from .tables import needs_spark

__all__ = ["AGENT_TIMEOUT", "Check", "ensure_ready", "landing_checks", "verdict"]

AGENT_TIMEOUT = 5.0  # seconds a status call of the check may take
_CONNECT_TIMEOUT = 3.0  # seconds to open a TCP connection to a name node or a Spark master
Status = Literal["ok", "FAIL", "skip"]


@dataclass(frozen=True, slots=True)
class Check:
    """One check: ``status`` ``ok``, ``FAIL`` or ``skip`` (not needed, or not checkable here)."""

    name: str
    status: Status
    detail: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<12}  {self.detail}"


def landing_checks(route: Route, *, agent: bool = True, token: str | None = None,
                   timeout: float = AGENT_TIMEOUT) -> list[Check]:
    """Every check of a landing of ``route`` (module docstring). ``agent``: ask the agent too;
    ``timeout``: seconds it may take to answer."""
    config = route.config
    checks = [root_check(config, route.channel), *spark_checks(config)]
    if route.remote:
        checks += agent_checks(route, token, timeout) if agent else []
    else:
        checks += in_process_checks(route)
    return checks


def verdict(checks: list[Check]) -> tuple[bool, str]:
    """``(passed, one line)`` of ``checks``."""
    failed = [c.name for c in checks if c.status == "FAIL"]
    skipped = [c.name for c in checks if c.status == "skip"]
    if failed:
        return False, f"landing check failed: {', '.join(failed)} ({len(failed)} of {len(checks)} checks failed)"
    also = f", {len(skipped)} not checked ({', '.join(skipped)})" if skipped else ""
    return True, f"landing check passed: {len(checks) - len(skipped)} checks ok{also}"


def ensure_ready(route: Route) -> list[Check]:
    """The checks a landing runs itself before its first take: the landing root and, in-process,
    the channel (PreflightError naming each failed check). The others already come before any
    take, in the run: Java and Spark are the Spark start's, which precedes the first take (and
    an empty channel never starts Spark, so it needs neither); the agent's is the run's first
    status call (:mod:`.run`; after the Spark start where gRPC's fork handlers are on)."""
    checks = [root_check(route.config, route.channel)]
    if not route.remote:
        checks.append(channel_check(route))
    failed = [c for c in checks if c.status == "FAIL"]
    if failed:
        message = "; ".join(f"{c.name}: {c.detail}" for c in failed) + "; nothing was taken"
        raise PreflightError(message, channel=route.channel, failed=[c.name for c in failed])
    return checks


# -- the landing root ---------------------------------------------------------------------------
def root_check(config: LandingConfig, channel: str) -> Check:
    """Whether the landing can write ``<root>/<channel>`` (and the Iceberg catalog)."""
    url = urlparse(config.root)
    if url.scheme == "file":
        table = Path(url.path) / channel
        problem = writable_problem(table)
        if problem is None and config.format == "iceberg":
            problem = _catalog_problem(config.iceberg_catalog)
        if problem is not None:
            return Check("landing root", "FAIL", f"{problem}: make it writable for this user, or set "
                                                  "[landing] root (INGEST_LANDING__ROOT) to a directory it can write")
        return Check("landing root", "ok", f"{config.root}/{channel} is writable")
    if url.scheme == "hdfs" and url.hostname:
        return _namenode_check(config.root, url.hostname, url.port or 8020)
    return Check("landing root", "skip", f"{config.root}: {url.scheme}:// roots are not checked before the run "
                                         "(that needs the Hadoop client of a JVM); the first write checks it")


def writable_problem(directory: Path) -> str | None:
    """Why no file can be created in ``directory`` (or in the nearest existing parent that would
    hold it), or None; the probe file is removed at once."""
    from ..collect.preflight import writable_problem as probe

    return probe(directory)


def _catalog_problem(catalog: str) -> str | None:
    if not catalog.startswith("sqlite:///") or catalog == "sqlite:///:memory:":
        return None  # a database server: its permissions are its own
    problem = writable_problem(Path(catalog.removeprefix("sqlite:///")).parent)
    return None if problem is None else f"the Iceberg catalog {catalog}: {problem}"


def _namenode_check(root: str, host: str, port: int) -> Check:
    problem = _connect_problem(host, port)
    if problem is not None:
        return Check("landing root", "FAIL", f"{root}: the name node {host}:{port} {problem}: start it, or fix "
                                             "[landing] root")
    return Check("landing root", "ok", f"{root}: the name node {host}:{port} answers (write permission is not "
                                       "checked before the run: the first write checks it)")


def _connect_problem(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT):
            return None
    except OSError as err:
        return f"does not answer ({err.strerror or err})"


# -- Java and Spark -----------------------------------------------------------------------------
def spark_checks(config: LandingConfig) -> list[Check]:
    """Java and PySpark, for a format written by Spark; nothing is started but ``java -version``."""
    if not needs_spark(config):
        why = f"not needed: a {config.format} table is written without Spark"
        return [Check("java", "skip", why), Check("spark", "skip", why)]
    remote = config.spark.remote
    java = Check("java", "skip", f"not needed here: Spark runs behind Spark Connect ({remote})") if remote \
        else java_check()
    return [java, pyspark_check(config)]


def java_check() -> Check:
    """A Java runtime Spark can run on, with the messages of the Spark start's own diagnosis."""
    try:
        path = check_java()
    except SparkStartError as err:
        return Check("java", "FAIL", str(err))
    how = find_java()[1]
    version = java_version(path)
    if version is None:
        return Check("java", "FAIL", f"{path} (found through {how}) does not run or does not say its version: "
                                     f"install a Java {JAVA_MAJOR} runtime and set JAVA_HOME to it")
    if version < JAVA_MAJOR:
        return Check("java", "FAIL", f"Spark needs Java {JAVA_MAJOR} or newer, and {path} (found through {how}) is "
                                     f"Java {version}: install a Java {JAVA_MAJOR} runtime and set JAVA_HOME to it")
    return Check("java", "ok", f"{path} is Java {version}, found through {how}")


def pyspark_check(config: LandingConfig) -> Check:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return Check("spark", "FAIL", "PySpark is not installed: pip install 'ingest-toolkit[spark]'")
    version = metadata.version("pyspark")
    remote, master = config.spark.remote, config.spark.master
    if remote:
        url = urlparse(remote.replace("sc://", "http://", 1))
        return _endpoint_check(f"pyspark {version}, Spark Connect", remote, url.hostname or "", url.port or 15002)
    if master.startswith("spark://"):
        url = urlparse(master.replace("spark://", "http://", 1))
        return _endpoint_check(f"pyspark {version}, master", master, url.hostname or "", url.port or 7077)
    home = os.environ.get("SPARK_HOME")
    jars = Path(home) / "jars" if home else Path(spec.origin).parent / "jars"
    if not jars.is_dir():
        where = f"SPARK_HOME={home}" if home else "the PySpark installation"
        return Check("spark", "FAIL", f"{where} has no jars directory ({jars}): fix or unset SPARK_HOME, or "
                                      "reinstall pyspark")
    started = "" if master.startswith("local") else " (the cluster itself is not checked)"
    return Check("spark", "ok", f"pyspark {version}, master {master}, jars in {jars}{started}; not started")


def _endpoint_check(what: str, url: str, host: str, port: int) -> Check:
    problem = _connect_problem(host, port)
    if problem is not None:
        return Check("spark", "FAIL", f"{what} {url} {problem}: start it, or fix [spark] in the landing configuration")
    return Check("spark", "ok", f"{what} {url} answers")


# -- the agent and the channel ------------------------------------------------------------------
def agent_checks(route: Route, token: str | None, timeout: float = AGENT_TIMEOUT) -> list[Check]:
    """The agent answers and serves the channel; the channel's committed backlog."""
    from .run import checked_backlog

    try:
        with agent_client(route.config, token=token, timeout=timeout) as client:
            backlog = checked_backlog(route, client)
    except IngestError as err:
        return [Check("agent", "FAIL", f"{route.config.agent}: {err}"),
                Check("channel", "skip", "the agent did not answer")]
    return [Check("agent", "ok", f"{route.description} answers and serves channel {route.channel!r}"),
            Check("channel", "ok", f"{route.channel!r}: {backlog:,} committed events to land")]


def in_process_checks(route: Route) -> list[Check]:
    """No agent: the channel is opened in-process (:func:`channel_check`)."""
    agent = Check("agent", "skip", f"not needed: no process owns channel {route.channel!r}, it is opened in-process")
    return [agent, channel_check(route)]


def channel_check(route: Route) -> Check:
    """A channel opened in-process: its checkpoint readable, its directories writable."""
    from ..channel.checkpoint import read_checkpoint_meta

    assert route.settings is not None
    checkpoint_dir = str(route.settings["checkpoint_dir"])
    dirs = [checkpoint_dir, *(str(d) for d in route.settings.get("data_dirs", ()))]
    problems = [p for d in dirs if (p := writable_problem(Path(d))) is not None]
    if problems:
        return Check("channel", "FAIL", "; ".join(problems) + ": a landing in-process writes its takes there; "
                                        "fix the permissions, or land through the agent (--agent)")
    try:
        info = read_checkpoint_meta(checkpoint_dir)
    except (IngestError, OSError) as err:  # not a failure: the open recovers (a backup, a full replay)
        state = f"checkpoint.meta cannot be read ({err}), the open will recover from the log"
    else:
        state = f"{info.queue_size:,} events queued at checkpoint #{info.checkpoint_id}" if info else \
            "no checkpoint yet"
    return Check("channel", "ok", f"{route.description}: {state}; its directories are writable")
