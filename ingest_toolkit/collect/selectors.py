"""Channel selectors: which channels an event goes to, and whether each one is required.

Semantics follow Apache Flume's channel selectors:

* A **required** channel that fails (full, disk space low, any error) fails the whole put: the
  caller gets the error and retries the batch (with a batch id the retry skips the channels that
  already committed it, so nothing is stored twice).
* An **optional** channel that fails is logged and counted; the put still succeeds. Optional
  channels are written after every required channel has committed.

``replicating`` sends every event to every channel of the source; ``optional`` names the ones
whose failure is ignored. ``multiplexing`` picks channels per event by the value of one header:
``mapping[value]`` (required) or ``default`` when the value is missing or unmapped, plus
``optional[value]``. A channel listed as both required and optional for a value is required.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from ..channel import Event, EventColumns
from ..errors import ConfigError

__all__ = [
    "MultiplexingSelector",
    "MultiplexingSelectorSettings",
    "ReplicatingSelector",
    "ReplicatingSelectorSettings",
    "Route",
    "Selector",
    "SelectorSettings",
    "build_selector",
]


@dataclass(frozen=True)
class Route:
    """The events of one batch bound for one channel, in batch order."""

    channel: str
    events: list[Event] = field(default_factory=list)
    required: bool = True
    columns: EventColumns | None = None  # the batch as columns instead of ``events`` (see Pipeline.put_batch)


class Selector(Protocol):
    def route(self, events: Sequence[Event]) -> list[Route]:
        """Split ``events`` into one route per target channel, required routes first."""
        ...


class ReplicatingSelectorSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["replicating"] = "replicating"
    optional: list[str] = Field(default_factory=list)


class MultiplexingSelectorSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["multiplexing"]
    header: str = Field(min_length=1)
    mapping: dict[str, list[str]] = Field(default_factory=dict)
    # Unmapped values and events without the header go here; an event must go somewhere.
    default: list[str] = Field(min_length=1)
    optional: dict[str, list[str]] = Field(default_factory=dict)


def _selector_type(value: Any) -> str | None:
    """``type`` may be left out: the default selector is replicating (as in Flume)."""
    if isinstance(value, dict):
        return str(value.get("type", "replicating"))
    return getattr(value, "type", None)


SelectorSettings = Annotated[
    Annotated[ReplicatingSelectorSettings, Tag("replicating")]
    | Annotated[MultiplexingSelectorSettings, Tag("multiplexing")],
    Discriminator(_selector_type),
]


class ReplicatingSelector:
    """Every event to every channel; channels in ``optional`` may fail without failing the put."""

    def __init__(self, channels: Sequence[str], optional: Sequence[str] = ()) -> None:
        self.required = [c for c in channels if c not in optional]
        self.optional = [c for c in channels if c in optional]

    def route(self, events: Sequence[Event]) -> list[Route]:
        if not events:
            return []
        batch = list(events)
        return ([Route(c, batch, True) for c in self.required]
                + [Route(c, batch, False) for c in self.optional])

    def route_columns(self, columns: EventColumns) -> list[Route]:
        """:meth:`route` for a batch as columns: every channel gets the whole batch anyway."""
        if not len(columns):
            return []
        return ([Route(c, [], True, columns) for c in self.required]
                + [Route(c, [], False, columns) for c in self.optional])


class MultiplexingSelector:
    """Per event: ``mapping[header value]`` or ``default`` (required) plus ``optional[value]``."""

    def __init__(self, header: str, mapping: dict[str, list[str]], default: Sequence[str],
                 optional: dict[str, list[str]] | None = None) -> None:
        self.header = header
        self.mapping = {k: list(v) for k, v in mapping.items()}
        self.default = list(default)
        self.optional = {k: list(v) for k, v in (optional or {}).items()}

    def targets(self, value: str | None) -> tuple[list[str], list[str]]:
        """(required, optional) channel names for a header value."""
        required = self.mapping.get(value, self.default) if value is not None else self.default
        optional = [c for c in self.optional.get(value, []) if c not in required] if value is not None else []
        return required, optional

    def route(self, events: Sequence[Event]) -> list[Route]:
        required: dict[str, list[Event]] = {}
        optional: dict[str, list[Event]] = {}
        for event in events:
            req, opt = self.targets(event.headers.get(self.header))
            for name in req:
                required.setdefault(name, []).append(event)
            for name in opt:
                optional.setdefault(name, []).append(event)
        return ([Route(c, evs, True) for c, evs in required.items()]
                + [Route(c, evs, False) for c, evs in optional.items()])


def build_selector(settings: ReplicatingSelectorSettings | MultiplexingSelectorSettings,
                   channel_names: list[str]) -> Selector:
    """A selector over the source's channels; naming a channel the source lacks is a ConfigError."""
    known = set(channel_names)
    if isinstance(settings, ReplicatingSelectorSettings):
        _check(settings.optional, known, "selector.optional")
        return ReplicatingSelector(channel_names, settings.optional)
    for value, names in settings.mapping.items():
        _check(names, known, f"selector.mapping.{value}")
    for value, names in settings.optional.items():
        _check(names, known, f"selector.optional.{value}")
    _check(settings.default, known, "selector.default")
    return MultiplexingSelector(settings.header, settings.mapping, settings.default, settings.optional)


def _check(names: Sequence[str], known: set[str], key: str) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"{key} names channel(s) {', '.join(unknown)} that are not in this source's "
                          f"channels ({', '.join(sorted(known)) or 'none'})", key=key)
