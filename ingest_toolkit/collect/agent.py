"""The agent process: channels, sources, the gRPC endpoint and the admin endpoint, with one life cycle.

Start order (everything that can fail on bad settings is checked before anything is opened):

1. the preflight (:mod:`.preflight`, what ``agent --check`` runs): directories writable, tokens
   set, TLS files and channel keys readable, fixed ports free, exec programs found; then the
   state directory is locked (one agent per state dir);
2. every channel is opened (each locks its directories: a second agent gets ChannelLockedError);
3. sources are built, each with its own pipeline (interceptors, selector) and state directory;
4. the admin endpoint binds its port (it serves once everything runs), the gRPC server starts,
   then the sources and the sink groups, then the admin endpoint serves: a port taken after the
   preflight (by a process that was quicker) fails the start before any source has started;
5. the ports file is written atomically, and an ``agent ready`` log line names the ports.

Stop order (SIGTERM/SIGINT, or :meth:`Agent.stop`): health turns 503, sources stop (each finishes
or abandons its current batch: nothing half-committed), the gRPC server stops (open remote take
transactions are rolled back, their events go back to the head of the queue), each channel is
closed (open transactions rolled back, segment sealed, checkpoint written), the admin endpoint
stops, the ports file is removed. A failure at any start step undoes the steps before it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.metadata
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..channel import Event, EventColumns, FileChannel
from ..channel.fs import OsFileSystem, write_atomic
from ..channel.lock import DirectoryLock
from ..errors import ChannelLockedError, ConfigError, DiskSpaceError, IngestError
from ..rpc.server import AgentService, RunningServer, start_server
from ..security import load_token
from ..settings import invalid_settings
from .admin import AdminServer
from .agent_metrics import AgentFacts, exposition, safe_stats, source_problem
from .agent_status import channel_status, source_status
from .config import AgentConfig
from .errors import AgentLockedError
from .interceptors import Interceptor, build_interceptors
from .metrics import MetricsRegistry
from .pipeline import Pipeline, PutResult
from .preflight import preflight_problems
from .selectors import ReplicatingSelectorSettings, Selector, build_selector
from .sinks import SinkGroup, build_sink_groups
from .sources import Source, build_source
from .writability import Writability

__all__ = ["Agent", "AgentLockedError", "MeteredPipeline"]

log = logging.getLogger("ingest_toolkit.collect.agent")


def _version() -> str:
    try:
        return importlib.metadata.version("ingest-toolkit")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


__version__ = _version()

class MeteredPipeline(Pipeline):
    """A :class:`Pipeline` that records every ``put_batch`` (duration, events, errors) in the registry."""

    def __init__(self, channels: Mapping[str, FileChannel], *, selector: Selector,
                 interceptors: Sequence[Interceptor], name: str, metrics: MetricsRegistry,
                 writability: Writability | None = None) -> None:
        super().__init__(channels, selector=selector, interceptors=interceptors, name=name)
        self._metrics, self._writability = metrics, writability

    def put_batch(self, events: Sequence[Event] | EventColumns, *, batch_id: str | None = None,
                  channel: str | None = None) -> PutResult:
        started = time.perf_counter()
        try:
            result = super().put_batch(events, batch_id=batch_id, channel=channel)
        except Exception as err:
            self._metrics.record_error(self.name, type(err).__name__)
            if isinstance(err, DiskSpaceError) and self._writability is not None:
                self._writability.refused(err)  # a rate-limited WARNING, and health degraded
            raise
        self._metrics.record_put(self.name, events=0 if result.duplicate else result.accepted,
                                 seconds=time.perf_counter() - started, duplicate=result.duplicate)
        if self._writability is not None:
            self._writability.accepted(result.channels)
        return result


class Agent:
    """One agent; :meth:`start` then :meth:`stop` (both from the same thread)."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.metrics = MetricsRegistry()
        self.channels: dict[str, FileChannel] = {}
        self.writability = Writability(self.channels)  # sees the channels as they are opened
        self.sources: dict[str, Source] = {}
        self.sink_groups: dict[str, SinkGroup] = {}
        self.grpc: RunningServer | None = None
        self.service: AgentService | None = None
        self.admin: AdminServer | None = None
        self.started_at = 0.0
        self._state_lock: DirectoryLock | None = None
        self._stopping = False
        self._running = False

    # -- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Start everything; on any failure undo what was started and raise the error."""
        settings = self.config.agent
        grpc_token = self._preflight()
        try:
            self._lock_state_dir()
            self._open_channels()
            self._build_sources()
            with _bind_errors("sinks", "the sinks"):
                self.sink_groups = build_sink_groups(self.config.sinks, self.config.sink_groups, self.channels,
                                                     self.config.sink_state_dir())
            if settings.admin.enabled:  # bound before any source starts, served once all run
                address = f"{settings.admin.host}:{settings.admin.port}"
                with _bind_errors("agent.admin.port", f"the admin endpoint cannot bind {address}"):
                    self.admin = AdminServer(self, host=settings.admin.host, port=settings.admin.port,
                                             security=settings.admin.security)
            if settings.grpc.enabled:
                self._start_grpc(grpc_token)
            for name, source in self.sources.items():
                log.info("starting source", extra={"source": name})
                with _bind_errors(f"sources.{name}.port", f"source {name} cannot start"):
                    source.start()
            for name, group in self.sink_groups.items():
                log.info("starting sink group", extra={"sink_group": name})
                group.start()
            if self.admin is not None:
                self.admin.start()
        except BaseException:
            self.stop()
            raise
        self.started_at = time.time()
        self._running = True
        self._write_ports_file()

    def _preflight(self) -> str | None:
        """Everything ``agent --check`` checks (:func:`.preflight.preflight_problems`: directories,
        tokens, TLS files, channel keys, ports, exec programs), all problems in one ConfigError,
        before anything was opened or bound. Returns the gRPC token."""
        problems = preflight_problems(self.config)
        if problems:
            raise invalid_settings("agent configuration", problems, source=self.config.path)
        return load_token(self.config.agent.security, key="agent.security.token_env")

    def stop(self) -> None:
        """Stop in the documented order; safe to call twice and after a failed start."""
        self._stopping = True
        timeout = self.config.agent.shutdown_timeout
        for name, source in reversed(list(self.sources.items())):
            _quietly(f"stopping source {name}", functools.partial(source.stop, timeout))
        for name, group in reversed(list(self.sink_groups.items())):
            _quietly(f"stopping sink group {name}", functools.partial(group.stop, timeout))
        if self.grpc is not None:
            _quietly("stopping the gRPC server", functools.partial(self.grpc.stop, timeout))
            self.grpc = None
        for name, channel in reversed(list(self.channels.items())):
            _quietly(f"closing channel {name}", channel.close)
        self.channels.clear()
        if self.admin is not None:
            _quietly("stopping the admin endpoint", self.admin.stop)
            self.admin = None
        if self._running:
            _quietly("removing the ports file", lambda: self.config.agent.ports_path.unlink(missing_ok=True))
        if self._state_lock is not None:
            self._state_lock.release()
            self._state_lock = None
        self._running = False

    def _lock_state_dir(self) -> None:
        state_dir = self.config.agent.state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        lock = DirectoryLock(str(state_dir))
        try:
            lock.acquire()
        except ChannelLockedError as err:
            raise AgentLockedError(path=err.path, holder=err.holder) from None
        self._state_lock = lock

    def _open_channels(self) -> None:
        for name, channel_config in self.config.channels.items():
            started = time.perf_counter()
            channel = FileChannel(**channel_config.model_dump())
            self.channels[name] = channel
            log.info("channel open", extra={"channel": name, "queued": len(channel),
                                            "seconds": round(time.perf_counter() - started, 3)})
            self._first_checkpoint(name, channel)

    @staticmethod
    def _first_checkpoint(name: str, channel: FileChannel) -> None:
        """A checkpoint right after open: ``checkpoint.meta`` (what the sensors and the checks read)
        describes the running agent from its first second instead of one interval later, and a
        crash soon after a long replay does not replay it all again. A failure only warns: the
        periodic checkpoints retry, as they would after any failed checkpoint."""
        try:
            channel.checkpoint()
        except (IngestError, OSError) as err:
            log.warning("channel %s: the checkpoint after open failed (%s); the next periodic one retries",
                        name, err, extra={"channel": name})

    def _pipeline(self, name: str, channels: list[str], selector: Any, interceptors: Sequence[Any],
                  key: str) -> MeteredPipeline:
        try:
            built_selector = build_selector(selector, channels)
            built = build_interceptors(interceptors)
        except ConfigError as err:
            raise ConfigError(f"{key}.{err.key or ''}: {err}", key=f"{key}.{err.key or ''}") from None
        return MeteredPipeline({c: self.channels[c] for c in channels}, selector=built_selector,
                               interceptors=built, name=name, metrics=self.metrics, writability=self.writability)

    def _build_sources(self) -> None:
        for name, settings in self.config.sources.items():
            pipeline = self._pipeline(name, list(settings.channels), settings.selector, settings.interceptors,
                                      f"sources.{name}")
            _ensure_spool_dir(name, settings)
            state_dir = self.config.source_state_dir(name)
            state_dir.mkdir(parents=True, exist_ok=True)
            self.sources[name] = build_source(name, settings, pipeline, state_dir)

    def _start_grpc(self, token: str | None) -> None:
        grpc_settings = self.config.agent.grpc
        default = grpc_settings.channels or list(self.channels)
        pipeline = self._pipeline("grpc", default, ReplicatingSelectorSettings(), grpc_settings.interceptors,
                                  "agent.grpc")
        pipeline.channels = dict(self.channels)  # a put naming a channel may name any of them

        def put(channel: str | None, events: EventColumns, batch_id: str | None) -> PutResult:
            return pipeline.put_batch(events, batch_id=batch_id, channel=channel)

        forwarded = {name: group_name for group_name, group in self.sink_groups.items()
                     for name, channel in self.channels.items() if channel is group.channel}

        def forwarding(channel: str) -> dict[str, Any] | None:
            group = self.sink_groups.get(forwarded.get(channel, ""))
            return group.forwarding() if group is not None else None

        self.service = AgentService(self.channels, put, token=token, forwarded=forwarded, forwarding=forwarding,
                                    default_lease_seconds=grpc_settings.default_lease_seconds,
                                    max_lease_seconds=grpc_settings.max_lease_seconds,
                                    max_open_transactions=grpc_settings.max_open_transactions,
                                    observe=self.metrics.record_remote)
        self.grpc = start_server(self.service, host=grpc_settings.host, port=grpc_settings.port,
                                 tls=self.config.agent.security.tls,
                                 max_message_bytes=grpc_settings.max_message_bytes)

    # -- ports ----------------------------------------------------------------------------
    def ports(self) -> dict[str, Any]:
        """The bound ports: ``{"pid", "agent", "grpc", "admin", "sources": {name: port}}``."""
        return {
            "pid": os.getpid(),
            "agent": self.config.agent.name,
            "grpc": self.grpc.port if self.grpc is not None else None,
            "admin": self.admin.port if self.admin is not None else None,
            "sources": {n: port for n, s in self.sources.items() if (port := _port_of(s)) is not None},
        }

    def _write_ports_file(self) -> None:
        import json

        ports = self.ports()
        path = self.config.agent.ports_path
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(OsFileSystem(), str(path), json.dumps(ports, sort_keys=True).encode() + b"\n")
        log.info("agent ready", extra={"ports_file": str(path), **{k: v for k, v in ports.items() if k != "agent"}})

    # -- health, metrics, status ----------------------------------------------------------
    def health(self) -> list[str]:
        """Reasons the agent is not healthy (empty: healthy)."""
        return self.health_report()[1]

    def health_report(self) -> tuple[str, list[str]]:
        """``(status, reasons)``: ``ok``; ``degraded`` when everything runs but a channel cannot take
        puts (disk space); ``unhealthy`` when a channel or source is down, or while starting/stopping."""
        if self._stopping:
            return "unhealthy", ["agent is stopping"]
        if not self._running:
            return "unhealthy", ["agent is starting"]
        down = [f"channel {name}: {problem}" for name, ch in self.channels.items()
                if (problem := _channel_problem(ch))]
        down += [f"source {name}: {problem}" for name, source in self.sources.items()
                 if (problem := source_problem(source))]
        down += [f"sink group {name}: not running" for name, group in self.sink_groups.items() if not group.running]
        full = [f"channel {name}: {problem}" for name, problem in self.writability.problems().items()]
        return ("unhealthy" if down else "degraded" if full else "ok"), down + full

    def status(self) -> dict[str, Any]:
        return {
            "agent": self.config.agent.name, "version": __version__, "ports": self.ports(),
            "healthy": not self.health(), "reasons": self.health(),
            "channels": {n: channel_status(n, ch, self.writability) for n, ch in self.channels.items()},
            "sources": {n: source_status(self.config.sources.get(n), safe_stats(s.stats))
                        for n, s in self.sources.items()},
            "sinks": {n: safe_stats(g.stats) for n, g in self.sink_groups.items()},
        }

    def acknowledge_incidents(self, channel: str, ids: list[int] | None, note: str) -> list[dict[str, Any]]:
        """The admin endpoint's acknowledgement of a channel's incidents (KeyError: no such channel)."""
        return [incident.to_json() for incident in self.channels[channel].acknowledge_incidents(ids, note)]

    def metrics_text(self) -> str:
        """The ``/metrics`` text (the families are :mod:`.agent_metrics`' business)."""
        facts = AgentFacts(self.config.agent.name, __version__, not self.health(), self.started_at)
        return exposition(facts, channels=self.channels, writability=self.writability, registry=self.metrics,
                          sources=self.sources, sink_groups=self.sink_groups)


# -- helpers ------------------------------------------------------------------------------
@contextlib.contextmanager
def _bind_errors(key: str, what: str) -> Iterator[None]:
    """An OSError while starting a listener (port in use, address not local) as a ConfigError
    naming the setting: ``what`` says what failed (\"source http cannot start\")."""
    try:
        yield
    except OSError as err:
        fix = f"stop what listens there, or set {key} to a free port" if err.errno == errno.EADDRINUSE \
            else f"fix {key}"
        raise ConfigError(f"{what}: {err.strerror or err}: {fix}", key=key) from None


def _quietly(what: str, action: Any) -> None:
    """Run one shutdown step; a failure is logged and the next steps still run."""
    try:
        action()
    except Exception as err:
        log.error("%s failed: %s", what, err, extra={"error": type(err).__name__})


def _ensure_spool_dir(name: str, settings: Any) -> None:
    """A spool directory that does not exist yet is created (and logged): the drop side may start later."""
    directory = getattr(settings, "dir", None)
    if getattr(settings, "type", None) == "spool_dir" and isinstance(directory, Path) and not directory.exists():
        log.warning("creating the missing spool directory", extra={"source": name, "dir": str(directory)})
        directory.mkdir(parents=True, exist_ok=True)


def _port_of(source: Source) -> int | None:
    """The bound port of a network source (None for others, or when it is not listening)."""
    try:
        port = getattr(source, "port", None)
    except RuntimeError:
        return None
    return port if isinstance(port, int) else None


def _channel_problem(channel: FileChannel) -> str | None:
    """Opening (and rolling back) an empty transaction is the public way to ask "usable?": it raises
    ChannelClosedError or ChannelFailedError otherwise, and writes nothing."""
    try:
        channel.transaction().rollback()
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return None
