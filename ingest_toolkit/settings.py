"""Loading settings from ``conf/*.toml`` with environment overrides.

A table's keys map to config fields. Any field can be overridden by an environment variable
``INGEST_<TABLE>__<KEY>`` (e.g. ``INGEST_CHANNEL__CAPACITY=500000``); list values are given as
comma-separated strings. Relative paths in the file are resolved against the current directory.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import ConfigError

__all__ = ["env_overrides", "env_variables", "invalid_settings", "load_table",
           "problem_message", "read_toml", "validation_problems"]


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


def env_overrides(table: str) -> dict[str, Any]:
    """The ``INGEST_<TABLE>__<KEY>`` variables as ``{key: value}`` (``*dirs`` keys split on commas)."""
    prefix = f"INGEST_{table.upper()}__"
    found: dict[str, Any] = {}
    for name, raw in os.environ.items():
        if name.startswith(prefix):
            key = name[len(prefix):].lower()
            found[key] = raw.split(",") if key.endswith("dirs") else raw
    return found


def env_variables(table: str) -> dict[str, str]:
    """``{"<table>.<key>": variable name}`` of the ``INGEST_<TABLE>__<KEY>`` variables set now:
    an error about such a key names the variable, not the file."""
    prefix = f"INGEST_{table.upper()}__"
    return {f"{table}.{name[len(prefix):].lower()}": name for name in os.environ if name.startswith(prefix)}


def problem_message(kind: str, msg: str) -> str:
    """A pydantic problem in the toolkit's wording ("unknown key", "field required", "must be > 0")."""
    if kind == "missing":
        return "field required"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "greater_than_equal" and "1" in msg.split()[-1:]:
        return "must be > 0"
    msg = msg.removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def validation_problems(err: ValidationError) -> list[tuple[str, str]]:
    """``(dotted key path, message)`` of every problem pydantic found, in the toolkit's wording
    (:func:`problem_message`); the path is empty for a problem of the whole table."""
    return [(".".join(str(part) for part in e["loc"]), problem_message(e["type"], e["msg"])) for e in err.errors()]


def invalid_settings(what: str, problems: list[tuple[str, str]], *, source: str | os.PathLike[str] | None = None,
                     env: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> ConfigError:
    """One ConfigError for every problem, each naming its key; a value that an environment
    variable set (``env``: key -> variable name, values read from ``environ``, default the
    process's) names that variable and its value instead of blaming the file. ``key`` is the
    first problem's key."""
    env, environ = env or {}, os.environ if environ is None else environ
    parts = []
    for key, msg in problems:
        variable = env.get(key)
        if variable is None:
            parts.append(f"{key}: {msg}")
        else:
            parts.append(f"{key}: {msg} (the value {environ.get(variable, '')!r} comes from the environment "
                         f"variable {variable}: fix or unset it)")
    if problems and all(key in env for key, _msg in problems):
        where = " (environment override)"
    else:
        where = f" in {source}" if source is not None else ""
    return ConfigError(f"invalid {what}{where}: " + "; ".join(parts), key=problems[0][0] if problems else None)
