"""The parent side of the real-process crash tests: running a child, reading its report, killing it.

The children (``crash_child.py``, ``checkpoint_child.py``) work on a channel and report every
step on stdout before and after it happens (the protocol is in ``crash_child.py``'s docstring);
the crash tests SIGKILL them at random moments and check the reopened channel against
:meth:`ChildLog.candidates`. ``test_crash.py`` and ``test_checkpoint_crash.py`` share this.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import threading
from pathlib import Path
from types import ModuleType

__all__ = ["HERE", "LINE_TIMEOUT", "ChildLog", "ChildProcess", "crash_child", "load_module"]

HERE = Path(__file__).resolve().parent
LINE_TIMEOUT = 60.0


def load_module(name: str, path: Path) -> ModuleType:
    """Import a child script by path (works whether or not tests/ is a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The workload's rules (settings, bodies and headers of each counter), shared with the children.
crash_child = load_module("_crash_child", HERE / "crash_child.py")


class ChildProcess:
    """A running child; a thread collects its stdout so it never blocks on the pipe."""

    def __init__(self, argv: list[str], *, stderr: Path) -> None:
        self.stderr_path = stderr
        with open(stderr, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        self.pid = self.proc.pid
        self._raw: list[bytes] = []
        self._eof = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._cond:
                self._raw.append(raw)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def go(self, start: int) -> None:
        """Let the child open the channel; its first put gets counter ``start``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"go {start}\n".encode())
        self.proc.stdin.flush()

    def count(self, prefix: str) -> int:
        with self._cond:
            return self._count(prefix)

    def _count(self, prefix: str) -> int:
        return sum(raw.startswith(prefix.encode()) for raw in self._raw)

    def wait_count(self, prefix: str, n: int, timeout: float = LINE_TIMEOUT) -> bool:
        """Wait until ``n`` lines start with ``prefix``; False if the child ended first."""
        with self._cond:
            self._cond.wait_for(lambda: self._eof or self._count(prefix) >= n, timeout)
            return self._count(prefix) >= n

    def wait_for(self, word: str, timeout: float = LINE_TIMEOUT) -> bool:
        """Wait for a line starting with ``word``; False if the child ended without one."""
        return self.wait_count(word, 1, timeout)

    def kill(self) -> list[str]:
        """SIGKILL the child; returns every complete line it wrote (a torn last line is dropped)."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()
        self._thread.join(LINE_TIMEOUT)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        return [raw.decode().rstrip("\n") for raw in self._raw if raw.endswith(b"\n")]

    def describe(self) -> str:
        stderr = self.stderr_path.read_text(errors="replace")[-3000:]
        tail = b"".join(self._raw[-15:]).decode(errors="replace")[-3000:]
        return f"child pid {self.pid} exit {self.proc.returncode}\nlast stdout:\n{tail}\nstderr:\n{stderr}"


class ChildLog:
    """Replays a child's report over the queue it started from; tells what the log may hold."""

    def __init__(self, queue: list[int]) -> None:
        self.queue = list(queue)
        self.pending: tuple[str, list[int]] | None = None
        self.max_counter = 0
        self.commits = 0
        self.checkpoints = 0  # checkpoint_child only: explicit checkpoint() calls completed
        self.in_checkpoint = False  # the last line was "CKPT begin": killed inside checkpoint()
        self.backup_ops = 0  # "BKUP" lines: file operations of backup copies announced

    def apply(self, line: str) -> None:
        word, *args = line.split()
        if word == "READY":
            assert int(args[0]) == len(self.queue), f"child opened with {args[0]} events, expected {len(self.queue)}"
        elif word == "BEGIN":
            self._begin(args[0], [int(a) for a in args[1:]])
        elif word in ("OK", "RB"):
            self._end(word, args[0])
        elif word == "CKPT":
            self.in_checkpoint = args[0] == "begin"
            self.checkpoints += args[0] == "done"
        elif word == "BKUP":
            self.backup_ops += 1  # checkpoint_child --backup-dir: a step of the backup copy
        else:
            assert word == "OPENING", f"child reported {line!r}"

    def _begin(self, kind: str, numbers: list[int]) -> None:
        assert self.pending is None, f"BEGIN {kind} while {self.pending} is open"
        if kind in ("put", "putrb"):
            counters = list(range(numbers[0], numbers[1] + 1))
            self.max_counter = max(self.max_counter, numbers[1])
        else:
            counters = numbers[1:]
            assert len(counters) == numbers[0]
            head = self.queue[: len(counters)]
            assert counters == head, f"take batch not in FIFO order: took {counters}, queue head {head}"
        self.pending = (kind, counters)

    def _end(self, word: str, kind: str) -> None:
        assert self.pending is not None, f"{word} {kind} without BEGIN"
        pending_kind, counters = self.pending
        assert pending_kind == {"OK": kind, "RB": kind + "rb"}[word], f"{word} {kind} ends {pending_kind}"
        if pending_kind == "put":
            self.queue.extend(counters)
        elif pending_kind == "take":
            del self.queue[: len(counters)]
        self.commits += word == "OK"
        self.pending = None

    def candidates(self) -> list[list[int]]:
        """The queues recovery may produce: the in-doubt commit (if any) either way."""
        if self.pending is None or self.pending[0] in ("putrb", "takerb"):
            return [self.queue]  # a rollback, even one cut short, never shows
        kind, counters = self.pending
        if kind == "put":
            return [self.queue, self.queue + counters]
        return [self.queue, self.queue[len(counters):]]
