"""Dagster resources wrapping the toolkit, configured from ``conf/`` and the environment.

* :class:`LandingResource`: the landing settings (``conf/landing.toml``: root, batch size,
  agent address) and how to reach a channel (:mod:`ingest_toolkit.land.route`): through the
  configured agent when ``landing.agent`` is set; else in-process when no process owns the
  channel; else through the agent that owns it (its endpoint found from the agent configuration).
* :class:`SparkResource`: one Spark session per run process, started on first use and stopped
  at teardown. A session that already exists in the process (a test fixture, the demo) is
  reused and left running.
* :class:`CuratedResource`: where curated tables go.

Each channel has its own three resources, under the keys :class:`ResourceKeys` gives it
(``landing_<c>``, ``spark_<c>``, ``curated_<c>``): the channels of one code location may land
into different roots, through different agents (one component instance each), and Dagster allows
one resource per key in a code location.

Every value that differs per deployment is an environment variable of the settings loaders'
scheme, ``INGEST_<TABLE>__<KEY>`` (``INGEST_LANDING__ROOT``, ``INGEST_LANDING__AGENT``,
``INGEST_SPARK__MASTER``, ``INGEST_SPARK__REMOTE``, ``INGEST_DAGSTER__CURATED_ROOT``), plus the
agent's bearer token ``INGEST_AGENT_TOKEN`` (or the variable ``[landing] agent_token_env`` names).
When each is read:

* ``INGEST_LANDING__*`` and ``INGEST_SPARK__*``: by ``load_landing_config`` every time a run reads
  its configuration, in the run's process. Setting one where runs execute is enough.
* ``INGEST_DAGSTER__*``: by the orchestration settings, when the definitions load (the code
  server and each run process, which inherit the same environment under ``dg dev``).
* the resources' fields hold the values in effect when the definitions load (the file's, so the
  UI's resource page shows them), and :func:`env_or` puts a variable set there into them as
  :class:`dagster.EnvVar`, so the UI shows where the value comes from. A run loads the
  definitions again in its own process, with its own environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import PrivateAttr

from ingest_toolkit.orchestrate.landing import agent_token, channel_route
from ingest_toolkit.orchestrate.settings import ChannelSpec

from .naming import ident

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest_toolkit.land.config import LandingConfig
    from ingest_toolkit.land.route import Route

__all__ = ["CuratedResource", "LandingResource", "ResourceKeys", "SparkResource", "env_or"]


def env_or(name: str, default: str | None) -> Any:
    """``EnvVar(name)`` when the variable is set where the definitions load, else ``default``.

    The choice is made at load time, the *value* is read when a run starts (Dagster resolves
    EnvVar then; a variable unset by then fails the run's resource initialization, naming it).
    For the landing and Spark variables this only changes what the UI shows: the settings
    loaders apply them at run time either way (module docstring).
    """
    return dg.EnvVar(name) if name in os.environ else default


class LandingResource(dg.ConfigurableResource):
    """Landing settings and access to the channels."""

    landing_conf: str = "conf/landing.toml"
    root: str | None = None  # overrides [landing] root (INGEST_LANDING__ROOT applies anyway)
    agent: str | None = None  # overrides [landing] agent "host:port" (INGEST_LANDING__AGENT): remote takes
    agent_token: str | None = None  # bearer token for the agent (give it as EnvVar)
    table_format: str | None = None  # overrides [landing] format: parquet, delta, iceberg (INGEST_LANDING__FORMAT)

    def config(self) -> LandingConfig:
        from ingest_toolkit.land.config import load_landing_config

        pairs = (("root", self.root), ("agent", self.agent), ("format", self.table_format))
        overrides = {k: v for k, v in pairs if v}
        return load_landing_config(self.landing_conf, **overrides)

    def route(self, spec: ChannelSpec, config: LandingConfig) -> Route:
        """How a run reaches the channel (:func:`ingest_toolkit.orchestrate.landing.channel_route`)."""
        return channel_route(spec, config)

    def token(self, config: LandingConfig) -> str | None:
        """The resource's token, else the variable ``[landing] agent_token_env`` names (or the
        owner agent's ``token_env``), else ``INGEST_AGENT_TOKEN``, read now (run time)."""
        return agent_token(config, self.agent_token)


class SparkResource(dg.ConfigurableResource):
    """A Spark session from the ``[spark]`` settings of ``conf/landing.toml``.

    Unlike ``dagster-pyspark``'s resource, the session is stopped at teardown (when this
    resource started it), so a run process does not keep a JVM alive after its steps.
    """

    landing_conf: str = "conf/landing.toml"
    master: str | None = None  # overrides [spark] master (INGEST_SPARK__MASTER applies anyway)
    remote: str | None = None  # overrides [spark] remote, Spark Connect sc://host:port (INGEST_SPARK__REMOTE)

    _session: SparkSession | None = PrivateAttr(default=None)
    _owned: bool = PrivateAttr(default=False)

    def session(self) -> SparkSession:
        """The session, started on first call."""
        if self._session is None:
            self._session, self._owned = self._start()
        return self._session

    def _start(self) -> tuple[SparkSession, bool]:
        from ingest_toolkit.land.config import load_landing_config
        from ingest_toolkit.land.spark import spark_session
        from ingest_toolkit.orchestrate.spark import active_session

        running = active_session()
        if running is not None:  # a session this process already runs
            return running, False
        settings = load_landing_config(self.landing_conf).spark
        overrides = {k: v for k, v in (("master", self.master), ("remote", self.remote)) if v}
        if overrides:
            settings = settings.model_copy(update=overrides)
        return spark_session(settings), True

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._session is not None and self._owned:
            self._session.stop()
        self._session = None


class CuratedResource(dg.ConfigurableResource):
    """Where the curated tables are written (a local path or a Hadoop-compatible URI)."""

    root: str = "var/curated"


@dataclass(frozen=True, slots=True)
class ResourceKeys:
    """The resource keys of one channel's definitions, and the resources under them in a run."""

    landing: str
    spark: str
    curated: str

    @classmethod
    def of(cls, channel: str) -> ResourceKeys:
        """``landing_<c>``, ``spark_<c>``, ``curated_<c>`` (``<c>``: the channel as an identifier)."""
        name = ident(channel)
        return cls(landing=f"landing_{name}", spark=f"spark_{name}", curated=f"curated_{name}")

    def landing_of(self, context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> LandingResource:
        resource: LandingResource = getattr(context.resources, self.landing)
        return resource

    def spark_of(self, context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> SparkResource:
        resource: SparkResource = getattr(context.resources, self.spark)
        return resource

    def curated_of(self, context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> CuratedResource:
        resource: CuratedResource = getattr(context.resources, self.curated)
        return resource
