"""Orchestration settings: what an orchestrator's definitions (Dagster's in ``ingest_toolkit.dagster``) are built from.

Three sources, all read when the definitions load (``dg dev``, ``dagster dev``, tests):

* ``conf/agent.toml`` ``[channels.<name>]``: the channels to orchestrate (one landing asset,
  sensor, schedule, curated asset and set of checks per channel) and their directories;
* ``conf/landing.toml``: landing and Spark settings (read by :mod:`ingest_toolkit.land`);
* the optional ``[dagster]`` table of ``conf/dagster.toml`` (thresholds, schedule, partitions,
  check tolerances). Every key has a default, so the file may be absent; any key can be
  overridden from the environment as ``INGEST_DAGSTER__<KEY>``.

The directory holding these files is ``INGEST_CONF_DIR`` (default ``conf``, relative to the
current directory, which is the repository root for ``dg dev``).
"""

from __future__ import annotations

import os
import zoneinfo
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..settings import env_overrides, env_variables, invalid_settings, load_table, validation_problems

__all__ = ["ChannelSpec", "OrchestrationSettings", "conf_dir", "load_channel_specs", "load_orchestration_settings"]


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


class OrchestrationSettings(BaseModel):
    """The ``[dagster]`` table. Thresholds apply to every channel."""

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
    # Curated, hourly partitioned tables.
    timezone: str = "UTC"
    partitions_start: str = "auto"  # "auto": the earliest landed hour (or today); else "YYYY-MM-DD-HH:mm"
    curated_root: str = "var/curated"
    # Landing runs: land_once calls per run (each one take transaction), stopping early when empty.
    batches_per_run: int = Field(1, ge=1)
    # Checks.
    checkpoint_stale_factor: float = Field(3.0, ge=1.0)
    checkpoint_stale_when_stopped: bool = False
    drained_log_grace_seconds: float = Field(60.0, ge=0)
    backlog_warn_fraction: float = Field(0.8, gt=0, le=1)
    landing_only_taker: bool = True
    checkpoint_wait_seconds: float = Field(0.0, ge=0)
    runbook_url: str = ""  # where docs/runbook.md is served; checks link <runbook_url>#<check> ("": the local file)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as 'UTC' or 'Europe/Paris')") from None
        return value


def load_orchestration_settings(path: Path | None = None) -> OrchestrationSettings:
    """``[dagster]`` of ``path`` (default ``<conf dir>/dagster.toml``) with environment overrides."""
    path = path or conf_dir() / "dagster.toml"
    values: dict[str, Any]
    if path.exists():
        values = load_table(path, "dagster")
    else:
        values = env_overrides("dagster")
    defaults_from_dir = {"agent_conf": str(conf_dir() / "agent.toml"), "landing_conf": str(conf_dir() / "landing.toml")}
    try:
        return OrchestrationSettings(**{**defaults_from_dir, **values})
    except ValidationError as err:
        problems = [(f"dagster.{key}", msg) for key, msg in validation_problems(err)]
        raise invalid_settings("[dagster] settings", problems, source=path if path.exists() else None,
                               env=env_variables("dagster")) from None


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
