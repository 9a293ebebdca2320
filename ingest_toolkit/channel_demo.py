"""``ingest-toolkit demo``: the file channel alone, on any machine, in seconds.

It puts events through a durable channel, reopens it (replay) and takes them back in order,
timing each step. The channel is ``conf/channel.toml``'s when that file exists (the repository),
else one of its own in a temporary directory, deleted afterwards, so it runs in a directory
``init`` made or anywhere else (the core install lists it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from .channel import Event, FileChannel
from .channel.checkpoint import read_checkpoint_meta
from .channel.config import ChannelConfig, load_channel_settings
from .channel.lock import lock_holder
from .cli_common import output_console, verbose_option
from .errors import ConfigError
from .numbers import count, number

__all__ = ["demo_command"]

_DEMO_CONF = Path("conf/channel.toml")


@click.command("demo")
@click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path),
              help=f"Channel settings (TOML). Default: {_DEMO_CONF} when it exists, else a channel of the demo's "
                   "own in a temporary directory, deleted afterwards (so it runs anywhere, e.g. after init).")
@verbose_option
@click.option("--events", default=200_000, show_default=True, help="Events to put and take.")
@click.option("--batch", default=1000, show_default=True, help="Events per transaction.")
@click.option("--event-size", default=256, show_default=True, help="Body size in bytes.")
@click.option("--fresh/--keep", default=True, show_default=True,
              help="Start from empty channel directories.")
def demo_command(conf_path: Path | None, events: int, batch: int, event_size: int, fresh: bool) -> None:
    """Put events through a durable channel, reopen it (replay), take them back in order."""
    if conf_path is None and not _DEMO_CONF.exists():
        with tempfile.TemporaryDirectory(prefix="ingest-demo-") as scratch:
            _demo({"checkpoint_dir": f"{scratch}/checkpoint", "data_dirs": [f"{scratch}/data"]},
                  events, batch, event_size, fresh=False, conf_path=None)
        return
    conf_path = conf_path or _DEMO_CONF
    _demo(load_channel_settings(conf_path), events, batch, event_size, fresh=fresh, conf_path=conf_path)


def _demo(settings: dict[str, Any], events: int, batch: int, event_size: int, *, fresh: bool,
          conf_path: Path | None) -> None:
    config = ChannelConfig.build(**settings)
    if fresh:
        for directory in (config.checkpoint_dir, *config.data_dirs):
            if (holder := lock_holder(directory)) is not None:  # never delete a live process's channel
                raise ConfigError(f"{directory} is in use by process {holder}: the demo deletes the channel of "
                                  f"{conf_path} first (--fresh); stop that process, or give the demo a channel of "
                                  "its own with --conf", key="checkpoint_dir")
        for directory in (config.checkpoint_dir, *config.data_dirs):
            shutil.rmtree(directory, ignore_errors=True)
    table = Table(title=f"file channel demo ({count(events, 'event')} of {event_size} B, batches of {number(batch)})")
    for column in ("step", "events", "seconds", "events/s", "detail"):
        table.add_column(column, justify="right" if column != "step" else "left", no_wrap=column == "step")

    started = time.perf_counter()
    channel = FileChannel(**settings)
    first_seq = _put_all(channel, events, batch, event_size)
    stats = channel.stats()
    _row(table, "put (fsync per commit)", events, started, count(stats["fsyncs"], "fsync"))
    channel.close()

    start = read_checkpoint_meta(config.checkpoint_dir)  # what the reopen can recover from
    started = time.perf_counter()
    channel = FileChannel(**settings)
    replayed = channel.replay_stats
    how = ("full replay" if start is None or channel.checkpoint_problem is not None else
           f"checkpoint #{start.checkpoint_id}" + (" + replay" if replayed.frames else ", nothing to replay"))
    _row(table, f"reopen ({how})", len(channel), started,
         f"{count(replayed.segments, 'segment')}, {count(replayed.frames, 'frame')} replayed")

    started = time.perf_counter()
    taken = _take_all(channel, batch, first_seq)
    _row(table, "take (in order, verified)", taken, started, f"{number(len(channel))} left")
    channel.close()
    console = output_console()
    console.print(table)
    kept = "" if conf_path else " (a temporary channel: deleted now)"
    console.print(f"channel directories: {config.checkpoint_dir}, {', '.join(config.data_dirs)}{kept}")


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
