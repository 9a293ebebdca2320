"""``ingest-toolkit`` command line."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import cli_env  # noqa: F401  (first: gRPC's log lines off before anything imports grpc)
from .acknowledge import acknowledge
from .channel import Event, FileChannel, tools
from .channel.checkpoint import read_checkpoint_meta
from .channel.config import ChannelConfig, load_channel_settings
from .channel.crypto import KeyChain, load_keyring
from .channel.incidents import load_incidents
from .channel.lock import lock_holder
from .channel.tools import render
from .channel.tools.common import PhaseProgress
from .channel_conf import DEFAULT_AGENT_CONF, find_channel
from .cli_common import OneLineErrors, output_console, verbose_option
from .errors import ConfigError
from .extras import extra_for
from .inspect_live import live_view

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])


@click.group(cls=OneLineErrors)
@click.version_option(package_name="ingest-toolkit")
def main() -> None:
    """Durable batch ingestion: file channel, collectors, Spark landing."""


@main.command()
@click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("conf/channel.toml"), show_default=True, help="Channel settings (TOML).")
@verbose_option
@click.option("--events", default=200_000, show_default=True, help="Events to put and take.")
@click.option("--batch", default=1000, show_default=True, help="Events per transaction.")
@click.option("--event-size", default=256, show_default=True, help="Body size in bytes.")
@click.option("--fresh/--keep", default=True, show_default=True,
              help="Start from empty channel directories.")
def demo(conf_path: Path, events: int, batch: int, event_size: int, fresh: bool) -> None:
    """Put events through a durable channel, reopen it (replay), take them back in order."""
    settings = load_channel_settings(conf_path)
    config = ChannelConfig.build(**settings)
    if fresh:
        for directory in (config.checkpoint_dir, *config.data_dirs):
            if (holder := lock_holder(directory)) is not None:  # never delete a live process's channel
                raise ConfigError(f"{directory} is in use by process {holder}: the demo deletes the channel of "
                                  f"{conf_path} first (--fresh); stop that process, or give the demo a channel of "
                                  "its own with --conf", key="checkpoint_dir")
        for directory in (config.checkpoint_dir, *config.data_dirs):
            shutil.rmtree(directory, ignore_errors=True)
    table = Table(title=f"file channel demo ({events} events of {event_size} B, batches of {batch})")
    for column in ("step", "events", "seconds", "events/s", "detail"):
        table.add_column(column, justify="right" if column != "step" else "left", no_wrap=column == "step")

    started = time.perf_counter()
    channel = FileChannel(**settings)
    first_seq = _put_all(channel, events, batch, event_size)
    stats = channel.stats()
    _row(table, "put (fsync per commit)", events, started, f"{stats['fsyncs']} fsyncs")
    channel.close()

    start = read_checkpoint_meta(config.checkpoint_dir)  # what the reopen can recover from
    started = time.perf_counter()
    channel = FileChannel(**settings)
    replayed = channel.replay_stats
    how = ("full replay" if start is None or channel.checkpoint_problem is not None else
           f"checkpoint #{start.checkpoint_id}" + (" + replay" if replayed.frames else ", nothing to replay"))
    _row(table, f"reopen ({how})", len(channel), started,
         f"{replayed.segments} segments, {replayed.frames:,} frames replayed")

    started = time.perf_counter()
    taken = _take_all(channel, batch, first_seq)
    _row(table, "take (in order, verified)", taken, started, f"{len(channel)} left")
    channel.close()
    console = output_console()
    console.print(table)
    console.print(f"channel directories: {config.checkpoint_dir}, {', '.join(config.data_dirs)}")


def _put_all(channel: FileChannel, events: int, batch: int, event_size: int) -> int:
    body = os.urandom(event_size)
    first_seq = 0
    for start in range(0, events, batch):
        with channel.transaction() as tx:
            seqs = tx.put_many([Event(body, {}) for _ in range(min(batch, events - start))])
            first_seq = first_seq or seqs[0]
    return first_seq


def _take_all(channel: FileChannel, batch: int, expected_seq: int) -> int:
    taken = 0
    while True:
        with channel.transaction() as tx:
            got = tx.take(batch)
        if not got:
            return taken
        if any(e.seq != expected_seq + i for i, e in enumerate(got, taken)):
            raise click.ClickException("events came back out of order")
        taken += len(got)


def _row(table: Table, step: str, n: int, started: float, detail: str) -> None:
    seconds = time.perf_counter() - started
    table.add_row(step, f"{n:,}", f"{seconds:.2f}", f"{n / seconds:,.0f}" if seconds else "-", detail)


# -- operator tools -------------------------------------------------------------------------


@main.group("channel")
def channel_group() -> None:
    """Operator tools: inspect a live channel; verify or repair a stopped one."""


def _channel_options(command: F) -> F:
    options = [
        click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="Where the channel is described: an agent configuration (its [channels.<name>] tables; "
                          "default conf/agent.toml) or a channel settings file ([channel]); INGEST_* overrides "
                          "apply as for the agent."),
        click.option("--channel", "channel_name", help="The channel's name in the agent configuration (needed when "
                                                       "it has more than one)."),
        click.option("--checkpoint-dir", type=click.Path(file_okay=False), help="Or the channel's checkpoint_dir..."),
        click.option("--data-dir", "data_dirs", multiple=True, type=click.Path(file_okay=False),
                     help="...and each of its data directories (repeat the option)."),
        click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON document."),
        verbose_option,
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _key_options(command: F) -> F:
    options = [
        click.option("--key-file", type=click.Path(dir_okay=False), help="Encryption keys of an encrypted channel: "
                     "a key file of '<key id>:<key>' entries, mode 0600 (default: the channel's "
                     "encryption_key_file from --conf)."),
        click.option("--key-env", help="...or the environment variable holding them (default: the channel's "
                                       "encryption_key_env from --conf)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _keys(key_file: str | None, key_env: str | None, conf_path: Path | None, channel: str | None,
          from_conf: bool) -> KeyChain:
    """The keys the tools read encrypted segments with: the options, else the channel's settings
    when the channel was named by ``--conf``."""
    if key_file is None and key_env is None and from_conf:
        settings = find_channel(conf_path or DEFAULT_AGENT_CONF, channel).settings
        key_file, key_env = settings.get("encryption_key_file"), settings.get("encryption_key_env")
    return KeyChain(load_keyring(key_file=key_file, key_env=key_env, active=None))


def _directories(checkpoint_dir: str | None, data_dirs: tuple[str, ...], conf_path: Path | None,
                 channel: str | None) -> tuple[str, list[str]]:
    """The channel's directories from ``--checkpoint-dir``/``--data-dir``, or by name from
    ``--conf`` (default ``conf/agent.toml``); errors name what the user gave."""
    if checkpoint_dir or data_dirs:
        if conf_path or channel:
            raise click.UsageError("give the channel either as --conf/--channel or as --checkpoint-dir/--data-dir")
        if not checkpoint_dir or not data_dirs:
            raise click.UsageError("give both --checkpoint-dir and --data-dir (once per data directory)")
        return checkpoint_dir, list(data_dirs)
    conf = conf_path or DEFAULT_AGENT_CONF
    if conf_path is None and not conf.exists():
        raise click.UsageError(f"no channel given and the default --conf {conf} does not exist: give --conf (an "
                               "agent configuration or a channel settings file) or --checkpoint-dir/--data-dir")
    named = find_channel(conf, channel)
    missing = next((d for d in named.directories if not os.path.isdir(d)), None)
    if missing is not None:
        raise ConfigError(f"{named.origin}: directory {missing} does not exist, so the channel was never created "
                          "(it is when the agent first opens it)", key="checkpoint_dir")
    return named.directories[0], named.directories[1:]


def _print_json(document: dict[str, Any]) -> None:
    click.echo(json.dumps(document, indent=2))


@contextmanager
def _progress(enabled: bool) -> Iterator[PhaseProgress | None]:
    """A progress bar per phase on stderr, for a terminal only."""
    err = Console(stderr=True)
    if not enabled or not err.is_terminal:
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("segments"),
               TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        yield update


@channel_group.command("inspect")
@_channel_options
def channel_inspect(conf_path: Path | None, channel_name: str | None, checkpoint_dir: str | None,
                    data_dirs: tuple[str, ...], as_json: bool) -> None:
    """Show the channel's state from checkpoint.meta and its log files. Takes no lock: safe while
    the channel is in use (it then says how old that checkpoint is; `status` shows it live)."""
    report = tools.inspect_channel(*_directories(checkpoint_dir, data_dirs, conf_path, channel_name))
    live = live_view(report, None if checkpoint_dir else conf_path or DEFAULT_AGENT_CONF)
    if as_json:
        _print_json({**report.to_json(), "live": live.to_json() if live else None})
    else:
        render.print_inspect(output_console(), report, live=live.note if live else None)


@channel_group.command("verify")
@_channel_options
@_key_options
def channel_verify(conf_path: Path | None, channel_name: str | None, checkpoint_dir: str | None,
                   data_dirs: tuple[str, ...], as_json: bool, key_file: str | None, key_env: str | None) -> None:
    """Check a stopped channel: reference counts, log files, checkpoint against a full replay,
    damaged records. Exit code 0 when healthy, 1 when anything was found."""
    directories = _directories(checkpoint_dir, data_dirs, conf_path, channel_name)
    keys = _keys(key_file, key_env, conf_path, channel_name, from_conf=not checkpoint_dir)
    with _progress(not as_json) as progress:
        report = tools.verify_channel(*directories, progress=progress, keys=keys)
    if as_json:
        _print_json(report.to_json())
    else:
        render.print_verify(output_console(), report)
    if not report.ok:
        raise SystemExit(1)


@channel_group.command("repair")
@_channel_options
@click.option("--dry-run", is_flag=True, help="Report what would be repaired; change nothing.")
@click.option("--yes", is_flag=True, help="Apply the repair (required unless --dry-run).")
@_key_options
def channel_repair(conf_path: Path | None, channel_name: str | None, checkpoint_dir: str | None,
                   data_dirs: tuple[str, ...], as_json: bool, dry_run: bool, yes: bool, key_file: str | None,
                   key_env: str | None) -> None:
    """Quarantine damaged log records of a stopped channel behind NOOP frames (backups kept),
    drop the transactions that lost frames, and force a full replay on the next open."""
    if not dry_run and not yes:
        raise click.ClickException("repair rewrites log files: run it with --dry-run first to see what it "
                                   "would change, then with --yes to apply it")
    directories = _directories(checkpoint_dir, data_dirs, conf_path, channel_name)
    keys = _keys(key_file, key_env, conf_path, channel_name, from_conf=not checkpoint_dir)
    with _progress(not as_json) as progress:
        report = tools.repair_channel(*directories, dry_run=dry_run, progress=progress, keys=keys)
    if as_json:
        _print_json(report.to_json())
    else:
        render.print_repair(output_console(), report)


@channel_group.command("incidents")
@_channel_options
def channel_incidents(conf_path: Path | None, channel_name: str | None, checkpoint_dir: str | None,
                      data_dirs: tuple[str, ...], as_json: bool) -> None:
    """List what recovery and repairs cut from the channel's log, open incidents first (read
    from incidents.json without a lock: safe while the channel runs)."""
    directory = _directories(checkpoint_dir, data_dirs, conf_path, channel_name)[0]
    incidents = sorted(load_incidents(directory), key=lambda i: (not i.open, i.id))
    if as_json:
        _print_json({"checkpoint_dir": directory, "open": sum(i.open for i in incidents),
                     "incidents": [i.to_json() for i in incidents]})
    else:
        render.print_incidents(output_console(), directory, incidents)


@channel_group.command("acknowledge")
@_channel_options
@click.option("--incident", "ids", type=int, multiple=True, help="An incident to acknowledge (repeat the option; "
                                                                  "'channel incidents' lists them).")
@click.option("--all", "all_open", is_flag=True, help="Acknowledge every open incident.")
@click.option("--note", required=True, help="What was done about it (kept with the incident).")
def channel_acknowledge(conf_path: Path | None, channel_name: str | None, checkpoint_dir: str | None,
                        data_dirs: tuple[str, ...], as_json: bool, ids: tuple[int, ...], all_open: bool,
                        note: str) -> None:
    """Mark incidents as handled: the channel's status stops counting them and its
    recovery_losses_acknowledged check passes again. Goes through the agent when one runs the
    channel (found by --conf), else writes the channel's directory itself."""
    if bool(ids) == all_open:
        raise click.UsageError("give --incident ID (repeatable) or --all")
    directory = _directories(checkpoint_dir, data_dirs, conf_path, channel_name)[0]
    named = None if checkpoint_dir else find_channel(conf_path or DEFAULT_AGENT_CONF, channel_name)
    done = acknowledge(directory, named, None if all_open else list(ids), note)
    if as_json:
        _print_json({"acknowledged": done.incidents, "via": done.via})
        return
    click.echo(f"acknowledged {len(done.incidents)} incident(s) through {done.via}: "
               f"{', '.join(str(i['id']) for i in done.incidents) or 'none was open'}")


class _ExtraCommand(click.Command):
    """A command whose module needs an extra (``land``: Spark and Arrow), imported only when the
    command runs, so that ``--help`` and every core command work with the core install alone;
    without the extra the command stops with one line naming it (:mod:`ingest_toolkit.extras`)."""

    def __init__(self, name: str, target: str, short_help: str) -> None:
        super().__init__(name, short_help=short_help, help=short_help)
        self.target = target

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        module, _, attr = self.target.partition(":")
        try:
            command: click.Command = getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as err:
            if (missing := extra_for(err, self.name or "this command")) is None:
                raise
            raise missing from err
        return command.make_context(info_name, args, parent=parent, **extra)


# Subsystem commands live beside their code; imported last so their modules may import this one.
from .collect.cli import agent_command  # noqa: E402
from .collect.send import send_command  # noqa: E402
from .hdfs.cli import hdfs_command  # noqa: E402
from .scaffold import init_command  # noqa: E402
from .status import status_command  # noqa: E402

main.add_command(init_command)
main.add_command(agent_command)
main.add_command(send_command)
main.add_command(status_command)
main.add_command(_ExtraCommand("land", "ingest_toolkit.land.cli:land_command",
                               "Land committed events as Parquet (the [spark] extra)."))
main.add_command(hdfs_command)


if __name__ == "__main__":
    main()
