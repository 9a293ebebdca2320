"""Sources: where events come from (spool directory, tailed files, HTTP, a command's output).

``SOURCE_TYPES`` maps each ``type`` to its settings model and source class;
``build_source(name, settings, pipeline, state_dir)`` makes a source from validated settings.
Every source is constructed as ``Cls(name, settings, pipeline, state_dir=...)`` and has ``name``,
``start()``, ``stop(timeout)`` and ``stats()``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, cast

from pydantic import BaseModel, Field

from ..errors import SourceStateError
from ..pipeline import Pipeline
from .base import Source, SourceSettings
from .exec import ExecSettings, ExecSource
from .http import HttpSettings, HttpSource
from .spool_dir import SpoolDirSettings, SpoolDirSource
from .tail import TailSettings, TailSource

__all__ = ["SOURCE_TYPES", "AnySourceSettings", "ExecSettings", "ExecSource", "HttpSettings", "HttpSource", "Source",
           "SourceSettings", "SourceStateError", "SpoolDirSettings", "SpoolDirSource", "TailSettings", "TailSource",
           "build_source"]

SOURCE_TYPES: dict[str, tuple[type[BaseModel], type[Source]]] = {
    "spool_dir": (SpoolDirSettings, SpoolDirSource),
    "tail": (TailSettings, TailSource),
    "http": (HttpSettings, HttpSource),
    "exec": (ExecSettings, ExecSource),
}

AnySourceSettings = Annotated[SpoolDirSettings | TailSettings | HttpSettings | ExecSettings,
                              Field(discriminator="type")]


def build_source(name: str, settings: BaseModel, pipeline: Pipeline, state_dir: Path) -> Source:
    """The source for validated ``settings`` (its ``type`` picks the class)."""
    kind = getattr(settings, "type", None)
    if kind not in SOURCE_TYPES:
        raise TypeError(f"unknown source type {kind!r}; expected one of {', '.join(SOURCE_TYPES)}")
    model, cls = SOURCE_TYPES[kind]
    if not isinstance(settings, model):
        raise TypeError(f"settings for a {kind} source must be {model.__name__}, got {type(settings).__name__}")
    factory = cast(Callable[..., Source], cls)
    return factory(name, settings, pipeline, state_dir=Path(state_dir))
