"""``ingest-toolkit agent`` (run the agent) and ``ingest-toolkit send`` (push lines to one over gRPC).

Exit codes: 0 after a clean stop (SIGTERM/SIGINT) or a complete send; 1 on a configuration error
(nothing was started), a locked channel, an unreachable agent or a rejected batch.
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
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from pathlib import Path
from types import FrameType
from typing import IO, Any

import click

from ..channel import EventColumns
from ..cli_common import verbose_option
from ..errors import ConfigError, IngestError, TransientError
from ..settings import invalid_settings
from .config import AgentConfig, load_agent_config
from .preflight import preflight_problems

__all__ = ["agent_command", "configure_logging", "run_agent", "send_command", "tune_gc_for_service"]

log = logging.getLogger("ingest_toolkit.collect.agent")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class _StructuredFormatter(logging.Formatter):
    """One line per record: JSON, or ``key=value`` pairs; ``extra={...}`` fields become keys."""

    def __init__(self, style: str) -> None:
        super().__init__()
        self._json = style == "json"

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
        return " ".join(f"{k}={_kv(v)}" for k, v in fields.items())


def _kv(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if (not text or any(c in text for c in ' "=\n')) else text


def configure_logging(level: str, style: str) -> None:
    """Structured lines on stderr for the whole process (replaces earlier handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StructuredFormatter(style))
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
@click.option("--check", is_flag=True, help="Validate the configuration and everything the start needs (directories "
              "writable, token variables set, TLS files readable, fixed ports free, exec programs found), print a "
              "summary and exit.")
@verbose_option
def agent_command(conf_path: Path, log_level: str | None, check: bool) -> None:
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
        configure_logging((log_level or config.agent.log_level).upper(), config.agent.log_format)
        run_agent(config)
    except ConfigError as err:
        if err.key and err.key not in str(err):  # name the setting to fix
            raise ConfigError(f"{err.key}: {err}", key=err.key) from err
        raise


# -- send -----------------------------------------------------------------------------------------
@click.command("send")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--agent", "address", default=lambda: os.environ.get("INGEST_AGENT_ADDRESS", "127.0.0.1:7431"),
              show_default="127.0.0.1:7431 or $INGEST_AGENT_ADDRESS", help="host:port of the agent's gRPC endpoint.")
@click.option("--ports-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Read the gRPC port from an agent's ports file instead (host 127.0.0.1).")
@click.option("--channel", help="Target channel; default: the agent's default gRPC pipeline.")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Lines per batch (one durable commit each).")
@click.option("--batch-id", "batch_prefix",
              help="Batch id prefix: batch N is '<prefix>-N'. Re-running the same send with the same prefix "
                   "stores nothing twice. Default: a random prefix (retries within this run are still safe).")
@click.option("--header", "headers", multiple=True, help="key=value header on every event; repeatable.")
@click.option("--token-env", help="Environment variable holding the bearer token.")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="CA certificate (PEM) to verify the agent's TLS certificate; enables TLS.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Client certificate (PEM) for an agent that requires one (mutual TLS); needs --tls-key.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Unencrypted private key (PEM) of --tls-cert.")
@click.option("--retries", default=5, show_default=True, type=click.IntRange(0, 100),
              help="Retries of a batch on a transient error (agent unreachable, channel full).")
@click.option("--window", default=4, show_default=True, type=click.IntRange(1, 64),
              help="Batches in flight on the ordered put stream: the next ones travel while the agent commits "
                   "one. Events are stored in the order of the input either way.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@verbose_option
def send_command(files: tuple[Path, ...], address: str, ports_file: Path | None, channel: str | None,
                 batch_size: int, batch_prefix: str | None, headers: tuple[str, ...], token_env: str | None,
                 tls_ca: Path | None, tls_cert: Path | None, tls_key: Path | None, retries: int, window: int,
                 as_json: bool) -> None:
    """Send the lines of FILES (or of stdin) to an agent, one event per line (newline removed)."""
    token = _token(token_env)
    tls = _Tls(tls_ca, tls_cert, tls_key)
    if batch_prefix is not None and not 0 < len(batch_prefix.encode()) <= 100:
        raise click.UsageError("--batch-id: the prefix must be 1 to 100 bytes (batch ids are at most 128)")
    def resolve() -> str:  # a ports file is re-read before each retry: the agent may restart on a new port
        return f"127.0.0.1:{_grpc_port(ports_file)}" if ports_file is not None else address

    header_map = _headers(headers)
    sender = _Sender(resolve, token=token, tls=tls, channel=channel, retries=retries,
                     prefix=batch_prefix or f"send-{uuid.uuid4().hex}", window=window)
    try:
        sender.send_all(_batches(files, batch_size, header_map))
    except IngestError as err:
        counts = sender.counts
        raise click.ClickException(
            f"{_explain(err, sender.address)} ({counts['batches']} batches, {counts['accepted']} events stored before "
            f"the failure; re-run with --batch-id {sender.prefix} to resume without duplicates)") from err
    finally:
        sender.close()
    counts = sender.counts
    if as_json:
        click.echo(json.dumps(counts, sort_keys=True))
    else:
        click.echo(f"sent {counts['events']} events in {counts['batches']} batches: {counts['accepted']} accepted, "
                   f"{counts['duplicate_batches']} duplicate batches ({counts['duplicate_events']} events "
                   f"already stored)")


def _token(token_env: str | None) -> str | None:
    if token_env is None:
        return None
    token = os.environ.get(token_env, "")
    if not token:
        raise click.UsageError(f"--token-env {token_env}: the variable is unset or empty")
    return token


class _Tls:
    """The TLS files of ``send``, checked once up front: a wrong file is a usage error naming the
    option (not a failed handshake at the first batch)."""

    def __init__(self, ca: Path | None, cert: Path | None, key: Path | None) -> None:
        from ..security import load_client_tls

        try:
            load_client_tls(ca, cert, key, names={"ca": "--tls-ca", "cert": "--tls-cert", "key": "--tls-key"})
        except ConfigError as err:
            raise click.UsageError(str(err)) from None
        self.ca, self.cert, self.key = ca, cert, key


def _grpc_port(ports_file: Path) -> int:
    try:
        port = json.loads(ports_file.read_text())["grpc"]
    except (OSError, ValueError, KeyError) as err:
        raise click.UsageError(f"--ports-file {ports_file}: cannot read the gRPC port ({err})") from None
    if not isinstance(port, int):
        raise click.UsageError(f"--ports-file {ports_file}: the agent has no gRPC endpoint")
    return port


def _headers(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--header {pair!r}: expected key=value")
        out[key] = value
    return out


def _batches(files: tuple[Path, ...], size: int, headers: dict[str, str]) -> Iterator[EventColumns]:
    """Batches of lines as :class:`EventColumns` (no Event per line): every event carries ``headers``."""
    keys, values = list(headers), list(headers.values())
    bodies: list[bytes] = []
    for stream in _streams(files):
        for line in stream:
            bodies.append(line.rstrip(b"\r\n") if line.endswith(b"\n") else line)
            if len(bodies) >= size:
                yield _columns(bodies, keys, values)
                bodies = []
    if bodies:
        yield _columns(bodies, keys, values)


def _columns(bodies: list[bytes], keys: list[str], values: list[str]) -> EventColumns:
    n = len(bodies)
    return EventColumns(bodies, [0] * n, [len(keys)] * n, keys * n, values * n)


def _streams(files: tuple[Path, ...]) -> Iterator[IO[bytes]]:
    if not files:
        yield sys.stdin.buffer
        return
    for path in files:
        with path.open("rb") as f:
            yield f


class _Sender:
    """Puts batches with ids ``<prefix>-<n>``; a transient failure retries the same id (safe)."""

    def __init__(self, resolve: Callable[[], str], *, token: str | None, tls: _Tls,
                 channel: str | None, retries: int, prefix: str, window: int = 4) -> None:
        from ..rpc.client import AgentClient

        self.prefix, self._channel, self._retries, self._window = prefix, channel, retries, window
        self._resolve = resolve
        self._connect: Callable[[str], AgentClient] = lambda address: AgentClient(
            address, token=token, tls_ca=tls.ca, tls_cert=tls.cert, tls_key=tls.key)
        self.address = resolve()
        self._client = self._connect(self.address)
        self.counts = {"batches": 0, "events": 0, "accepted": 0, "duplicate_batches": 0, "duplicate_events": 0}

    def send_all(self, batches: Iterable[EventColumns]) -> None:
        """Put ``batches`` on one ordered stream (``window`` in flight). After a transient failure
        the batches not yet acknowledged are sent again, with their ids, on a new stream."""
        numbered = ((f"{self.prefix}-{n}", batch) for n, batch in enumerate(batches))
        pending: deque[tuple[str, EventColumns]] = deque()  # sent, not acknowledged, oldest first

        def fresh() -> Iterator[tuple[EventColumns, str]]:
            for batch_id, batch in numbered:
                pending.append((batch_id, batch))
                yield batch, batch_id

        attempt = 0
        while True:
            replay = [(batch, batch_id) for batch_id, batch in list(pending)]
            try:
                for ack in self._client.put_stream(chain(replay, fresh()), channel=self._channel,
                                                   window=self._window):
                    self._count(pending.popleft()[1], ack)
                    attempt = 0  # progress: a later failure gets the full number of retries
                return
            except TransientError as err:
                if attempt == self._retries:
                    raise
                delay = min(0.2 * 2 ** attempt, 5.0)
                first = pending[0][0] if pending else f"{self.prefix}-{self.counts['batches']}"
                click.echo(f"batch {first}: {err}; retrying in {delay:.1f}s", err=True)
                time.sleep(delay)
                self._reconnect()
                attempt += 1

    def _count(self, batch: EventColumns, ack: Any) -> None:
        self.counts["batches"] += 1
        self.counts["events"] += len(batch)
        if ack.duplicate:
            self.counts["duplicate_batches"] += 1
            self.counts["duplicate_events"] += ack.accepted
        else:
            self.counts["accepted"] += ack.accepted

    def _reconnect(self) -> None:
        try:
            address = self._resolve()
        except click.UsageError:
            return  # the ports file is being rewritten or gone for now: keep the old address
        if address != self.address:
            self._client.close()
            self.address, self._client = address, self._connect(address)

    def close(self) -> None:
        self._client.close()


def _explain(err: IngestError, address: str) -> str:
    from ..rpc.errors import AgentUnavailableError

    if isinstance(err, AgentUnavailableError):
        return (f"cannot reach the agent at {address}: {err}. Is it running? Check --agent (or --ports-file) "
                "and, for a TLS agent, --tls-ca (and --tls-cert/--tls-key if it requires client certificates)")
    return f"{type(err).__name__}: {err}"
