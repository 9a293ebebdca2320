"""Exec source: runs a command and turns each line of its standard output into an event.

``command`` is an argument list, run without a shell; ``shell = true`` runs a string with
``/bin/sh -c`` instead (pipes, redirections - and the shell's quoting rules). Lines are split as
the tail source splits them (``\\n`` removed, ``max_event_bytes`` with the ``oversized``
policy); a batch is put when it holds ``batch_size`` events or its first event waited
``linger`` seconds. Standard error is logged at WARNING, line by line.

**Process life.** The command runs under a small supervisor process (:mod:`.exec_supervisor`,
whose docstring gives the design) in a session of its own, so a signal to the agent's process
group does not reach it. The agent holds a pipe to the supervisor; when the agent stops, or dies
in any way (SIGKILL of its pid or of its process group too), the pipe closes and the supervisor
sends SIGTERM to everything the command started (it is their subreaper, so a pipeline's ``tail``
and ``grep``, a background job or a daemonized process all stay below it), SIGKILL after
``stop_grace`` seconds. A ``tail -F`` or a shell pipeline therefore never outlives the agent. When the command exits by
itself (any status), it is started again after a backoff that doubles from ``min_backoff`` to
``max_backoff`` while the command keeps exiting within ``max_backoff`` seconds of its start
(``restart = false``: it is not restarted).

**What it can lose or repeat.** The command's output has no position the agent could resume
from, so the exec source is at-most-once *across restarts* of the agent or of the command:

* lines the command wrote that were not yet put (the current partial batch, a batch backing off
  on a full channel, the pipe's buffer) are lost when the agent stops or dies - the command is
  killed, and the next run cannot produce them again unless the command itself resumes;
* what the next run produces is the command's business: ``tail -F -n 10 file`` repeats up to
  ten lines already stored and loses the lines written while no agent ran; ``tail -F -n 0``
  repeats nothing and loses those lines; a command that keeps its own position (or a spool or tail
  source instead of ``tail -F``) loses nothing.

Within one run every batch is put with a batch id ``<source>:<run id>:<batch number>``, so a
batch retried after a transient error (channel full, disk space) is stored once.
"""

from __future__ import annotations

import logging
import os
import selectors
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from ...channel import Event
from ..pipeline import Pipeline
from .base import Counters, SourceSettings, SourceStopped, make_batch_id, put_until_committed
from .lines import LineSplitter, Oversized

__all__ = ["ExecSettings", "ExecSource"]

log = logging.getLogger("ingest_toolkit.collect.exec")

MiB = 1 << 20
READ_BYTES = 1 << 16


class ExecSettings(SourceSettings):
    type: Literal["exec"]
    command: list[str] | str  # an argument list; a string only with shell = true
    shell: bool = False
    cwd: Path | None = None
    env: dict[str, str] = Field(default_factory=dict)  # added to the agent's environment
    batch_size: int = Field(default=100, ge=1)
    linger: float = Field(default=0.2, ge=0)
    max_event_bytes: int = Field(default=1 * MiB, ge=1)
    oversized: Oversized = "split"
    restart: bool = True
    min_backoff: float = Field(default=0.5, gt=0)
    max_backoff: float = Field(default=30.0, gt=0)
    stop_grace: float = Field(default=2.0, ge=0)  # SIGTERM to SIGKILL of the command's process group

    @model_validator(mode="after")
    def _command(self) -> ExecSettings:
        if self.shell and not isinstance(self.command, str):
            raise ValueError("with shell = true, command is one string for /bin/sh -c")
        if not self.shell and (isinstance(self.command, str) or not self.command or not self.command[0]):
            raise ValueError('command must be a non-empty argument list, e.g. ["tail", "-F", "/var/log/app.log"] '
                             "(or a string with shell = true)")
        if self.max_backoff < self.min_backoff:
            raise ValueError("max_backoff must be >= min_backoff")
        return self

    def argv(self) -> list[str]:
        return ["/bin/sh", "-c", self.command] if isinstance(self.command, str) else list(self.command)


class ExecSource:
    """Runs ``settings.command`` under the supervisor; one worker thread, one stderr reader."""

    def __init__(self, name: str, settings: ExecSettings, pipeline: Pipeline, *, state_dir: Path) -> None:
        self.name, self.settings, self.pipeline = name, settings, pipeline
        self.counters = Counters("events", "batches", "bytes", "duplicates", "retries", "errors", "starts",
                                 "exits", "oversized", "lost_on_stop")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.child_pid: int | None = None  # the supervisor's pid (the command's is its child)
        self.last_exit: int | None = None

    # -- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"source-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._end_child()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("source %s did not stop within %.1fs", self.name, timeout)
            self._thread = None

    def stats(self) -> dict[str, Any]:
        running = self._thread is not None and self._thread.is_alive()
        return {**self.counters.snapshot(), "running": running, "command_pid": self.child_pid,
                "last_exit_status": self.last_exit}

    # -- the worker -----------------------------------------------------------------------
    def _run(self) -> None:
        delay = self.settings.min_backoff
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._one_run()
            except SourceStopped:
                return
            except Exception:
                self.counters.add(errors=1)
                log.exception("source %s: the command could not be run", self.name)
            if self._stop.is_set() or not self.settings.restart:
                return
            if time.monotonic() - started >= self.settings.max_backoff:
                delay = self.settings.min_backoff  # it ran a good while: a fresh start
            log.info("source %s: restarting the command in %.1fs", self.name, delay)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, self.settings.max_backoff)

    def _spawn(self) -> subprocess.Popen[bytes]:
        supervisor = [sys.executable, "-m", "ingest_toolkit.collect.sources.exec_supervisor",
                      str(self.settings.stop_grace), str(os.getpid()), "--", *self.settings.argv()]
        env = {**os.environ, **self.settings.env}
        # a session of its own: a signal to the agent's process group must not reach the supervisor,
        # which outlives the agent just long enough to end the command's tree (exec_supervisor)
        proc = subprocess.Popen(supervisor, stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # noqa: S603
                                stderr=subprocess.PIPE, cwd=self.settings.cwd, env=env, close_fds=True,
                                start_new_session=True)
        with self._lock:
            self._proc, self.child_pid = proc, proc.pid
        if self._stop.is_set():  # stop() ran while we started it: it did not see this child
            self._end_child()
        return proc

    def _one_run(self) -> None:
        proc = self._spawn()
        run_id = uuid.uuid4().hex[:12]
        self.counters.add(starts=1)
        log.info("source %s: started %s (run %s, supervisor pid %d)", self.name, self.settings.argv(), run_id,
                 proc.pid)
        assert proc.stdout is not None and proc.stderr is not None
        errors = threading.Thread(target=self._log_stderr, args=(proc.stderr,), daemon=True)
        errors.start()
        splitter = LineSplitter(0, self.settings.max_event_bytes, self.settings.oversized)
        batch: list[Event] = []
        batch_no, first_at = 0, 0.0
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            eof = False
            while not eof:
                timeout = None if not batch else max(0.0, first_at + self.settings.linger - time.monotonic())
                ready = selector.select(timeout if timeout is not None else 0.5)
                data = os.read(fd, READ_BYTES) if ready else None
                if data == b"":
                    eof = True
                    pieces = splitter.flush()
                elif data:
                    pieces = splitter.feed(data)
                else:
                    pieces = []
                for piece in pieces:
                    if not batch:
                        first_at = time.monotonic()
                    batch.append(Event(piece.body))
                    self.counters.add(bytes=len(piece.body), oversized=int(piece.oversized))
                full = len(batch) >= self.settings.batch_size
                late = batch and time.monotonic() - first_at >= self.settings.linger
                if batch and (full or late or eof):
                    for start in range(0, len(batch), self.settings.batch_size):
                        self._put(batch[start:start + self.settings.batch_size], run_id, batch_no)
                        batch_no += 1
                    batch = []
        status = proc.wait()
        errors.join(1.0)
        proc.stdout.close()
        self.last_exit = status
        self.counters.add(exits=1)
        log.log(logging.INFO if self._stop.is_set() else logging.WARNING,
                "source %s: the command ended with status %d (run %s)", self.name, status, run_id)

    def _put(self, events: list[Event], run_id: str, batch_no: int) -> None:
        try:
            result = put_until_committed(self.pipeline, events, make_batch_id(self.name, run_id, batch_no),
                                         stop=self._stop, log=log, counters=self.counters,
                                         max_backoff=self.settings.max_backoff)
        except SourceStopped:
            self.counters.add(lost_on_stop=len(events))
            raise
        self.counters.add(events=0 if result.duplicate else len(events), batches=1,
                          duplicates=int(result.duplicate))

    def _log_stderr(self, stream: Any) -> None:
        for line in stream:
            log.warning("source %s: command stderr: %s", self.name, line.decode(errors="replace").rstrip()[:1000])
        stream.close()

    def _end_child(self) -> None:
        """Close the lifeline: the supervisor ends the command's process group and exits."""
        with self._lock:
            proc = self._proc
        if proc is not None and proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
