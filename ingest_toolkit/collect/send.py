"""``ingest-toolkit send``: push lines (files or stdin) to an agent over gRPC, one event per line.

Which agent: :mod:`.locate` (the configuration's agent, found through its ports file, unless
``--agent`` or ``--ports-file`` names another); the command names it on stderr before sending
and refuses an agent whose channels are not the configuration's. While it sends it shows its
progress on stderr (:mod:`.send_progress`). Batch ``n`` has the id ``<prefix>-<n>``: a retry,
within the run or by running the command again with ``--batch-id``, stores nothing twice.

Exit codes: 0 when every batch was acknowledged; 1 when the agent cannot be found or is not the
configuration's (nothing sent), or a batch failed after its retries (the message says how many
were stored and which ``--batch-id`` resumes); 2 for a wrong option.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import IO, Any

import click

from ..channel import EventColumns
from ..cli_common import verbose_option
from ..errors import ConfigError, IngestError, TransientError
from ..numbers import count, number
from .locate import AgentTarget, check_identity, find_agent, grpc_channel_ids, token_from_env
from .send_progress import SendProgress

__all__ = ["send_command"]


@click.command("send")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The agent configuration: send to the agent running it (its ports file says where). Default: "
                   "conf/agent.toml when it exists, else the address 127.0.0.1:7431.")
@click.option("--agent", "address", envvar="INGEST_AGENT_ADDRESS", show_envvar=True,
              help="host:port of an agent's gRPC endpoint, instead of the configuration's agent.")
@click.option("--ports-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Or the ports file of a local agent (host 127.0.0.1), read again before each retry.")
@click.option("--channel", help="Target channel; default: the agent's default gRPC pipeline.")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Lines per batch (one durable commit each).")
@click.option("--batch-id", "batch_prefix",
              help="Batch id prefix: batch N is '<prefix>-N'. Re-running the same send with the same prefix "
                   "stores nothing twice. Default: a random prefix (retries within this run are still safe).")
@click.option("--header", "headers", multiple=True, help="key=value header on every event; repeatable.")
@click.option("--token-env", help="Environment variable holding the bearer token (default: the token_env of "
                                  "the configuration's [agent.security]).")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="CA certificate (PEM) to verify the agent's TLS certificate; enables TLS (default: the "
                   "configuration's own agent certificate, when it has one).")
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
def send_command(files: tuple[Path, ...], conf_path: Path | None, address: str | None, ports_file: Path | None,
                 channel: str | None, batch_size: int, batch_prefix: str | None, headers: tuple[str, ...],
                 token_env: str | None, tls_ca: Path | None, tls_cert: Path | None, tls_key: Path | None,
                 retries: int, window: int, as_json: bool) -> None:
    """Send the lines of FILES (or of stdin) to an agent, one event per line (newline removed).

    The agent is the one running the configuration (--conf, default conf/agent.toml) unless
    --agent or --ports-file names another; the command says which on stderr, and refuses an agent
    whose channels are not the configuration's (docs/agent.md, "Which agent a command uses")."""
    if batch_prefix is not None and not 0 < len(batch_prefix.encode()) <= 100:
        raise click.UsageError("--batch-id: the prefix must be 1 to 100 bytes (batch ids are at most 128)")
    if address and ports_file:
        raise click.UsageError("give --agent (or INGEST_AGENT_ADDRESS) or --ports-file, not both")
    source = click.get_current_context().get_parameter_source("address")
    flag = "INGEST_AGENT_ADDRESS" if source is click.core.ParameterSource.ENVIRONMENT else "--agent"
    target = find_agent(conf_path, grpc=address, ports_file=ports_file, grpc_flag=flag)

    def resolve() -> str:  # looked up again before each retry: the agent may restart on a new port
        return _grpc_address(find_agent(conf_path, grpc=address, ports_file=ports_file, grpc_flag=flag))

    sender = _Sender(resolve, token=_token(token_env, target), tls=_tls(target, tls_ca, tls_cert, tls_key),
                     channel=channel, retries=retries, prefix=batch_prefix or f"send-{uuid.uuid4().hex}",
                     window=window)
    try:
        counts = _send(sender, target, channel, _batches(files, batch_size, _headers(headers)), _total_bytes(files))
    finally:
        sender.close()
    if as_json:
        click.echo(json.dumps(counts, sort_keys=True))
    else:
        click.echo(f"sent {count(counts['events'], 'event')} in {count(counts['batches'], 'batch')}: "
                   f"{number(counts['accepted'])} accepted, {count(counts['duplicate_batches'], 'duplicate batch')} "
                   f"({count(counts['duplicate_events'], 'event')} already stored)")


def _send(sender: _Sender, target: AgentTarget, channel: str | None, batches: Iterable[EventColumns],
          total_bytes: int | None) -> dict[str, int]:
    """Name the agent, check that it is the configuration's, send; the counts."""
    click.echo(f"sending to {target.describe()}", err=True)
    try:
        check_identity(target, grpc_channel_ids(sender.client), [channel] if channel else None)
    except TransientError as err:
        raise click.ClickException(f"{_explain(err, sender.address)}; nothing was sent") from err
    with SendProgress(total_bytes) as progress:
        sender.progress = progress
        try:
            sender.send_all(batches)
        except IngestError as err:
            counts = sender.counts
            raise click.ClickException(
                f"{_explain(err, sender.address)} ({count(counts['batches'], 'batch')}, "
                f"{count(counts['accepted'], 'event')} stored "
                f"before the failure; re-run with --batch-id {sender.prefix} to resume without duplicates)") from err
    return sender.counts


def _grpc_address(target: AgentTarget) -> str:
    if target.grpc is None:
        raise ConfigError(f"{target.describe('admin')} has no gRPC endpoint: enable its [agent.grpc], or give --agent",
                          key="agent.grpc")
    return target.grpc


def _token(token_env: str | None, target: AgentTarget) -> str | None:
    """The token of ``--token-env``, else of the configuration's token variable."""
    if token_env is None:
        return token_from_env(target.token_env, "[agent.security] token_env") if target.token_env else None
    token = os.environ.get(token_env, "")
    if not token:
        raise click.UsageError(f"--token-env {token_env}: the variable is unset or empty")
    return token


class _Tls:
    """The TLS files of ``send``, checked once up front: a wrong file is a usage error naming the
    option (not a failed handshake at the first batch)."""

    def __init__(self, ca: Path | None, cert: Path | None, key: Path | None, ca_name: str = "--tls-ca") -> None:
        from ..security import load_client_tls

        try:
            load_client_tls(ca, cert, key, names={"ca": ca_name, "cert": "--tls-cert", "key": "--tls-key"})
        except ConfigError as err:
            raise click.UsageError(str(err)) from None
        self.ca, self.cert, self.key = ca, cert, key


def _tls(target: AgentTarget, ca: Path | None, cert: Path | None, key: Path | None) -> _Tls:
    """The options' TLS files; without ``--tls-ca``, the configuration's own agent certificate."""
    if ca is None and target.tls_ca is not None:
        return _Tls(Path(target.tls_ca), cert, key, ca_name="[agent.security] tls.cert_file")
    return _Tls(ca, cert, key)


def _headers(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--header {pair!r}: expected key=value")
        out[key] = value
    return out


def _total_bytes(files: tuple[Path, ...]) -> int | None:
    """Bytes of the input when it is files (a progress bar); None for stdin."""
    return sum(path.stat().st_size for path in files) if files else None


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
        self.client = self._connect(self.address)
        self.counts = {"batches": 0, "events": 0, "accepted": 0, "duplicate_batches": 0, "duplicate_events": 0}
        self.progress: SendProgress | None = None

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
                for ack in self.client.put_stream(chain(replay, fresh()), channel=self._channel,
                                                  window=self._window):
                    self._count(pending.popleft()[1], ack)
                    attempt = 0  # progress: a later failure gets the full number of retries
                return
            except TransientError as err:
                if attempt == self._retries:
                    raise
                delay = min(0.2 * 2 ** attempt, 5.0)
                first = pending[0][0] if pending else f"{self.prefix}-{self.counts['batches']}"
                self._note(f"batch {first}: {err}; retrying in {delay:.1f}s")
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
        if self.progress is not None:
            self.progress.acknowledged(len(batch), sum(map(len, batch.bodies)) + len(batch))

    def _note(self, line: str) -> None:
        if self.progress is not None:
            self.progress.note(line)
        else:
            click.echo(line, err=True)

    def _reconnect(self) -> None:
        try:
            address = self._resolve()
        except ConfigError:
            return  # the ports file is being rewritten or gone for now: keep the old address
        if address != self.address:
            self.client.close()
            self.address, self.client = address, self._connect(address)

    def close(self) -> None:
        self.client.close()


def _explain(err: IngestError, address: str) -> str:
    from ..rpc.errors import AgentUnavailableError

    if isinstance(err, AgentUnavailableError):
        return (f"cannot reach the agent at {address}: {err}. Is it running? Check --agent (or --ports-file) "
                "and, for a TLS agent, --tls-ca (and --tls-cert/--tls-key if it requires client certificates)")
    return f"{type(err).__name__}: {err}"
