"""What a landing shows while it runs: the backlog it found, the Spark start as a step of its own,
and each batch as it passes its phases and completes.

:class:`LandingProgress` is what the run reports to (:func:`~ingest_toolkit.land.run.land_channel`,
:func:`~ingest_toolkit.land.drain.land_until_empty`, :func:`~ingest_toolkit.land.landing.land_once`);
calls may come from the drain's two batch threads at once. Two implementations for ``land``:

* :class:`TerminalProgress` (stderr is a terminal): a live footer on stderr (rich) - while Spark
  starts, a spinner and the time so far; then the events landed of the backlog found, the rate,
  the batches done and what each batch in flight is doing (taking, building the Arrow table,
  writing files, committing) - with the finished steps and one line per completed batch above it;
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
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

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
    return (f"landed {r.events:,} events ({r.redelivered:,} redelivered, already landed) from {r.channel!r}"
            f"{where}: {r.files} files, {r.bytes:,} bytes, batch {r.batch_id or '-'}, {r.duration_s:.2f} s "
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
    (module docstring). Use as a context manager around the run."""

    def __init__(self, *, print_batches: bool = True) -> None:
        columns = (SpinnerColumn(finished_text="-"), TextColumn("{task.description}"), BarColumn(),
                   TextColumn("{task.fields[detail]}"), TimeElapsedColumn())
        self._live = Progress(*columns, console=Console(stderr=True), redirect_stdout=False, transient=True)
        self._print_batches = print_batches
        self._lock = threading.Lock()
        self._task: TaskID | None = None
        self._total: int | None = None
        self._landed = self._done = 0
        self._phases: dict[int, str] = {}
        self._started = time.monotonic()

    def __enter__(self) -> TerminalProgress:
        self._live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._live.stop()

    def backlog(self, events: int) -> None:
        with self._lock:
            self._total = events
            self._live.console.print(f"backlog: {events:,} committed events to land", highlight=False)

    def spark_starting(self) -> None:
        with self._lock:
            self._task = self._live.add_task("starting Spark", total=None, detail="")

    def spark_started(self, seconds: float) -> None:
        with self._lock:
            if self._task is not None:
                self._live.remove_task(self._task)
                self._task = None
            self._live.console.print(f"Spark started in {seconds:.1f} s", highlight=False)

    def batch_phase(self, batch: int, phase: str, taken: int) -> None:
        with self._lock:
            self._phases[batch] = f"batch {batch}: {phase}" + (f" ({taken:,} events)" if taken else "")
            self._refresh()

    def batch_done(self, batch: int, result: LandingResult) -> None:
        with self._lock:
            self._phases.pop(batch, None)
            self._landed += result.taken
            self._done += 1
            if self._print_batches:
                self._print(batch, result)
            self._refresh()

    def _print(self, batch: int, result: LandingResult) -> None:
        """A batch's line on stdout: above the footer when stdout is this terminal too, else where
        stdout goes (a file, a pipe), which must get it."""
        if sys.stdout.isatty():
            self._live.console.print(f"batch {batch}: {batch_line(result)}", markup=False, highlight=False)
        else:
            click.echo(batch_line(result))
            sys.stdout.flush()

    def _refresh(self) -> None:
        """The footer: events landed of the backlog, rate, batches done, the batches in flight."""
        seconds = time.monotonic() - self._started
        rate = f"{self._landed / seconds:,.0f} events/s" if seconds > 0 and self._landed else "- events/s"
        total = f"/{self._total:,}" if self._total is not None else ""
        busy = "; ".join(self._phases[b] for b in sorted(self._phases))
        detail = f"{self._landed:,}{total} events, {rate}, {self._done} batches done" + (f"; {busy}" if busy else "")
        if self._task is None:
            self._task = self._live.add_task("landing", total=self._total or None, detail=detail)
        self._live.update(self._task, completed=self._landed, total=self._total or None, detail=detail)
