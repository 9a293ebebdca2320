"""The agent's configuration: ``conf/agent.toml``, validated before anything starts.

Tables::

    [agent]                  name, state_dir, ports_file, log_level, log_format, shutdown_timeout
    [agent.grpc]             enabled, host, port, channels, interceptors, lease limits, max_message_bytes
    [agent.admin]            enabled, host, port, security (health + Prometheus metrics)
    [agent.security]         token_env, tls: the gRPC endpoint's auth and TLS
    [channels.<name>]        ChannelConfig fields (ingest_toolkit.channel.config)
    [sources.<name>]         type = "spool_dir" | "tail" | "http", channels, selector, interceptors, ...

Every problem found is reported at once in one :class:`ConfigError` whose message names each key
path (``sources.spool.dir: field required``) and whose ``key`` is the first one. Unknown keys are
errors, so a typo never silently falls back to a default.

Environment overrides: ``INGEST_<PATH>`` where the path's parts are joined by ``__``, e.g.
``INGEST_AGENT__GRPC__PORT=0`` or ``INGEST_CHANNELS__EVENTS__CAPACITY=500000`` (names are
lower-cased; a value whose key holds a list in the file, or ends in ``dirs``, is split on commas).

Relative paths (channel directories, ``state_dir``, ``ports_file``, source paths, TLS files) are
resolved against the current working directory when the file is loaded - as everywhere else in
the toolkit - so run the agent from the deployment root (systemd: ``WorkingDirectory=``).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..channel.config import ChannelConfig
from ..errors import ConfigError
from ..security import SecuritySettings
from ..settings import invalid_settings, problem_message
from .interceptors import InterceptorSettings, build_interceptors
from .selectors import build_selector
from .sinks.settings import ForwardSinkSettings, SinkGroupSettings
from .sources.base import SourceSettings
from .sources.spool_settings import SpoolDirSettings

__all__ = ["AdminSettings", "AgentConfig", "AgentSettings", "GrpcSettings", "load_agent_config"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TABLES = ("agent", "channels", "sources", "sinks", "sink_groups")
_ENV_PREFIX = "INGEST_"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GrpcSettings(_Frozen):
    """The gRPC endpoint: remote put, leased remote take, status."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=7431, ge=0, le=65535)  # 0: an ephemeral port (see the ports file)
    channels: list[str] = Field(default_factory=list)  # puts naming no channel go here; empty: all
    interceptors: list[InterceptorSettings] = Field(default_factory=list)  # for those puts only
    default_lease_seconds: float = Field(default=60.0, gt=0)
    max_lease_seconds: float = Field(default=600.0, gt=0)
    max_open_transactions: int = Field(default=48, ge=1)  # remote transactions open at once (one thread each)
    max_message_bytes: int = Field(default=64 << 20, ge=1 << 20)  # per request/response, both directions


class AdminSettings(_Frozen):
    """The admin HTTP endpoint: ``GET /healthz``, ``GET /metrics``, ``GET /status``."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=7432, ge=0, le=65535)
    security: SecuritySettings = SecuritySettings()  # the token guards /metrics and /status


class AgentSettings(_Frozen):
    name: str = "agent"
    state_dir: Path = Path("var/agent")  # source positions live in <state_dir>/sources/<name>
    ports_file: Path | None = None  # default <state_dir>/ports.json
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "console", "json", "kv"] = "auto"  # auto: console on a terminal, else json
    shutdown_timeout: float = Field(default=10.0, gt=0)  # per stage: sources, gRPC grace
    grpc: GrpcSettings = GrpcSettings()
    admin: AdminSettings = AdminSettings()
    security: SecuritySettings = SecuritySettings()

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @property
    def ports_path(self) -> Path:
        return self.ports_file or self.state_dir / "ports.json"


class _Core(_Frozen):
    agent: AgentSettings = AgentSettings()
    channels: dict[str, ChannelConfig] = Field(min_length=1)


class AgentConfig(BaseModel):
    """The whole validated configuration; paths are absolute. ``sources`` maps each source's name
    to the settings model of its type (``SOURCE_TYPES[type][0]``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    path: Path
    agent: AgentSettings
    channels: dict[str, ChannelConfig]
    sources: dict[str, SourceSettings]
    sinks: dict[str, ForwardSinkSettings] = Field(default_factory=dict)
    sink_groups: dict[str, SinkGroupSettings] = Field(default_factory=dict)

    def sink_state_dir(self) -> Path:
        return self.agent.state_dir / "sinks"

    def source_state_dir(self, name: str) -> Path:
        return self.agent.state_dir / "sources" / name


def load_agent_config(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> AgentConfig:
    """Read, override from the environment, validate and cross-check ``path``; ConfigError on any
    problem (all of them listed, each with its key path)."""
    path = Path(path)
    document = _read(path)
    environ = os.environ if environ is None else environ
    from_env = _apply_env(document, environ)
    base = Path.cwd()
    problems: list[tuple[str, str]] = []
    for key in document:
        if key not in _TABLES:
            problems.append((key, f"unknown table (expected one of: {', '.join(_TABLES)})"))
    core = _validate_core(document, base, problems)
    sources = _validate_sources(document.get("sources", {}), base, problems)
    sinks, groups = _validate_sinks(document, base, problems)
    if core is not None:
        _cross_check(core, sources, problems)
        _check_sinks(core, sinks, groups, problems)
        _check_directories(core, sources, base, problems)
    if problems:
        raise invalid_settings("agent configuration", problems, source=path, env=from_env, environ=environ)
    assert core is not None  # no problems means the core validated
    agent = _absolute(core.agent, base)
    return AgentConfig(path=path.absolute(), agent=agent, channels=core.channels, sources=sources, sinks=sinks,
                       sink_groups=groups)


# -- reading and overrides --------------------------------------------------------------------
def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist", key="agent") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}", key="agent") from None


def _apply_env(document: dict[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """Apply the ``INGEST_<PATH>`` overrides to ``document``; returns ``{key path: variable}`` of
    those applied, so that a bad value is blamed on its variable rather than on the file."""
    applied: dict[str, str] = {}
    for name, raw in sorted(environ.items()):
        if not name.startswith(_ENV_PREFIX):
            continue
        parts = [p.lower() for p in name[len(_ENV_PREFIX):].split("__")]
        if parts[0] not in _TABLES or len(parts) < 2 or not all(parts):
            continue  # INGEST_CHANNEL__* belongs to conf/channel.toml, not to the agent
        node = document
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            old = node.get(parts[-1])
            as_list = isinstance(old, list) or (old is None and parts[-1].endswith("dirs"))
            node[parts[-1]] = [v.strip() for v in raw.split(",") if v.strip()] if as_list else raw
            applied[".".join(parts)] = name
    return applied


# -- validation -------------------------------------------------------------------------------
def _validate_core(document: dict[str, Any], base: Path, problems: list[tuple[str, str]]) -> _Core | None:
    raw = {"agent": document.get("agent", {}), "channels": _resolved_channels(document.get("channels"), base)}
    if "channels" not in document:
        problems.append(("channels", "at least one [channels.<name>] table is required"))
        return None
    try:
        return _Core.model_validate(raw)
    except ValidationError as err:
        problems.extend(_problems(err, raw))
        return None


def _resolved_channels(channels: object, base: Path) -> object:
    """Channel directories (and the key file) are plain strings in ChannelConfig: make them absolute here."""
    if not isinstance(channels, dict):
        return channels
    out: dict[str, Any] = {}
    for name, table in channels.items():
        if isinstance(table, dict):
            table = dict(table)
            for key in ("checkpoint_dir", "backup_checkpoint_dir", "encryption_key_file"):  # relative paths
                if isinstance(table.get(key), str):
                    table[key] = str(base / table[key])
            if isinstance(table.get("data_dirs"), list):
                table["data_dirs"] = [str(base / d) if isinstance(d, str) else d for d in table["data_dirs"]]
        out[name] = table
    return out


def _validate_sources(sources: object, base: Path, problems: list[tuple[str, str]]) -> dict[str, SourceSettings]:
    if not isinstance(sources, dict):
        problems.append(("sources", "must be a table of [sources.<name>] tables"))
        return {}
    from .sources import SOURCE_TYPES  # the source modules import the pipeline; keep this module light

    built: dict[str, SourceSettings] = {}
    for name, table in sources.items():
        prefix = f"sources.{name}"
        if not isinstance(table, dict):
            problems.append((prefix, "must be a table"))
            continue
        kind = table.get("type")
        if kind is None:
            problems.append((f"{prefix}.type", f"field required (one of: {', '.join(sorted(SOURCE_TYPES))})"))
            continue
        if not isinstance(kind, str) or kind not in SOURCE_TYPES:
            problems.append((f"{prefix}.type",
                             f"unknown source type {kind!r} (one of: {', '.join(sorted(SOURCE_TYPES))})"))
            continue
        try:
            built[name] = _absolute(SOURCE_TYPES[kind][0].model_validate(table), base)
        except ValidationError as err:
            problems.extend((f"{prefix}.{k}", m) for k, m in _problems(err, table))
    return built


def _validate_sinks(document: dict[str, Any], base: Path, problems: list[tuple[str, str]]
                    ) -> tuple[dict[str, ForwardSinkSettings], dict[str, SinkGroupSettings]]:
    sinks: dict[str, ForwardSinkSettings] = {}
    groups: dict[str, SinkGroupSettings] = {}
    for table, model, out in (("sinks", ForwardSinkSettings, sinks), ("sink_groups", SinkGroupSettings, groups)):
        raw = document.get(table, {})
        if not isinstance(raw, dict):
            problems.append((table, f"must be a table of [{table}.<name>] tables"))
            continue
        for name, settings in raw.items():
            prefix = f"{table}.{name}"
            if not _NAME.match(name):
                problems.append((prefix, "names may hold letters, digits, '_', '.', '-' (at most 64)"))
            if not isinstance(settings, dict):
                problems.append((prefix, "must be a table"))
                continue
            if table == "sinks" and settings.get("type") != "forward":
                problems.append((f"{prefix}.type", f"unknown sink type {settings.get('type')!r} (one of: forward)"))
                continue
            try:
                out[name] = _absolute(model.model_validate(settings), base)
            except ValidationError as err:
                problems.extend((f"{prefix}.{k}", m) for k, m in _problems(err, settings))
    return sinks, groups


def _check_sinks(core: _Core, sinks: Mapping[str, ForwardSinkSettings], groups: Mapping[str, SinkGroupSettings],
                 problems: list[tuple[str, str]]) -> None:
    """Sinks name known channels; a group's sinks exist, belong to no other group and share one
    channel and one batch shape; a channel is emptied by one group at most (the forwarding batch
    ids need the group to be its channel's only consumer)."""
    known = sorted(core.channels)
    for name, sink in sinks.items():
        _check_names(f"sinks.{name}.channel", [sink.channel], known, problems)
    owner: dict[str, str] = {}
    for name, group in groups.items():
        for member in group.sinks:
            if member not in sinks:
                problems.append((f"sink_groups.{name}.sinks", f"unknown sink {member!r} (defined: "
                                 f"{', '.join(sorted(sinks)) or 'none'})"))
            elif member in owner:
                problems.append((f"sink_groups.{name}.sinks", f"sink {member} is also in group {owner[member]}"))
            owner.setdefault(member, name)
        members = [sinks[s] for s in group.sinks if s in sinks]
        shapes = {(m.channel, m.batch_size, m.linger, m.pipeline, m.hop_header, m.max_hops) for m in members}
        if len(shapes) > 1:
            problems.append((f"sink_groups.{name}.sinks", "the sinks of a group must have the same channel, "
                             "batch_size, linger, pipeline, hop_header and max_hops (the group takes the batches)"))
    consumers: dict[str, str] = {}
    for name, sink in sinks.items():
        group_name = owner.get(name, name)
        if consumers.setdefault(sink.channel, group_name) != group_name:
            problems.append((f"sinks.{name}.channel", f"channel {sink.channel} is already emptied by sink group "
                             f"{consumers[sink.channel]}: put both sinks in one [sink_groups.<name>] table"))


def _cross_check(core: _Core, sources: Mapping[str, SourceSettings], problems: list[tuple[str, str]]) -> None:
    known = sorted(core.channels)
    for name in [*core.channels, *sources]:
        if not _NAME.match(name):
            problems.append((name, "names may hold letters, digits, '_', '.', '-' (at most 64)"))
    for name, settings in sources.items():
        names = list(settings.channels)
        if _check_names(f"sources.{name}.channels", names, known, problems):
            _check_routing(f"sources.{name}", settings, names, problems)
    _check_names("agent.grpc.channels", core.agent.grpc.channels, known, problems)
    if core.agent.grpc.max_lease_seconds < core.agent.grpc.default_lease_seconds:
        problems.append(("agent.grpc.max_lease_seconds", "must be >= default_lease_seconds"))


def _check_directories(core: _Core, sources: Mapping[str, SourceSettings], base: Path,
                       problems: list[tuple[str, str]]) -> None:
    """Directories with one owner each: channels never share one, the agent's state directory
    overlaps no channel directory (both are locked, and the second lock would fail with a
    confusing "locked by" this very process), two spool sources never read the same directory
    (every file would be ingested twice)."""
    owners: dict[str, str] = {}
    channel_dirs = [(f"channels.{name}.{key}", directory) for name, channel in core.channels.items()
                    for key, directory in [("checkpoint_dir", channel.checkpoint_dir),
                                           *(("data_dirs", d) for d in channel.data_dirs),
                                           *([("backup_checkpoint_dir", channel.backup_checkpoint_dir)]
                                             if channel.backup_checkpoint_dir else [])]]
    for key, directory in channel_dirs:
        real = os.path.realpath(directory)
        if real in owners:
            problems.append((key, f"directory {directory} is also used by {owners[real]}"))
        owners.setdefault(real, key)
    state_dir = base / core.agent.state_dir
    for key, directory in channel_dirs:
        relation = _overlap(os.path.realpath(state_dir), os.path.realpath(directory))
        if relation:
            problems.append(("agent.state_dir", f"{state_dir} {relation} {key} ({directory}); the agent's state "
                                                "directory and the channel directories must not overlap"))
    spool_dirs: dict[str, str] = {}
    for name, settings in sources.items():
        if isinstance(settings, SpoolDirSettings):
            real = os.path.realpath(settings.dir)
            if real in spool_dirs:
                problems.append((f"sources.{name}.dir", f"{settings.dir} is also the dir of {spool_dirs[real]}: every "
                                 "file would be ingested by both sources and stored twice"))
            spool_dirs.setdefault(real, f"sources.{name}")


def _overlap(path: str, other: str) -> str | None:
    """How ``path`` relates to ``other`` ("is", "is inside", "contains"), or None when they are apart."""
    if path == other:
        return "is"
    common = os.path.commonpath([path, other])
    return "is inside" if common == other else "contains" if common == path else None


def _check_names(key: str, names: list[str], known: list[str], problems: list[tuple[str, str]]) -> bool:
    unknown = [channel for channel in names if channel not in known]
    for channel in unknown:
        problems.append((key, f"unknown channel {channel!r} (defined: {', '.join(known)})"))
    return not unknown


def _check_routing(prefix: str, settings: SourceSettings, channels: list[str], problems: list[tuple[str, str]]) -> None:
    """The selector may only name the source's channels; interceptors must build."""
    try:
        build_selector(settings.selector, channels)
        build_interceptors(settings.interceptors)
    except ConfigError as err:
        problems.append((f"{prefix}.{err.key}" if err.key else prefix, str(err)))


def _problems(err: ValidationError, raw: object) -> list[tuple[str, str]]:
    """(key path, message) per pydantic error; union/discriminator tags are dropped from the path
    because they are not keys the user wrote."""
    out = []
    for e in err.errors():
        out.append((_key_path(e["loc"], raw), problem_message(e["type"], e["msg"])))
    return out


def _key_path(loc: tuple[int | str, ...], raw: object) -> str:
    parts: list[str] = []
    node = raw
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(node, dict | list):
            if isinstance(part, str) and part.startswith(("function-", "tagged-union")):
                continue
            if not (isinstance(node, dict) and isinstance(part, str) and _is_tag(node, part)):
                node = None  # a missing key: keep it in the path
            else:
                continue
        parts.append(str(part))
    return ".".join(parts) or "agent"


def _is_tag(node: dict[str, Any], part: str) -> bool:
    return node.get("type") == part


def _absolute(model: Any, base: Path) -> Any:
    """A copy of ``model`` with every relative Path (in nested models and lists too) made absolute."""
    updates: dict[str, Any] = {}
    for field in type(model).model_fields:
        value = getattr(model, field)
        new = _absolute_value(value, base)
        if new is not value:
            updates[field] = new
    return model.model_copy(update=updates) if updates else model


def _absolute_value(value: Any, base: Path) -> Any:
    if isinstance(value, Path):
        return value if value.is_absolute() else base / value
    if isinstance(value, BaseModel):
        return _absolute(value, base)
    if isinstance(value, list | tuple) and any(isinstance(v, Path | BaseModel) for v in value):
        return type(value)(_absolute_value(v, base) for v in value)
    return value
