"""``ingest-toolkit`` command line."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from .channel import Event, FileChannel
from .channel.config import ChannelConfig
from .errors import IngestError
from .settings import load_channel_settings

__all__ = ["main"]

console = Console()


class _Group(click.Group):
    """Shows toolkit errors as one clear line (exit code 1) instead of a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except IngestError as err:
            raise click.ClickException(f"{type(err).__name__}: {err}") from err


@click.group(cls=_Group)
@click.version_option(package_name="ingest-toolkit")
def main() -> None:
    """Durable batch ingestion: file channel, collectors, Spark landing."""


@main.command()
@click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("conf/channel.toml"), show_default=True, help="Channel settings (TOML).")
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
            shutil.rmtree(directory, ignore_errors=True)
    table = Table(title=f"file channel demo ({events} events of {event_size} B, batches of {batch})")
    for column in ("step", "events", "seconds", "events/s", "detail"):
        table.add_column(column, justify="right" if column != "step" else "left")

    started = time.perf_counter()
    channel = FileChannel(**settings)
    first_seq = _put_all(channel, events, batch, event_size)
    stats = channel.stats()
    _row(table, "put (fsync per commit)", events, started, f"{stats['fsyncs']} fsyncs")
    channel.close()

    started = time.perf_counter()
    channel = FileChannel(**settings)
    replayed = channel.replay_stats
    _row(table, "reopen (full replay)", len(channel), started,
         f"{replayed.segments} segments, {replayed.frames} frames")

    started = time.perf_counter()
    taken = _take_all(channel, batch, first_seq)
    _row(table, "take (in order, verified)", taken, started, f"{len(channel)} left")
    channel.close()
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


if __name__ == "__main__":
    main()
