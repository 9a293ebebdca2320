"""How each channel is curated: the ``curated`` table of the orchestration settings.

::

    [orchestrate.curated]            # (or [dagster.curated]) every channel
    parser = "json"                  # json | logfmt | regex | none
    format = "auto"                  # auto (the landing's format) | parquet | delta | iceberg
    max_depth = 3                    # nested objects flattened this deep (user.id -> user__id)
    header_columns = ["host"]        # headers as string columns header_<name> (all stay in `headers`)
    rescued_max_share = 0.01         # curated_rescued_below_threshold fails above this share of rows
    contract = { columns = "evolve", data_type = "evolve" }

    [orchestrate.curated.channels.nginx]   # one channel's differences
    parser = "regex"
    pattern = '(?P<ip>\\S+) \\S+ \\S+ \\[(?P<time>[^\\]]+)\\] "(?P<request>[^"]*)" (?P<status>\\d+)'
    types = { status = "long" }
    contract = { columns = "freeze" }
    schema_file = "conf/schemas/nginx.json"

A channel's table overrides the keys it sets; ``contract`` is merged key by key. :mod:`.schema`
documents the columns, types and contract modes, :mod:`.parse` the parsers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import ConfigError
from .parse import regex_groups
from .schema import COLUMN_TYPES, ColumnType, Contract, Mode

__all__ = ["ChannelCuration", "ContractSettings", "CuratedSettings", "Curation"]

TableFormat = Literal["auto", "parquet", "delta", "iceberg"]
Parser = Literal["json", "logfmt", "regex", "none"]


class ContractSettings(BaseModel):
    """dlt's contract modes (:mod:`.schema`): for new fields (``columns``, and per column-name glob
    in ``column_patterns``) and for values that do not fit their column's type (``data_type``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    columns: Mode | None = None
    data_type: Mode | None = None
    column_patterns: dict[str, Mode] = Field(default_factory=dict)


class ChannelCuration(BaseModel):
    """A channel's differences from the defaults (every key optional)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: TableFormat | None = None
    parser: Parser | None = None
    pattern: str | None = None
    types: dict[str, str] = Field(default_factory=dict)
    header_columns: list[str] | None = None
    max_depth: int | None = Field(default=None, ge=1, le=8)
    keep_body: bool | None = None
    contract: ContractSettings = Field(default_factory=ContractSettings)
    schema_file: str | None = None
    rescued_max_share: float | None = Field(default=None, ge=0, le=1)

    @field_validator("types")
    @classmethod
    def _known_types(cls, value: dict[str, str]) -> dict[str, str]:
        for name, kind in value.items():
            if kind not in COLUMN_TYPES:
                raise ValueError(f"types.{name}: {kind!r} is not one of {', '.join(COLUMN_TYPES)}")
        return value

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                regex_groups(value)
            except ConfigError as err:
                raise ValueError(str(err)) from None
        return value


class Curation(BaseModel):
    """One channel's curation, every key resolved."""

    format: TableFormat = "auto"
    parser: Parser = "json"
    pattern: str | None = None
    types: dict[str, ColumnType] = Field(default_factory=dict)
    header_columns: list[str] = Field(default_factory=list)
    max_depth: int = 3
    keep_body: bool = False
    contract: Contract = Field(default_factory=Contract)
    schema_file: str | None = None
    rescued_max_share: float = 0.01

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    def table_format(self, landing_format: str) -> str:
        """The curated table's format: ``auto`` is the landing's."""
        return landing_format if self.format == "auto" else self.format


class CuratedSettings(ChannelCuration):
    """The defaults of every channel, and ``channels``: each channel's differences."""

    channels: dict[str, ChannelCuration] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _regex_has_pattern(self) -> CuratedSettings:
        for name, channel in {"": self, **self.channels}.items():
            parser = channel.parser or self.parser or "json"
            if parser == "regex" and not (channel.pattern or self.pattern):
                where = f"channels.{name}." if name else ""
                raise ValueError(f"{where}parser = \"regex\" needs {where}pattern (a regular expression with named "
                                 "groups, e.g. (?P<level>\\w+))")
        return self

    def for_channel(self, channel: str) -> Curation:
        """The resolved curation of ``channel`` (its table over the defaults)."""
        own = self.channels.get(channel, ChannelCuration())
        values: dict[str, Any] = {}
        for key in ("format", "parser", "pattern", "header_columns", "max_depth", "keep_body", "schema_file",
                    "rescued_max_share"):
            value = getattr(own, key)
            if value is None:
                value = getattr(self, key)
            if value is not None:
                values[key] = value
        values["types"] = {**self.types, **own.types}
        contract = {key: getattr(own.contract, key) or getattr(self.contract, key)
                    for key in ("columns", "data_type")}
        values["contract"] = Contract(columns=contract["columns"] or "evolve",
                                      data_type=contract["data_type"] or "evolve",
                                      column_patterns={**self.contract.column_patterns, **own.contract.column_patterns})
        return Curation(**values)
