"""What a landing shows while it runs: the backlog it found, the Spark start as a step of its own,
and each batch as it passes its phases and completes.

:class:`LandingProgress` is what the run reports to (:func:`~ingest_toolkit.land.run.land_channel`,
:func:`~ingest_toolkit.land.drain.land_until_empty`, :func:`~ingest_toolkit.land.landing.land_once`);
calls may come from the drain's two batch threads at once. Two implementations for ``land``:

* :class:`TerminalProgress` (stderr is a terminal): the Spark start as a step of its own
  (``starting Spark ...``, then ``Spark started in 9.4 s``), then a live footer on stderr (rich):
  the events landed of the backlog found with a bar, the rate, the batches done, the time, and
  below it what each batch in flight is doing (taking events, building the Arrow table, writing
  Parquet with Spark, committing) - with one line per completed batch above it;
* :class:`LineProgress` (otherwise): plain lines, flushed as they happen: ``Spark started in
  9.4 s``, then one line per batch when it completes (on stdout, the lines the command prints
  anyway, no longer held back to the end).
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ..numbers import count

if TYPE_CHECKING:
    from .landing import LandingResult

__all__ = ["LandingProgress", "LineProgress", "QUIET", "TerminalProgress", "batch_line"]


class LandingProgress(Protocol):
    """Events of one landing run, in the order they happen (batches may overlap)."""

    def backlog(self, events: int) -> None:
        """The committed backlog found before the first batch."""

    def spark_starting(self) -> None: ...

    def spark_started(self, seconds: float) -> None: ...

    def batch_phase(self, batch: int, phase: str, taken: int) -> None:
        """Batch number ``batch`` (from 1) entered ``phase``; ``taken``: its events (0 before the take)."""

    def batch_done(self, batch: int, result: LandingResult) -> None: ...


class _Quiet:
    """Reports nothing (the Dagster asset, the library)."""

    def backlog(self, events: int) -> None:
        pass

    def spark_starting(self) -> None:
        pass

    def spark_started(self, seconds: float) -> None:
        pass

    def batch_phase(self, batch: int, phase: str, taken: int) -> None:
        pass

    def batch_done(self, batch: int, result: LandingResult) -> None:
        pass


QUIET: LandingProgress = _Quiet()


def batch_line(result: LandingResult) -> str:
    """The line ``land`` prints for a completed batch."""
    r = result
    rate = f"{r.events / r.duration_s:,.0f} events/s" if r.duration_s and r.events else "-"
    where = "" if r.format == "parquet" or r.table_version is None else f" into {r.format} version {r.table_version}"
    return (f"landed {count(r.events, 'event')} ({r.redelivered:,} redelivered, already landed) from {r.channel!r}"
            f"{where}: {count(r.files, 'file')}, {count(r.bytes, 'byte')}, batch {r.batch_id or '-'}, "
            f"{r.duration_s:.2f} s "
            f"({rate}); backlog {r.backlog_after:,}")


class LineProgress(_Quiet):
    """Lines as things happen, for a pipe or a log: the Spark start on stderr, each completed batch
    on stdout (``print_batches=False``: not at all, for ``--json``)."""

    def __init__(self, *, print_batches: bool = True) -> None:
        self._print_batches = print_batches

    def spark_started(self, seconds: float) -> None:
        click.echo(f"Spark started in {seconds:.1f} s", err=True)

    def batch_done(self, batch: int, result: LandingResult) -> None:
        if self._print_batches:
            click.echo(batch_line(result))
            sys.stdout.flush()


class TerminalProgress:
    """A live footer on stderr with the finished steps and the completed batches above it
    (module docstring). Use as a context manager around the run.

    The footer is drawn only once Spark runs: while it starts, its JVM writes to the terminal
    itself (its log4j console, passed through by :mod:`.jvm_stderr`), past rich, and would tear a
    live line apart.
    So the Spark start is a line of its own (``starting Spark (local[*]) ...``), then ``Spark
    started in 9.4 s``, and the footer follows."""

    def __init__(self, *, print_batches: bool = True) -> None:
        self._print_batches = print_batches
        self._lock = threading.Lock()
        self._spinner = Spinner("dots")
        self._total: int | None = None
        self._landed = self._done = 0
        self._phases: dict[int, str] = {}
        self._busy: tuple[str, ...] = ()  # the phases, as the footer reads them (from rich's thread, unlocked)
        self._started: float | None = None  # the first batch's start: the rate leaves Spark's start out
        self._console = Console(stderr=True)
        self._live = Live(console=self._console, transient=True, redirect_stdout=False, redirect_stderr=False,
                          get_renderable=self._footer, refresh_per_second=4)  # draws the footer once here

    def __enter__(self) -> TerminalProgress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._live.stop()

    def backlog(self, events: int) -> None:
        with self._lock:
            self._total = events
            self._above(f"backlog: {events:,} committed events to land")

    def spark_starting(self) -> None:
        with self._lock:
            self._live.stop()
            self._console.print("starting Spark ...", highlight=False)

    def spark_started(self, seconds: float) -> None:
        with self._lock:
            self._console.print(f"Spark started in {seconds:.1f} s", highlight=False)

    def batch_phase(self, batch: int, phase: str, taken: int) -> None:
        with self._lock:
            self._started = self._started or time.monotonic()
            self._phases[batch] = f"batch {batch}: {phase}" + (f" ({taken:,} events)" if taken else "")
            self._busy = tuple(self._phases[b] for b in sorted(self._phases))
            self._live.start()  # no-op when it runs
            self._live.refresh()

    def batch_done(self, batch: int, result: LandingResult) -> None:
        with self._lock:
            self._phases.pop(batch, None)
            self._busy = tuple(self._phases[b] for b in sorted(self._phases))
            self._landed += result.taken
            self._done += 1
            self._live.refresh()  # the footer rich redraws under the line below is the one of its last refresh
            if self._print_batches:
                self._print(batch, result)

    def _above(self, line: str) -> None:
        """A line above the footer (or a plain line while there is none)."""
        self._console.print(line, markup=False, highlight=False)

    def _print(self, batch: int, result: LandingResult) -> None:
        """A batch's line on stdout: above the footer when stdout is this terminal too, else where
        stdout goes (a file, a pipe), which must get it."""
        if sys.stdout.isatty():
            self._above(f"batch {batch}: {batch_line(result)}")
        else:
            click.echo(batch_line(result))
            sys.stdout.flush()

    def _footer(self) -> RenderableType:
        """Events landed of the backlog (a bar), the rate, batches done, the time so far; below it
        one line per batch in flight with what it is doing. Called from rich's refresh thread: it
        takes no lock (one could deadlock with a line being printed above it) and reads values that
        are replaced whole."""
        seconds = time.monotonic() - self._started if self._started else 0.0
        rate = f"{self._landed / seconds:,.0f} events/s" if seconds > 0 and self._landed else "- events/s"
        of = f" of {self._total:,}" if self._total else ""
        done = f"{self._done} batch{'es' if self._done != 1 else ''} done"
        line = Table.grid(padding=(0, 1))
        line.add_row(self._spinner, Text(f"landing: {self._landed:,}{of} events", style="bold"),
                     ProgressBar(total=self._total or None, completed=self._landed, width=30),
                     Text(f"{rate}, {done}, {_clock(seconds)}"))
        return Group(line, *(Text(f"  {phase}", style="dim") for phase in self._busy))


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
