"""Loading settings from ``conf/*.toml`` with environment overrides.

A table's keys map to config fields. Any field can be overridden by an environment variable
``INGEST_<TABLE>__<KEY>`` (e.g. ``INGEST_CHANNEL__CAPACITY=500000``); list values are given as
comma-separated strings. Relative paths in the file are resolved against the current directory.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import ConfigError

__all__ = ["env_overrides", "load_channel_settings", "load_table", "read_toml", "validation_problems"]


def read_toml(path: Path, key: str) -> dict[str, Any]:
    """The whole TOML document of ``path``; a missing or invalid file is a ConfigError (``key``)."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist", key=key) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}", key=key) from None


def load_table(path: Path, table: str) -> dict[str, Any]:
    document = read_toml(path, table)
    values = document.get(table)
    if not isinstance(values, dict):
        raise ConfigError(f"{path} has no [{table}] table", key=table)
    return {**values, **env_overrides(table)}


def load_channel_settings(path: Path) -> dict[str, Any]:
    return load_table(path, "channel")


def env_overrides(table: str) -> dict[str, Any]:
    """The ``INGEST_<TABLE>__<KEY>`` variables as ``{key: value}`` (``*dirs`` keys split on commas)."""
    prefix = f"INGEST_{table.upper()}__"
    found: dict[str, Any] = {}
    for name, raw in os.environ.items():
        if name.startswith(prefix):
            key = name[len(prefix):].lower()
            found[key] = raw.split(",") if key.endswith("dirs") else raw
    return found


def validation_problems(err: ValidationError) -> list[tuple[str, str]]:
    """``(dotted key path, message)`` of every problem pydantic found, without its "Value error, "
    prefix; the path is empty for a problem of the whole table."""
    return [(".".join(str(part) for part in e["loc"]), e["msg"].removeprefix("Value error, ")) for e in err.errors()]
