"""Orchestration settings: what an orchestrator's definitions (Dagster's in ``ingest_toolkit.dagster``, the
Airflow operators of ``ingest_toolkit.airflow``) are built from.

Three sources, all read when the definitions load (``dg dev``, ``dagster dev``, tests) or, under
Airflow, when a task runs:

* ``conf/agent.toml`` ``[channels.<name>]``: the channels to orchestrate (one landing asset,
  sensor, schedule, curated asset and set of checks per channel) and their directories;
* ``conf/landing.toml``: landing and Spark settings (read by :mod:`ingest_toolkit.land`);
* the thresholds, schedule, partitions and check tolerances (:class:`OrchestrationSettings`):
  the optional ``[orchestrate]`` table of ``conf/orchestrate.toml``, the home every orchestrator
  reads, and the optional ``[dagster]`` table of ``conf/dagster.toml``, read on top of it (a key
  set in both takes the ``[dagster]`` value: a Dagster deployment's file keeps working, and an
  Airflow sensor beside it uses the very thresholds of the Dagster sensor). Every key has a
  default, so both files may be absent; any key can be overridden from the environment as
  ``INGEST_ORCHESTRATE__<KEY>`` or ``INGEST_DAGSTER__<KEY>`` (each applies to its table).

The directory holding these files is ``INGEST_CONF_DIR`` (default ``conf``, relative to the
current directory, which is the repository root for ``dg dev``).
"""

from __future__ import annotations

import datetime
import os
import zoneinfo
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..curate.settings import CuratedSettings
from ..errors import ConfigError
from ..settings import env_overrides, env_variables, invalid_settings, load_table, validation_problems

__all__ = ["PARTITIONS_START", "ChannelSpec", "OrchestrationSettings", "channel_spec", "conf_dir",
           "load_channel_specs", "load_orchestration_settings", "remote_channel_spec"]

PARTITIONS_START = r"^(auto|[0-9]{4}-[0-9]{2}-[0-9]{2}-[0-9]{2}:[0-9]{2})$"
"""What ``partitions_start`` may be: ``auto``, or the first hourly key, ``2026-11-01-00:00``
(also the JSON schema's pattern of the component attribute, which ``dg check defs`` checks)."""


NEUTRAL_FILE, NEUTRAL_TABLE = "orchestrate.toml", "orchestrate"


def conf_dir() -> Path:
    """The configuration directory: ``INGEST_CONF_DIR`` or ``conf``."""
    return Path(os.environ.get("INGEST_CONF_DIR", "conf"))


class ChannelSpec(BaseModel):
    """What the orchestration needs to know about one channel of the agent configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    checkpoint_dir: str
    data_dirs: tuple[str, ...]
    capacity: int
    checkpoint_interval: float
    settings: dict[str, Any] = Field(default_factory=dict)  # every ChannelConfig field, to open it in-process
    agent_conf: str | None = None  # the agent configuration naming it (finds the agent that owns it)
    # The agent serving it, when several agents have channels of the same name (a fleet): the
    # orchestrator's names of this channel's definitions start with it (:attr:`node`).
    agent_name: str | None = None

    @property
    def node(self) -> str:
        """The name the orchestrator's definitions of this channel derive from: ``<agent_name>_<name>``
        in a fleet (two aggregators' ``events`` are two sets of assets, sensors and pools), else the
        channel's name."""
        return f"{self.agent_name}_{self.name}" if self.agent_name else self.name


class OrchestrationSettings(BaseModel):
    """The ``[orchestrate]`` / ``[dagster]`` tables. Thresholds apply to every channel."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_conf: str = "conf/agent.toml"
    landing_conf: str = "conf/landing.toml"
    # Sensor: request a landing run when the committed backlog or its age crosses a threshold.
    sensor_min_backlog: int = Field(10_000, ge=1)
    sensor_max_backlog_age_seconds: float = Field(300.0, gt=0)
    sensor_interval_seconds: int = Field(30, ge=5)
    sensor_max_retries: int = Field(3, ge=0)  # a failed landing of a state is requested again at most this often
    sensor_retry_seconds: float = Field(60.0, ge=0)  # ... each this long after the failed run ended
    observe_interval_seconds: int = Field(60, ge=30)  # the channel observer sensor records one observation this often
    # Schedule: drain every channel periodically, whatever the thresholds say.
    drain_cron: str = "*/30 * * * *"
    # Maintenance of a Delta or Iceberg landed table (compaction, retention), on this schedule.
    maintenance_cron: str = "0 3 * * *"
    # Curated, hourly partitioned tables.
    timezone: str = "UTC"
    # "auto": the earliest landed hour or lookback days ago; else "YYYY-MM-DD-HH:mm" (the pattern
    # is the JSON schema's, which dg check defs checks; _first_key checks the value)
    partitions_start: str = Field("auto", json_schema_extra={"pattern": PARTITIONS_START})
    partitions_lookback_days: int = Field(3, ge=0, le=366)  # auto, nothing landed yet: this many days before today
    curated_root: str = "var/curated"
    curated: CuratedSettings = Field(default_factory=CuratedSettings)  # parsers, schema, contract (curate.settings)
    # Landing runs: land_once calls per run (each one take transaction), stopping early when empty.
    batches_per_run: int = Field(1, ge=1)
    # Checks.
    checkpoint_stale_factor: float = Field(3.0, ge=1.0)
    checkpoint_stale_when_stopped: bool = False
    drained_log_grace_seconds: float = Field(60.0, ge=0)
    backlog_warn_fraction: float = Field(0.8, gt=0, le=1)
    landing_only_taker: bool = True
    checkpoint_wait_seconds: float = Field(0.0, ge=0)
    max_files_per_partition: int = Field(64, ge=1)  # landed_files_per_partition warns above this
    # Where the sensor, the drain schedule, the observer and the channel checks read a channel's
    # state: "auto" (the agent's gRPC status when an agent is configured and the checkpoint
    # directory cannot be read here, else the directories), "local" or "remote" (orchestrate.remote).
    observe: Literal["auto", "local", "remote"] = "auto"
    runbook_url: str = ""  # where docs/runbook.md is served; checks link <runbook_url>#<check> ("": the local file)

    @field_validator("partitions_start")
    @classmethod
    def _first_key(cls, value: str) -> str:
        try:
            if value != "auto":
                datetime.datetime.strptime(value, "%Y-%m-%d-%H:%M")
        except ValueError:
            raise ValueError(f"{value!r} is neither 'auto' nor an hourly partition key: write auto, or the first "
                             "hour as YYYY-MM-DD-HH:MM (\"2026-11-01-00:00\")") from None
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as 'UTC' or 'Europe/Paris')") from None
        return value


def load_orchestration_settings(path: Path | None = None, *, directory: Path | None = None) -> OrchestrationSettings:
    """``[orchestrate]`` of ``<conf dir>/orchestrate.toml``, then ``[dagster]`` of ``path`` (default
    ``<conf dir>/dagster.toml``) on top, each with its environment overrides (module docstring).
    ``directory``: the configuration directory (default :func:`conf_dir`)."""
    base = directory if directory is not None else conf_dir()
    tables = [(NEUTRAL_TABLE, base / NEUTRAL_FILE), ("dagster", path or base / "dagster.toml")]
    values: dict[str, Any] = {}
    origin: dict[str, tuple[str, Path | None]] = {}
    for table, source in tables:
        found = load_table(source, table) if source.exists() else env_overrides(table)
        values.update(found)
        origin.update((key, (table, source if source.exists() else None)) for key in found)
    defaults_from_dir = {"agent_conf": str(base / "agent.toml"), "landing_conf": str(base / "landing.toml")}
    try:
        return OrchestrationSettings(**{**defaults_from_dir, **values})
    except ValidationError as err:
        problems = [(f"{origin.get(key, ('dagster', None))[0]}.{key}", msg) for key, msg in validation_problems(err)]
        first = problems[0][0].partition(".")[2] if problems else ""
        env = {**env_variables(NEUTRAL_TABLE), **env_variables("dagster")}
        raise invalid_settings("orchestration settings", problems, source=origin.get(first, ("dagster", None))[1],
                               env=env) from None


def load_channel_specs(agent_conf: str | Path) -> list[ChannelSpec]:
    """One :class:`ChannelSpec` per ``[channels.<name>]`` table of the agent configuration, in file order.

    The whole file is validated by :func:`~ingest_toolkit.collect.config.load_agent_config` (its
    errors name the key path, e.g. ``channels.events.capacity``; ``INGEST_CHANNELS__<NAME>__<KEY>``
    overrides apply), so a bad channel stops the definitions from loading with a message that
    says what to fix, instead of failing later inside a run. Relative directories are resolved
    against the current directory, as the agent resolves them.
    """
    from ..collect.config import load_agent_config

    config = load_agent_config(agent_conf)
    return [ChannelSpec(name=name, checkpoint_dir=channel.checkpoint_dir, data_dirs=tuple(channel.data_dirs),
                        capacity=channel.capacity, checkpoint_interval=channel.checkpoint_interval,
                        settings=channel.model_dump(), agent_conf=str(agent_conf))
            for name, channel in config.channels.items()]


def remote_channel_spec(name: str, agent_name: str | None = None, checkpoint_dir: str = "",
                        data_dirs: tuple[str, ...] = ()) -> ChannelSpec:
    """A channel known only by the agent that serves it (no agent configuration on this host): its
    state comes from the agent's status (capacity and checkpoint interval from its checkpoint.meta)
    and its landings take through that agent."""
    return ChannelSpec(name=name, checkpoint_dir=checkpoint_dir, data_dirs=data_dirs, capacity=0,
                       checkpoint_interval=0.0, agent_name=agent_name)


def channel_spec(agent_conf: str | Path, name: str, *, agent: str | None = None) -> ChannelSpec:
    """The :class:`ChannelSpec` of channel ``name``; ConfigError naming the file and its channels
    when it has no ``[channels.<name>]`` table. With ``agent`` (the address the landing takes
    through), a missing file or table gives :func:`remote_channel_spec` instead."""
    if agent and not Path(agent_conf).exists():
        return remote_channel_spec(name)
    specs = {spec.name: spec for spec in load_channel_specs(agent_conf)}
    if agent and name not in specs:
        return remote_channel_spec(name)
    if name not in specs:
        raise ConfigError(f"{agent_conf} has no [channels.{name}] table; its channels: "
                          f"{', '.join(specs) or 'none'}", key=f"channels.{name}")
    return specs[name]
