"""The supervisor between the agent and an exec source's command (Linux; other POSIX systems in part).

``python -m ingest_toolkit.collect.sources.exec_supervisor GRACE [PARENT_PID] -- ARGV...``

**The promise**: when the agent ends in any way (SIGTERM, a SIGKILL of its pid, a SIGKILL of its
whole process group, a crash), no process of the command survives it: not the command, not the
``tail`` and ``grep`` of a shell pipeline, not a background job, not a program that called
``setsid`` or daemonized. Four mechanisms, each for a way the others could be cut short:

1. **A session of its own.** The agent starts the supervisor with ``start_new_session``, so a
   signal to the agent's process group (``kill -9 -- -<pgid>``, a shell's ``kill %1``, a container
   runtime) does not reach it: it lives on to clean up. (Sharing the agent's group, it used to
   die with the agent and leave the pipeline's processes behind.)
2. **A lifeline.** The supervisor's stdin is a pipe whose other end only the agent holds and never
   writes. When the agent ends in any way, SIGKILL included, the kernel closes it: the
   supervisor reads end-of-file and ends the command's whole tree (below), then exits 143. A
   clean stop of the source closes the pipe on purpose, with the same effect.
3. **Parent death.** On Linux the supervisor asks the kernel for SIGTERM when the agent thread
   that started it ends (``PR_SET_PDEATHSIG``), and handles SIGTERM (and SIGINT) like the
   lifeline's end: a second trigger should the pipe's write end ever leak into another process.
4. **A subreaper.** The supervisor is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a process
   of the command whose parent exits (the shell of a pipeline ending first, a double fork, a
   daemon) is adopted by the supervisor, not by init, so every process the command ever started
   stays below the supervisor in the process tree, whatever its session or process group. Ending
   the command's tree is: SIGTERM to the command's process group and to every descendant found in
   ``/proc``, SIGKILL after ``GRACE`` seconds to whatever is left, repeated until nothing is left
   (a process forked meanwhile is found by the next scan). The supervisor reaps every child.

The command runs in a new session too (one process group to signal), with ``PR_SET_PDEATHSIG``
SIGKILL: a SIGKILL of the supervisor alone still ends the command itself, though not the processes
the command started (they are orphaned to init once their subreaper is gone): this is the one
kill the design does not cover, and nothing but the operator sends it. When the command exits
first, the supervisor ends what is left of its tree and exits with the command's status (a
signal: 128 + its number). Without ``/proc`` (not Linux) only the process group is signalled.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["descendants", "end_tree", "main"]

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL = 0.02  # seconds between looks at the tree while it ends
KILL_ROUNDS_SECONDS = 5.0  # SIGKILL rounds go on this long at most (a fork bomb is not our business)


def _prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False where it does not exist (not Linux) or fails."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


HANDLED = {signal.SIGTERM, signal.SIGINT}  # blocked until the supervisor's handlers are in place


def _die_with_parent() -> None:  # runs in the command's process between fork and exec
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)  # the command gets the default handlers back
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)  # and an unblocked mask (exec keeps the mask)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _parents() -> dict[int, int]:
    """``{pid: parent pid}`` of every live process (zombies excluded: they run nothing) from ``/proc``."""
    out = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else []:
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] not in ("Z", "X"):
            out[int(entry.name)] = int(fields[1])
    return out


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` in the process tree (children first, then theirs)."""
    parents = _parents()
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _signal_all(pgid: int, pids: list[int], signum: int) -> None:
    for target in pids:
        try:
            os.kill(target, signum)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap_zombies() -> None:
    """Reap the children that ended (the main thread may be busy in a signal handler)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _alive(pgid: int) -> list[int]:
    """What is left of the command: the supervisor's descendants (and a marker for a live group)."""
    _reap_zombies()
    left = descendants(os.getpid())
    return left if left or not _group_alive(pgid) else [-pgid]


def end_tree(pgid: int, grace: float) -> None:
    """SIGTERM the command's group and every descendant of this process, SIGKILL after ``grace``
    seconds whatever is left, until nothing is (module doc, point 4)."""
    _signal_all(pgid, descendants(os.getpid()), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pgid):
        time.sleep(POLL)
    deadline = time.monotonic() + KILL_ROUNDS_SECONDS
    while (left := _alive(pgid)) and time.monotonic() < deadline:
        _signal_all(pgid, [p for p in left if p > 0], signal.SIGKILL)
        time.sleep(POLL)


class Supervisor:
    """One command under this process: started, reaped, and ended with its whole tree."""

    def __init__(self, grace: float, command: list[str]) -> None:
        self.grace = grace
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True,  # noqa: S603
                                     preexec_fn=_die_with_parent, close_fds=True)
        self.pgid = self.proc.pid
        self._ending = threading.Lock()

    def shut_down(self, status: int = 143) -> None:
        """End the command's tree and exit (the agent is gone or stopped us). Runs once."""
        if not self._ending.acquire(blocking=False):
            return
        end_tree(self.pgid, self.grace)
        os._exit(status)

    def finish(self) -> None:
        """The command ended by itself: end what it left behind (unless a shutdown already does)."""
        self._ending.acquire()
        end_tree(self.pgid, 0.0)

    def watch(self, lifeline: int) -> None:
        """In a thread: the agent never writes to the lifeline; end-of-file means it is gone."""
        while os.read(lifeline, 4096):
            pass
        self.shut_down()

    def reap(self) -> int:
        """Reap every child (the command, and the orphans this subreaper adopts) until the command
        ends; returns its exit status as a shell reports it."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                return 0
            if pid == self.proc.pid:
                self.proc.returncode = code = os.waitstatus_to_exitcode(status)
                return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    if "--" not in argv[1:3] or len(argv) < argv.index("--") + 2:
        sys.stderr.write("usage: exec_supervisor GRACE [PARENT_PID] -- ARGV...\n")
        return 2
    split = argv.index("--")
    grace, parent, command = float(argv[0]), int(argv[1]) if split == 2 else None, argv[split + 1:]
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)  # held until the handlers can end the command
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    lifeline = os.dup(0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the command must not hold the lifeline open
    supervisor = Supervisor(grace, command)
    for signum in HANDLED:
        signal.signal(signum, lambda *_: supervisor.shut_down())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)
    if parent is not None and os.getppid() != parent:
        supervisor.shut_down()  # the agent died before the parent-death signal was armed
    threading.Thread(target=supervisor.watch, args=(lifeline,), daemon=True).start()
    status = supervisor.reap()
    supervisor.finish()
    return status


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # no terminal in its own session; never from one
    sys.exit(main(sys.argv[1:]))
