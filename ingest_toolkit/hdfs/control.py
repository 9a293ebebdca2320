"""The control channel of a local HDFS process: commands on its stdin, replies on its stdout.

Each command is written as ``@<id> <command>`` and its reply (one JSON line) carries the same
``id``. One thread reads the process's stdout and hands every reply to the command that waits
for it, so commands may be in flight together: the JVM makes their changes in the order they
were sent and lets a command that waits (a restarted DataNode registering) answer later, while
the next ones answer at once (``MiniHdfs.java`` documents the protocol).
"""

from __future__ import annotations

import itertools
import json
import threading
from typing import IO, Any

__all__ = ["ControlChannel", "PendingReply"]


class PendingReply:
    """The reply to one command, once it arrives; None when the process ended first."""

    def __init__(self, command: str) -> None:
        self.command = command
        self._done = threading.Event()
        self._reply: dict[str, Any] | None = None

    def deliver(self, reply: dict[str, Any] | None) -> None:
        self._reply = reply
        self._done.set()

    def wait(self, timeout: float) -> tuple[bool, dict[str, Any] | None]:
        """``(arrived, reply)``: ``arrived`` is False when ``timeout`` passed first; the reply is
        None when the process ended without answering."""
        return self._done.wait(timeout), self._reply


class ControlChannel:
    """Sends commands to a process and pairs its replies with them (module docstring).

    Lines without an id (``{"event": "stopped"}``) are kept as ``events``."""

    def __init__(self, stdin: IO[str], stdout: IO[str]) -> None:
        self._stdin, self._stdout = stdin, stdout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _pending and _closed, and keeps commands whole on stdin
        self._pending: dict[str, PendingReply] = {}
        self._closed = False
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, name="hdfs-replies", daemon=True)
        self._reader.start()

    def send(self, command: str) -> PendingReply:
        """Write ``command``; its reply arrives on the returned object. Raises OSError when the
        process no longer reads its input."""
        pending = PendingReply(command)
        with self._lock:
            if self._closed:
                pending.deliver(None)
                return pending
            tag = str(next(self._ids))
            self._pending[tag] = pending
            try:
                self._stdin.write(f"@{tag} {command}\n")
                self._stdin.flush()
            except OSError:
                self._pending.pop(tag, None)
                raise
        return pending

    def _read(self) -> None:
        for line in self._stdout:
            try:
                doc = dict(json.loads(line))
            except ValueError:
                continue  # not a protocol line
            self._dispatch(doc)
        with self._lock:
            self._closed = True
            waiting, self._pending = list(self._pending.values()), {}
        for pending in waiting:
            pending.deliver(None)

    def _dispatch(self, doc: dict[str, Any]) -> None:
        with self._lock:
            pending = self._pending.pop(str(doc["id"]), None) if "id" in doc else None
            if pending is None:
                self.events.append(doc)
        if pending is not None:
            pending.deliver(doc)

    def join(self, timeout: float) -> None:
        """Wait for the reader to reach the end of the process's output."""
        self._reader.join(timeout)
