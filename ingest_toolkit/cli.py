"""``ingest-toolkit`` command line."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from . import cli_env  # noqa: F401  (first: gRPC's log lines off before anything imports grpc)
from .acknowledge import acknowledge
from .channel import tools
from .channel.crypto import KeyChain, load_keyring
from .channel.incidents import load_incidents
from .channel.tools import render
from .channel.tools.common import PhaseProgress
from .channel_conf import DEFAULT_AGENT_CONF, find_channel
from .cli_common import OneLineErrors, output_console, verbose_option
from .errors import ConfigError
from .extras import extra_for
from .inspect_live import live_view
from .numbers import count

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])


# The commands in the order of the work (set up, collect, look, land, operate, learn), each with the
# one line `--help` shows in full; a command missing here is listed after these, alphabetically.
_COMMANDS: tuple[tuple[str, str], ...] = (
    ("init", "Write a starting point here: conf/, a Dagster project, var/."),
    ("agent", "Run the collection agent (channels, sources, gRPC)."),
    ("send", "Send lines of files or stdin to the agent, one event each."),
    ("status", "Show the agent live: backlog, rates, disk, sinks, sources."),
    ("land", "Land committed events into a table ([spark] extra)."),
    ("channel", "Inspect, verify, repair a channel; list its incidents."),
    ("demo", "Put, replay and take events through a throwaway channel."),
    ("docs", "Print where the installed documentation is."),
    ("hdfs", "Run a local single-node HDFS to land into."),
)
_CHANNEL_COMMANDS: tuple[tuple[str, str], ...] = (
    ("inspect", "Show the channel's state; safe while it runs."),
    ("verify", "Check a stopped channel; exit code 1 on a problem."),
    ("repair", "Quarantine damaged records of a stopped channel."),
    ("incidents", "List what recovery and repairs cut from the log."),
    ("acknowledge", "Mark incidents as handled (with a note)."),
)


class _WorkflowGroup(OneLineErrors):
    """A group whose ``--help`` lists its commands in the order of :attr:`summaries`, each with
    its whole one-line summary (click would cut the docstring's first sentence to fit)."""

    summaries: tuple[tuple[str, str], ...] = ()

    def list_commands(self, ctx: click.Context) -> list[str]:
        ordered = [name for name, _summary in self.summaries if name in self.commands]
        return ordered + sorted(set(self.commands) - set(ordered))

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(cmd, name)
        summary = dict(self.summaries).get(name or cmd.name or "")
        if summary is not None:
            cmd.short_help = summary


class _Main(_WorkflowGroup):
    summaries = _COMMANDS


class _Channel(_WorkflowGroup):
    summaries = _CHANNEL_COMMANDS


_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 120}


@click.group(cls=_Main, context_settings=_CONTEXT)
@click.version_option(None, "-V", "--version", package_name="ingest-toolkit")
def main() -> None:
    """Durable batch ingestion: file channel, collectors, Spark landing.

    The usual order: init, agent, send, status, land; `ingest-toolkit docs` says where the
    documentation is."""


# -- operator tools -------------------------------------------------------------------------


@main.group("channel", cls=_Channel)
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
    click.echo(f"acknowledged {count(len(done.incidents), 'incident')} through {done.via}: "
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
from .channel_demo import demo_command  # noqa: E402
from .collect.cli import agent_command  # noqa: E402
from .collect.send import send_command  # noqa: E402
from .hdfs.cli import hdfs_command  # noqa: E402
from .manual import docs_command  # noqa: E402
from .scaffold import init_command  # noqa: E402
from .status import status_command  # noqa: E402

main.add_command(init_command)
main.add_command(agent_command)
main.add_command(send_command)
main.add_command(status_command)
main.add_command(_ExtraCommand("land", "ingest_toolkit.land.cli:land_command",
                               "Land committed events as Parquet (the [spark] extra)."))
main.add_command(demo_command)
main.add_command(docs_command)
main.add_command(hdfs_command)


if __name__ == "__main__":
    main()
