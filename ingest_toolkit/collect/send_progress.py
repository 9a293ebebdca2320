"""What ``send`` shows while it sends, on stderr (stdout keeps only the final counts).

* On a terminal: one live line (rich), redrawn as the agent acknowledges batches: events and
  batches acknowledged, the rate, the time so far, and a bar of the input read when the input
  is files (their size is known; stdin's is not). It disappears when the send ends, leaving the
  final counts.
* Otherwise (a pipe, a log file): a line every :data:`LINE_EVERY` seconds of a send still
  running, ``sending: 120,000 events in 120 batches acknowledged (24,000 events/s)``. Not one
  line per batch: a batch is a thousand lines by default, so a large file would print thousands.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from ..cli_common import stderr_is_terminal
from ..numbers import count

__all__ = ["LINE_EVERY", "SendProgress"]

LINE_EVERY = 10.0  # seconds between two progress lines when stderr is not a terminal


class SendProgress:
    """Counts of acknowledged batches, shown as they change (module docstring). ``total_bytes``:
    the size of the input files, None for stdin."""

    def __init__(self, total_bytes: int | None, *, terminal: bool | None = None) -> None:
        self.events = self.batches = self.bytes = 0
        self._total = total_bytes
        self._started = self._last_line = time.monotonic()
        self._live: Progress | None = None
        self._task: TaskID | None = None
        self._terminal = stderr_is_terminal() if terminal is None else terminal

    def __enter__(self) -> SendProgress:
        if self._terminal:
            columns = [SpinnerColumn(), TextColumn("sending")]
            if self._total:
                columns.append(BarColumn())
            columns += [TextColumn("{task.fields[counts]}"), TimeElapsedColumn()]
            self._live = Progress(*columns, console=Console(stderr=True), transient=True, redirect_stdout=False)
            self._task = self._live.add_task("send", total=self._total or None, counts=self._counts())
            self._live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()

    def acknowledged(self, events: int, size: int) -> None:
        """One more batch of ``events`` events (``size`` bytes of input) stored by the agent."""
        self.events, self.batches, self.bytes = self.events + events, self.batches + 1, self.bytes + size
        if self._live is not None and self._task is not None:
            self._live.update(self._task, completed=self.bytes, counts=self._counts())
        elif time.monotonic() - self._last_line >= LINE_EVERY:
            self._last_line = time.monotonic()
            click.echo(f"sending: {self._counts()}", err=True)
            sys.stderr.flush()

    def note(self, line: str) -> None:
        """A message (a retry) above the live line, or as a line of its own."""
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)
        else:
            click.echo(line, err=True)

    def _counts(self) -> str:
        seconds = time.monotonic() - self._started
        rate = f"{self.events / seconds:,.0f}" if seconds > 0 else "-"
        return f"{count(self.events, 'event')} in {count(self.batches, 'batch')} acknowledged ({rate} events/s)"
