"""A landing of one channel as ``ingest-toolkit land`` and the Dagster landing asset run it.

1. The route (:func:`~ingest_toolkit.land.route.resolve_route`): in-process, or through the
   agent that owns the channel.
2. The committed backlog is read first; when it is zero the run ends there, without starting
   Spark (a session costs 5-15 s to start). A landing into a Delta or Iceberg table never starts
   Spark: those tables are written by delta-rs and PyIceberg.
3. Spark starts *before* this process opens the gRPC channel its takes use: PySpark forks to
   exec the JVM, and a fork while gRPC is active killed 3 launches in 100 (see
   :mod:`ingest_toolkit.rpc._fork`). The backlog of a remote channel is read over gRPC before
   Spark only where gRPC's fork handlers are off (``FORK_HANDLERS_OFF``: the toolkit set
   ``GRPC_ENABLE_FORK_SUPPORT=false`` before gRPC was imported); elsewhere Spark starts first and
   an empty remote channel costs that start.
4. The batches: one take transaction (``batches=1``), up to N, or until the channel is drained
   (``batches=None``: :func:`~ingest_toolkit.land.drain.land_until_empty`).

Through an agent, the first status call (the backlog's) also checks that the agent serves the
channel the route's :class:`~ingest_toolkit.land.route.Identity` names; another channel of the
same name is refused with WrongAgentError before anything is taken. ``report`` hears of the
backlog, each batch's phases and each completed batch as they happen (the progress ``land``
shows; :mod:`ingest_toolkit.land.progress`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..collect.errors import WrongAgentError
from ..collect.locate import mismatch, same_id
from ..errors import ChannelLockedError, ConfigError
from .config import agent_client
from .drain import land_until_empty
from .landing import LandingResult
from .progress import QUIET, LandingProgress
from .route import Route
from .source import InProcessSource, TakeSource
from .tables import needs_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..rpc.client import AgentClient

__all__ = ["LandingRun", "checked_backlog", "land_channel"]


@dataclass(frozen=True)
class LandingRun:
    """What one landing did: its route, the committed backlog it found, its batches (none when
    the channel was empty; Spark was then not started)."""

    route: Route
    backlog_before: int | None  # None: not read before Spark started (see step 3)
    results: list[LandingResult] = field(default_factory=list)

    @property
    def spark_started(self) -> bool:
        """Whether the run started Spark: it landed something into a plain Parquet table (Delta and
        Iceberg tables are written without it)."""
        return bool(self.results) and needs_spark(self.route.config)

    @property
    def backlog_after(self) -> int:
        return self.results[-1].backlog_after if self.results else (self.backlog_before or 0)

    @property
    def temp_files_pending(self) -> int:
        """Temporary files of killed commits the recovery kept (younger than the grace period)."""
        return max((r.temp_files_pending for r in self.results), default=0)


def land_channel(route: Route, start_spark: Callable[[], SparkSession | None], *, batches: int | None = 1,
                 overlap: bool = False, token: str | None = None, report: LandingProgress = QUIET) -> LandingRun:
    """Land channel ``route.channel`` (module docstring). ``batches``: take transactions at most
    (None: until drained); ``overlap``: two batches in flight; ``token``: the agent's bearer token
    (default: the variable ``[landing] agent_token_env`` names); ``report``: told of the progress.
    Raises LandingError, ConfigError or WrongAgentError; batches that completed before a failure
    stay landed."""
    if not needs_spark(route.config):
        start_spark = _no_spark
    if not route.remote:
        with _in_process(route) as source:
            backlog = source.backlog()
            if backlog == 0:
                return LandingRun(route, 0)
            return LandingRun(route, backlog, _batches(route, source, start_spark(), batches, overlap, report))
    return _land_remote(route, start_spark, batches, overlap, token, report)


def _no_spark() -> None:
    return None


def _land_remote(route: Route, start_spark: Callable[[], SparkSession | None], batches: int | None, overlap: bool,
                 token: str | None, report: LandingProgress) -> LandingRun:
    from ..rpc import FORK_HANDLERS_OFF
    from ..rpc.client import RemoteSource

    backlog = None
    if FORK_HANDLERS_OFF or not needs_spark(route.config):
        with agent_client(route.config, token=token) as client:
            backlog = checked_backlog(route, client)
    if backlog == 0:
        return LandingRun(route, 0)
    spark = start_spark()  # before this process's gRPC channel for the takes (step 3)
    with agent_client(route.config, token=token) as client:
        if backlog is None:
            checked_backlog(route, client)
        source = RemoteSource(client, route.channel, route.config.lease_seconds)
        return LandingRun(route, backlog, _batches(route, source, spark, batches, overlap, report))


def _batches(route: Route, source: TakeSource, spark: SparkSession | None, batches: int | None,
             overlap: bool, report: LandingProgress) -> list[LandingResult]:
    return land_until_empty(source, route.config, spark, max_runs=batches, overlap=overlap and batches != 1,
                            report=report)


def checked_backlog(route: Route, client: AgentClient) -> int:
    """The channel's committed backlog, from the agent's status, after checking that the agent
    serves the channel ``route.identity`` names (WrongAgentError otherwise; nothing taken)."""
    status = client.status(route.channel)
    identity = route.identity
    if identity is not None and not same_id(str(status.get("channel_id")), identity.channel_id):
        differs = mismatch(route.channel, identity.channel_id, str(status.get("channel_id")), identity.origin,
                           identity.checkpoint_dir)
        raise WrongAgentError(f"agent {route.config.agent} is not the one that runs {identity.origin}: {differs}; "
                              "nothing was taken: take through that configuration's agent (leave out --agent, "
                              "--ports-file and [landing] agent), or point [landing] agent_conf (or --channel-conf) "
                              "at the configuration of the agent you mean",
                              channel=route.channel, expected=identity.channel_id, served=status.get("channel_id"))
    return int(status["queue_size"])


@contextmanager
def _in_process(route: Route) -> Iterator[InProcessSource]:
    from ..channel import FileChannel

    assert route.settings is not None
    try:
        channel = FileChannel(**route.settings)
    except ChannelLockedError as err:  # taken between the route's look at the lock and now
        raise ConfigError(f"channel {route.channel!r} was opened by another process ({err.holder}) while this "
                          "landing started; run it again to land through that process's agent",
                          key="landing.agent") from err
    try:
        yield InProcessSource(channel, route.channel)
    finally:
        channel.close()
