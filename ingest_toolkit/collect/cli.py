"""``ingest-toolkit agent``: run the agent (``send``, which pushes lines to one, is :mod:`.send`).

Exit codes: 0 after a clean stop (SIGTERM/SIGINT); 1 on a configuration error (nothing was
started), a locked channel or a port that cannot be bound.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click

from ..cli_common import verbose_option
from ..errors import ConfigError, IngestError
from ..settings import invalid_settings
from .config import AgentConfig, load_agent_config
from .preflight import preflight_problems

__all__ = ["agent_command", "configure_logging", "run_agent", "tune_gc_for_service"]

log = logging.getLogger("ingest_toolkit.collect.agent")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


_LEVEL_COLOURS = {"WARNING": "\x1b[33m", "ERROR": "\x1b[31m", "CRITICAL": "\x1b[31;1m", "DEBUG": "\x1b[2m"}


class _StructuredFormatter(logging.Formatter):
    """One line per record: JSON, ``key=value`` pairs, or for a person at a terminal (``console``)
    the local time, the level and the message, then the fields; ``extra={...}`` fields become keys."""

    def __init__(self, style: str) -> None:
        super().__init__()
        self._json, self._console = style == "json", style == "console"

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "msg": record.getMessage(),
        }
        fields.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        if self._json:
            return json.dumps(fields, default=str)
        if self._console:
            return _console_line(record, fields)
        return " ".join(f"{k}={_kv(v)}" for k, v in fields.items())


def _console_line(record: logging.LogRecord, fields: dict[str, Any]) -> str:
    """``12:04:31 INFO    agent started  channels=events grpc=127.0.0.1:7431``; a trace below it."""
    colour = _LEVEL_COLOURS.get(record.levelname, "")
    level = f"{colour}{record.levelname:<7}\x1b[0m" if colour else f"{record.levelname:<7}"
    extra = {k: v for k, v in fields.items() if k not in ("ts", "level", "logger", "msg", "exc")}
    pairs = "  " + " ".join(f"{k}={_kv(v)}" for k, v in extra.items()) if extra else ""
    line = f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {level} {fields['msg']}{pairs}"
    return f"{line}\n{fields['exc']}" if "exc" in fields else line


def _kv(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if (not text or any(c in text for c in ' "=\n')) else text


def log_style(style: str) -> str:
    """The format ``auto`` stands for: ``console`` lines for a person when stderr is a terminal,
    JSON lines for a pipe, a file or a service manager's journal (what log collectors parse)."""
    if style != "auto":
        return style
    return "console" if sys.stderr.isatty() and os.environ.get("TERM") != "dumb" else "json"


def configure_logging(level: str, style: str) -> None:
    """Structured lines on stderr for the whole process (replaces earlier handlers); ``style`` is
    ``auto`` (:func:`log_style`), ``console``, ``json`` or ``kv``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StructuredFormatter(log_style(style)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def run_agent(config: AgentConfig) -> None:
    """Run until SIGTERM or SIGINT, then stop cleanly. Errors while starting propagate (exit 1)."""
    from .agent import Agent

    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)  # no logging here: the handler may interrupt a log call
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    agent = Agent(config)
    try:
        _start(agent)  # a signal during a long replay stops the agent right after it started
        tune_gc_for_service()
        while not stop.wait(1.0):
            pass
        log.info("signal received, stopping", extra={"signal": signal.Signals(received[0]).name})
    finally:
        agent.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("agent stopped", extra={"agent": config.agent.name})


def _start(agent: Any) -> None:
    """Start ``agent``. The command prints any failure as one line; one that is not a toolkit
    error (whose message names the cause and the fix) is also logged with its trace, as one
    structured record: an unexpected system error or a bug, which on-call reads in the log."""
    try:
        agent.start()
    except Exception as err:
        if not isinstance(err, IngestError):
            log.error("agent failed to start: %s: %s", type(err).__name__, err, exc_info=True,
                      extra={"error": type(err).__name__})
        raise


GC_THRESHOLDS = (20_000, 20, 50)
"""Cyclic-GC thresholds of the agent process (CPython's default is (700, 10, 10)). Every put
batch allocates thousands of short-lived containers (events, header maps); with the default a
young collection runs several times per batch and the old generations, which hold everything
the agent built at start, are scanned often: up to a third of the agent's CPU in
``bench/ingest_agent.py``. Reference counting frees these objects anyway; the collector is only
needed for cycles, which the put path does not make."""


def tune_gc_for_service() -> None:
    """For a long-running process whose start-up is done: move every object that exists now
    into the permanent generation (``gc.freeze``: never scanned again) and collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@click.command("agent")
@click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("conf/agent.toml"), show_default=True, help="Agent configuration (TOML).")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="Overrides [agent] log_level.")
@click.option("--log-format", type=click.Choice(["auto", "console", "json", "kv"]),
              help="Overrides [agent] log_format: auto (the default) is console lines on a terminal, JSON lines "
                   "otherwise.")
@click.option("--check", is_flag=True, help="Validate the configuration and everything the start needs (directories "
              "writable, token variables set, TLS files readable, fixed ports free, exec programs found), print a "
              "summary and exit.")
@verbose_option
def agent_command(conf_path: Path, log_level: str | None, log_format: str | None, check: bool) -> None:
    """Run the collection agent: channels, sources, gRPC and admin endpoints. Stops cleanly on
    SIGTERM/SIGINT (sources stopped, remote transactions rolled back, channels checkpointed)."""
    try:
        config = load_agent_config(conf_path)
        if check:
            problems = preflight_problems(config)
            if problems:
                raise invalid_settings("agent configuration", problems, source=conf_path)
            click.echo(f"configuration OK: channels {', '.join(config.channels)}; "
                       f"sources {', '.join(config.sources) or '(none)'}; sinks {', '.join(config.sinks) or '(none)'}; "
                       "every directory writable, token variable set, TLS file and key readable, port free")
            return
        configure_logging((log_level or config.agent.log_level).upper(), log_format or config.agent.log_format)
        run_agent(config)
    except ConfigError as err:
        if err.key and err.key not in str(err):  # name the setting to fix
            raise ConfigError(f"{err.key}: {err}", key=err.key) from err
        raise
