"""The Dagster component: one channel's landing, curated table, sensors, schedule and checks from a ``defs.yaml``.

``dg scaffold defs ingest_toolkit.dagster.IngestChannelComponent events`` writes
``defs/events/defs.yaml`` (:class:`IngestChannelScaffolder`); ``dg check defs`` validates it; the
instance yields what :func:`~ingest_toolkit.dagster.factory.build_channel_definitions` builds for
the channel. The component only gathers its settings:

* the channel: ``channel``, found in the ``[channels.<channel>]`` table of ``agent_conf``; its
  directories as this host sees them may be given instead (``checkpoint_dir``, ``data_dirs``);
  ``agent`` makes the runs take through that agent (leased gRPC takes) instead of in-process;
* every other value (``landing_conf``, ``landing_root``, ``curated_root``, ``partitions``,
  ``schedule``, ``sensor``, ``pools``, ``checks``) is optional: what ``defs.yaml`` leaves out
  comes from the ``[dagster]`` table of ``dagster_conf`` (default ``<conf dir>/dagster.toml``,
  with its ``INGEST_DAGSTER__<KEY>`` variables), else from the defaults of
  :class:`~ingest_toolkit.orchestrate.settings.OrchestrationSettings`.

Relative paths are relative to the directory the code location loads in (the project's root for
``dg dev`` and ``dg check defs``), as everywhere in the toolkit. A value of the wrong type is
reported by Dagster's own validation of ``defs.yaml`` (file, line, key); a value out of range, a
channel the agent configuration lacks, or a file that cannot be read stops the code location from
loading with a :class:`~ingest_toolkit.errors.ConfigError` that names the ``defs.yaml`` and the
key (``attributes.sensor.min_backlog``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import dagster as dg
from dagster.components import Scaffolder, ScaffoldRequest
from pydantic import BaseModel, Field, ValidationError

from ingest_toolkit.errors import ConfigError
from ingest_toolkit.orchestrate.settings import (
    ChannelSpec,
    OrchestrationSettings,
    conf_dir,
    load_channel_specs,
    load_orchestration_settings,
    remote_channel_spec,
)
from ingest_toolkit.settings import validation_problems

from .factory import ChannelOptions, build_channel_definitions

__all__ = ["IngestChannelComponent", "IngestChannelScaffolder"]


def _doc(description: str, checked: str | None = None) -> dg.Resolver:
    """A component attribute's description (dg's schema, the UI's Docs tab). ``checked``: the
    attribute (``batches_per_run``) or table (``sensor``) whose values' constraints (minimum,
    maximum, pattern: those of the OrchestrationSettings fields behind them) go into the schema
    that ``dg check defs`` validates before anything loads, so that a value out of range is one
    error naming the file, the line and the key (:func:`_constraints`)."""
    extra = (_constraints(checked) if checked else None) or None
    resolver: dg.Resolver = dg.Resolver.default(description=description, json_schema_extra=extra)
    return resolver


_KEPT = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern")


def _constraints(attribute: str) -> dict[str, Any]:
    """The JSON-schema constraints of ``attribute`` (a value) or of the keys of table ``attribute``.

    They sit beside the attribute's schema, not in it: Dagster lets every attribute be a template
    string too (``anyOf [table, string]``), and dg reports a value that fails inside an ``anyOf``
    as the whole table "not valid under any of the given schemas"; constraints on a nested model's
    fields are refused by Dagster outright. Constraints apply to values of their type only (a
    template string passes ``minimum``; patterns let ``{{ ... }}`` through), and loading checks
    every value again (OrchestrationSettings), for ``dg dev`` and the Python API."""
    fields = OrchestrationSettings.model_json_schema()["properties"]

    def kept(field: str) -> dict[str, Any]:
        found = {k: v for k, v in fields[field].items() if k in _KEPT}
        if "pattern" in found:
            found["pattern"] = _or_template(found["pattern"])
        return found

    if (attribute,) in _SETTING_OF:
        return kept(_SETTING_OF[(attribute,)])
    keys = {path[1]: kept(field) for path, field in _SETTING_OF.items() if path[0] == attribute and len(path) == 2}
    found = {key: constraints for key, constraints in keys.items() if constraints}
    return {"properties": found} if found else {}


def _or_template(pattern: str) -> str:
    """``pattern`` (``^(...)$``), or a template string that Dagster resolves when it loads."""
    return pattern.removesuffix(")$") + "|[{]{2}.*[}]{2})$"


def _opt(description: str) -> Any:
    """An optional attribute (None: from the [dagster] table, else the default), described for
    ``dg`` and the UI's Docs tab."""
    return Field(None, description=description)


class PartitionsAttributes(dg.Model):
    """The curated table's hourly partitions."""

    start: str | None = _opt('"auto" (the earliest landed hour, or lookback_days back) or the first key, '
                             '"2026-11-01-00:00"')
    timezone: str | None = _opt("IANA time zone of the partition keys and the schedule; UTC has no odd DST keys")
    lookback_days: int | None = _opt("auto, nothing landed yet: start this many days before today (history)")


class ContractAttributes(dg.Model):
    """The schema contract of the curated table (evolve, freeze, discard_row, discard_value)."""

    columns: str | None = _opt("new fields: evolve (new columns), freeze (fail the run), discard_row, discard_value")
    data_type: str | None = _opt("values that do not fit their column: evolve/discard_value (rescue), freeze, "
                                 "discard_row")
    column_patterns: dict[str, str] | None = _opt('per column-name glob, e.g. {"debug__*": "discard_value"}')


class CuratedAttributes(dg.Model):
    """How the curated table parses and types the bodies (docs/curation.md)."""

    parser: str | None = _opt("json (default), logfmt, regex (with pattern) or none (the landed columns)")
    pattern: str | None = _opt("regex: a regular expression with named groups, (?P<level>\\w+)")
    format: str | None = _opt("auto (the landing's format), parquet, delta or iceberg")
    types: dict[str, str] | None = _opt('column types instead of inferred ones, e.g. {"status": "long"}')
    header_columns: list[str] | None = _opt("headers as string columns header_<name>")
    max_depth: int | None = _opt("nested objects flattened this deep (user.id -> user__id)")
    keep_body: bool | None = _opt("keep the raw body column beside the typed ones")
    schema_file: str | None = _opt("a JSON Schema or a list of columns that fixes the schema")
    rescued_max_share: float | None = _opt("curated_rescued_below_threshold fails above this share of rows")
    contract: ContractAttributes | None = _opt("the schema contract")


class ScheduleAttributes(dg.Model):
    """The drain schedule: a landing run this often whatever the sensor thresholds say."""

    drain_cron: str | None = _opt("cron expression, in partitions.timezone (default */30 * * * *)")
    maintenance_cron: str | None = _opt("the Delta or Iceberg table's maintenance (compaction, retention), "
                                        "in partitions.timezone (default 0 3 * * *)")


class SensorAttributes(dg.Model):
    """The landing sensor on checkpoint.meta, and the channel observer."""

    min_backlog: int | None = _opt("request a landing at this committed backlog (events)")
    max_backlog_age_seconds: float | None = _opt("... or when the oldest committed event is this old")
    interval_seconds: int | None = _opt("minimum time between evaluations of the landing and curated sensors")
    max_retries: int | None = _opt("a failed landing of a channel state is requested again at most this often")
    retry_seconds: float | None = _opt("... each this long after the failed run ended")
    observe_interval_seconds: int | None = _opt("the observer records the channel's state this often (>= 30)")


class PoolsAttributes(dg.Model):
    """Concurrency pools (their limits are the Dagster instance's: dagster.yaml)."""

    landing: str | None = _opt("pool of the landing asset (default landing-<channel>)")
    curated: str | None = _opt("pool of the curated asset (default curated-<channel>: one per curated table, "
                               "shared by the instances of a fleet that curate the same channel)")


class ChecksAttributes(dg.Model):
    """Thresholds of the asset checks (docs/runbook.md)."""

    checkpoint_stale_factor: float | None = _opt("checkpoint_fresh fails past this many checkpoint intervals")
    checkpoint_stale_when_stopped: bool | None = _opt("also judge the checkpoint of a channel no process owns")
    drained_log_grace_seconds: float | None = _opt("a segment below the deletion floor may outlive its checkpoint "
                                                   "this long")
    backlog_warn_fraction: float | None = _opt("backlog_below_capacity warns at this fill")
    landing_only_taker: bool | None = _opt("reconcile manifests against the channel's takes_committed")
    checkpoint_wait_seconds: float | None = _opt("landed_reconciles waits this long for a newer checkpoint")
    runbook_url: str | None = _opt("where docs/runbook.md is served; checks link <runbook_url>#<check>")
    max_files_per_partition: int | None = _opt("landed_files_per_partition warns above this many data files")


# defs.yaml attribute path -> OrchestrationSettings field
_SETTING_OF: dict[tuple[str, ...], str] = {
    ("agent_conf",): "agent_conf", ("landing_conf",): "landing_conf", ("curated_root",): "curated_root",
    ("batches_per_run",): "batches_per_run", ("observe",): "observe",
    ("partitions", "start"): "partitions_start", ("partitions", "timezone"): "timezone",
    ("partitions", "lookback_days"): "partitions_lookback_days",
    ("schedule", "drain_cron"): "drain_cron", ("schedule", "maintenance_cron"): "maintenance_cron",
    ("sensor", "min_backlog"): "sensor_min_backlog",
    ("sensor", "max_backlog_age_seconds"): "sensor_max_backlog_age_seconds",
    ("sensor", "interval_seconds"): "sensor_interval_seconds", ("sensor", "max_retries"): "sensor_max_retries",
    ("sensor", "retry_seconds"): "sensor_retry_seconds",
    ("sensor", "observe_interval_seconds"): "observe_interval_seconds",
    **{("checks", name): name for name in ChecksAttributes.model_fields},
}
_ATTRIBUTE_OF = {field: ".".join(("attributes", *path)) for path, field in _SETTING_OF.items()}


class IngestChannelScaffolder(Scaffolder["IngestChannelScaffoldParams"]):
    """Writes ``<target>/defs.yaml`` for the channel named like the target directory (or
    ``--json-params '{"channel": ...}'``), every setting at its default and commented."""

    @classmethod
    def get_scaffold_params(cls) -> type[IngestChannelScaffoldParams]:
        return IngestChannelScaffoldParams

    def scaffold(self, request: ScaffoldRequest[IngestChannelScaffoldParams]) -> None:
        params = request.params or IngestChannelScaffoldParams()
        channel = params.channel or request.target_path.name
        request.target_path.mkdir(parents=True, exist_ok=True)
        target = request.target_path / "defs.yaml"
        if target.exists():
            raise ConfigError(f"{target} exists: scaffold overwrites nothing; edit it or remove it", key="defs.yaml")
        target.write_text(defs_yaml(request.type_name, channel, params.agent_conf, params.agent, params.agent_name),
                          encoding="utf-8")


class IngestChannelScaffoldParams(BaseModel):
    channel: str | None = None  # default: the name of the target directory
    agent_conf: str = "conf/agent.toml"
    agent: str | None = None
    agent_name: str | None = None  # a fleet: the agent's name, which the definitions' names start with


_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf"}


def defs_yaml(type_name: str, channel: str, agent_conf: str = "conf/agent.toml", agent: str | None = None,
              agent_name: str | None = None) -> str:
    """The ``defs.yaml`` the scaffolder writes: the channel, where it lives, and every setting at its default."""
    d = OrchestrationSettings.model_validate({})
    node = f"{agent_name}_{channel}" if agent_name else channel

    def line(text: str, comment: str = "") -> str:
        return f"{text:<39}# {comment}".rstrip() if comment else text

    def flag(value: bool) -> str:
        return "true" if value else "false"

    def text(value: str) -> str:
        """``value`` as a YAML string: plain when YAML reads it back as that string, else quoted."""
        plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", value) and value.lower() not in _YAML_WORDS
        return value if plain else json.dumps(value)

    lines = [
        "# One channel of ingest-toolkit: its landing asset, hourly curated table, sensors, drain",
        "# schedule and asset checks (docs/dagster.md). Paths are relative to the directory the code",
        "# location loads in (the project root). A key left out takes its value from the [dagster]",
        "# table of dagster_conf (default conf/dagster.toml), else the default shown here.",
        f"type: {type_name}",
        "",
        "attributes:",
        f"  channel: {text(channel)}",
        f"  # Where it lives: the [channels.{channel}] table of the agent configuration (its directories",
        "  # as this host sees them may be given as checkpoint_dir and data_dirs).",
        f"  agent_conf: {agent_conf}",
        "  # Take through this agent's gRPC API (leased takes) instead of opening the channel in-process:",
        f"  agent: {agent}" if agent else "  # agent: 127.0.0.1:7431",
        "  # In a fleet (the same channel on several agents): names of the definitions start with this:",
        f"  agent_name: {text(agent_name)}" if agent_name else "  # agent_name: agg1",
        line(f"  observe: {d.observe}", "state from the directories (local), the agent's status (remote)"),
        line("  landing_conf: conf/landing.toml", "Spark settings and the landing defaults"),
        line("  landing_root: var/landing", f"path or URI (hdfs://, s3a://); the table is <root>/{channel}"),
        line("  # table_format: delta", "parquet, delta or iceberg (default: landing_conf's format)"),
        line(f"  curated_root: {d.curated_root}"),
        line("  curate: true", "false: no curated table here (another instance curates it)"),
        line(f"  batches_per_run: {d.batches_per_run}", "take transactions per landing run"),
        "  partitions:",
        line(f"    start: {d.partitions_start}", 'or the first hour of your data, "2026-11-01-00:00"'),
        line(f"    timezone: {d.timezone}", "IANA name; UTC has no odd keys on DST days"),
        line(f"    lookback_days: {d.partitions_lookback_days}", "auto, nothing landed yet: start this many days back"),
        "  # How the bodies become typed columns (docs/curation.md); unset, [dagster.curated] applies:",
        line("  # curated:"),
        line(f"  #   parser: {d.curated.parser}", "json | logfmt | regex (with pattern) | none"),
        line(f"  #   format: {d.curated.format}", "auto: the landing's format; parquet | delta | iceberg"),
        line(f"  #   rescued_max_share: {d.curated.rescued_max_share}", "the rescued-data check fails above it"),
        line("  #   contract:", "evolve | freeze | discard_row | discard_value"),
        line("  #     columns: evolve", "new fields"),
        line("  #     data_type: evolve", "values that do not fit their column"),
        "  schedule:",
        line(f'    drain_cron: "{d.drain_cron}"', "a landing run this often whatever the thresholds say"),
        line(f'    maintenance_cron: "{d.maintenance_cron}"', "compaction and retention of a Delta/Iceberg table"),
        "  sensor:",
        line(f"    min_backlog: {d.sensor_min_backlog}", "land at this committed backlog ..."),
        line(f"    max_backlog_age_seconds: {d.sensor_max_backlog_age_seconds}", "... or when the oldest is this old"),
        line(f"    interval_seconds: {d.sensor_interval_seconds}"),
        line(f"    max_retries: {d.sensor_max_retries}", "a failed landing is requested again this often"),
        line(f"    retry_seconds: {d.sensor_retry_seconds}", "... each this long after it ended"),
        line(f"    observe_interval_seconds: {d.observe_interval_seconds}", "the channel's state, for the plots"),
        line("  pools:", "their limits: the instance's dagster.yaml"),
        line(f"    landing: {text(f'landing-{node}')}"),
        line(f"    curated: {text(f'curated-{channel}')}", "one per curated table (fleet instances share it)"),
        "  checks:",
        line(f"    checkpoint_stale_factor: {d.checkpoint_stale_factor}"),
        line(f"    checkpoint_stale_when_stopped: {flag(d.checkpoint_stale_when_stopped)}"),
        line(f"    drained_log_grace_seconds: {d.drained_log_grace_seconds}"),
        line(f"    backlog_warn_fraction: {d.backlog_warn_fraction}"),
        line(f"    landing_only_taker: {flag(d.landing_only_taker)}"),
        line(f"    checkpoint_wait_seconds: {d.checkpoint_wait_seconds}"),
        line(f'    runbook_url: "{d.runbook_url}"', "where docs/runbook.md is served (checks link to it)"),
        line(f"    max_files_per_partition: {d.max_files_per_partition}", "landed_files_per_partition warns above"),
    ]
    return "\n".join(lines) + "\n"


@dg.scaffold_with(IngestChannelScaffolder)
class IngestChannelComponent(dg.Component, dg.Resolvable, dg.Model):
    """One ingest-toolkit channel: landing (Spark, exactly once), hourly curated table, sensors,
    drain schedule and every asset check.

    The channel is a channels table of the agent configuration (agent_conf). Keys left out take
    their value from the dagster table of dagster_conf (default conf/dagster.toml), else the
    toolkit's defaults. Scaffold options: --channel (default: the directory's name), --agent-conf,
    --agent (host:port, to take through that agent), --agent-name (a fleet: the definitions' names
    start with it). docs/dagster.md has every key.
    """

    channel: Annotated[str, _doc("the channel: a [channels.<name>] table of agent_conf")]
    agent_conf: Annotated[str | None, _doc(
        "the agent configuration naming the channel (default <conf dir>/agent.toml)")] = None
    checkpoint_dir: Annotated[str | None, _doc(
        "the channel's checkpoint directory as this host sees it (default: agent_conf's)")] = None
    data_dirs: Annotated[list[str] | None, _doc(
        "the channel's data directories as this host sees them (default: agent_conf's)")] = None
    agent: Annotated[str | None, _doc(
        "host:port: take through this agent's gRPC API (leased takes) instead of in-process")] = None
    agent_name: Annotated[str | None, _doc(
        "the agent's name in a fleet: the names of this instance's assets, jobs, sensors, schedule, pools and "
        "resources start with it (agg1_events_landed), so the same channel of several agents can live in "
        "one code location")] = None
    observe: Annotated[str | None, _doc(
        'where the sensors and channel checks read the channel\'s state: "auto" (the agent\'s gRPC status when '
        'agent is set and checkpoint_dir cannot be read here), "local" or "remote"')] = None
    landing_conf: Annotated[str | None, _doc(
        "Spark settings and landing defaults (default <conf dir>/landing.toml)")] = None
    landing_root: Annotated[str | None, _doc(
        "where the landed table goes, <root>/<channel> (default: landing_conf's root)")] = None
    table_format: Annotated[Literal["parquet", "delta", "iceberg"] | None, _doc(
        "the landed table's format: parquet (Spark), delta or iceberg (no Spark; a maintenance asset and schedule "
        "come with them) (default: landing_conf's format)")] = None
    curated_root: Annotated[str | None, _doc("where the curated tables go (default var/curated)")] = None
    curate: Annotated[bool, _doc(
        "build the hourly curated table, its job, sensor and check (false: in a fleet whose instances land "
        "the same channel into one table, every instance but one)")] = True
    batches_per_run: Annotated[int | None, _doc("take transactions per landing run (default 1)",
                                                checked="batches_per_run")] = None
    dagster_conf: Annotated[str | None, _doc(
        "the [dagster] table of the keys left out (default <conf dir>/dagster.toml)")] = None
    partitions: Annotated[PartitionsAttributes | None, _doc(
        "the curated table's hourly partitions", checked="partitions")] = None
    schedule: Annotated[ScheduleAttributes | None, _doc("the drain schedule")] = None
    sensor: Annotated[SensorAttributes | None, _doc(
        "the landing sensor's thresholds and the observer's interval", checked="sensor")] = None
    pools: Annotated[PoolsAttributes | None, _doc("concurrency pools of the landing and curated assets")] = None
    checks: Annotated[ChecksAttributes | None, _doc("thresholds of the asset checks", checked="checks")] = None
    curated: Annotated[CuratedAttributes | None, _doc(
        "how this channel's curated table parses and types the bodies (over [dagster.curated])")] = None

    @classmethod
    def get_spec(cls) -> dg.ComponentTypeSpec:
        return dg.ComponentTypeSpec(
            description="Lands one ingest-toolkit channel into Parquet exactly once, builds its hourly curated "
                        "table, and checks channel and tables (sensors, drain schedule, asset checks).",
            tags=["ingest-toolkit", "spark", "parquet"],
            produces=["asset", "asset_check", "sensor", "schedule", "job", "resource"])

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        where = context.path / "defs.yaml" if context.path.is_dir() else context.path
        settings = self.settings(where)
        spec = self.channel_spec(settings, where)
        pools = self.pools or PoolsAttributes()
        options = ChannelOptions(landing_root=self.landing_root, table_format=self.table_format, agent=self.agent,
                                 landing_pool=pools.landing,
                                 curated_pool=pools.curated, curate=self.curate)
        return build_channel_definitions(spec, settings, options)

    def setting_values(self) -> dict[str, Any]:
        """The OrchestrationSettings fields ``defs.yaml`` sets."""
        values: dict[str, Any] = {}
        for path, field in _SETTING_OF.items():
            value: Any = self
            for part in path:
                value = getattr(value, part, None) if value is not None else None
            if value is not None:
                values[field] = value
        return values

    def settings(self, where: Path) -> OrchestrationSettings:
        """The settings of this instance: ``defs.yaml`` over the ``[dagster]`` table over the defaults."""
        table = Path(self.dagster_conf) if self.dagster_conf else conf_dir() / "dagster.toml"
        if self.dagster_conf and not table.is_file():
            raise ConfigError(f"{where}: attributes.dagster_conf: {table} does not exist (the [dagster] table of "
                              "the keys this file leaves out); fix the path or remove the key",
                              key="attributes.dagster_conf")
        base = load_orchestration_settings(table)
        values = self.setting_values()
        if self.curated is not None:  # this channel's curation, over the [dagster.curated] table's for it
            curated = base.curated.model_dump(exclude_none=True)
            own = {**curated.get("channels", {}).get(self.channel, {}), **self.curated.model_dump(exclude_none=True)}
            values["curated"] = {**curated, "channels": {**curated.get("channels", {}), self.channel: own}}
        try:
            settings = OrchestrationSettings(**{**base.model_dump(), **values})
        except ValidationError as err:
            problems = [f"{self._attribute_of(key)}: {msg}" for key, msg in validation_problems(err)]
            raise ConfigError(f"invalid component attributes in {where}: " + "; ".join(problems),
                              key=self._attribute_of(validation_problems(err)[0][0])) from None
        from dagster._utils.schedules import is_valid_cron_string

        for name in ("drain_cron", "maintenance_cron"):
            cron = getattr(settings, name)
            if not is_valid_cron_string(cron):
                key = f"attributes.schedule.{name}" if name in values else f"dagster.{name}"
                raise ConfigError(f"{where if key.startswith('attributes') else table}: {key}: {cron!r} is "
                                  "not a cron expression (five fields, e.g. '*/30 * * * *')", key=key)
        return settings

    def _attribute_of(self, key: str) -> str:
        """The ``defs.yaml`` attribute of a settings key (``curated.channels.<channel>.parser`` is
        ``attributes.curated.parser``)."""
        own = f"curated.channels.{self.channel}."
        if key.startswith(own):
            return "attributes.curated." + key.removeprefix(own)
        return _ATTRIBUTE_OF.get(key, key)

    def channel_spec(self, settings: OrchestrationSettings, where: Path) -> ChannelSpec:
        """The channel of ``agent_conf`` (its directories replaced by those of ``defs.yaml``)."""
        try:
            specs = {spec.name: spec for spec in load_channel_specs(settings.agent_conf)}
        except ConfigError as err:
            if self.agent and not Path(settings.agent_conf).exists():
                return self.remote_spec()
            raise ConfigError(f"{where}: attributes.agent_conf: {err}", key="attributes.agent_conf") from None
        spec = specs.get(self.channel)
        if spec is None and self.agent:
            spec = self.remote_spec()
        if spec is None:
            raise ConfigError(f"{where}: attributes.channel: {self.channel!r} is not a channel of "
                              f"{settings.agent_conf} (its channels: {', '.join(specs) or 'none'}); name one of them "
                              "or add [channels." + self.channel + "] there", key="attributes.channel")
        moved: dict[str, Any] = {}  # ChannelConfig fields: opening the channel in-process uses them too
        if self.checkpoint_dir:
            moved["checkpoint_dir"] = self.checkpoint_dir
        if self.data_dirs:
            moved["data_dirs"] = list(self.data_dirs)
        if moved:
            spec = spec.model_copy(update={**moved, "data_dirs": tuple(moved.get("data_dirs", spec.data_dirs)),
                                           "settings": {**spec.settings, **moved}})
        return spec.model_copy(update={"agent_name": self.agent_name}) if self.agent_name else spec

    def remote_spec(self) -> ChannelSpec:
        """A channel known only by its agent (no agent configuration here): its state comes from the
        agent's status (capacity, checkpoint interval: from its checkpoint.meta), its runs take
        through it."""
        return remote_channel_spec(self.channel, self.agent_name, self.checkpoint_dir or "",
                                   tuple(self.data_dirs or ()))
