"""The supervisor between the agent and an exec source's command (Linux and other POSIX systems).

``python -m ingest_toolkit.collect.sources.exec_supervisor GRACE -- ARGV...``

It starts ARGV in a new session (so the command and everything it starts share one process group
the supervisor can signal), with the supervisor's stdout and stderr, and watches its own stdin: the
agent holds the other end of that pipe and never writes to it. When the agent ends in any way,
SIGKILL included, the kernel closes the pipe; the supervisor reads end-of-file, sends SIGTERM to
the command's process group, SIGKILL after GRACE seconds, and exits. When the command exits first,
the supervisor kills what is left of its group and exits with the command's status (a signal: 128
+ its number).

On Linux the supervisor also asks the kernel to SIGKILL the command itself if the supervisor dies
(``PR_SET_PDEATHSIG``): a SIGKILL of the supervisor alone then still ends the command, though not
the processes the command started (the group's other members). A process that leaves the group
(``setsid``, a daemonizing program) is beyond reach.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)  # ignored by the supervisor; an ignored signal survives exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the supervisor's own pipe watch still ends the group


def _kill_group(pgid: int, grace: float, proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(pgid):
            return
        time.sleep(0.02)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: exec_supervisor GRACE -- ARGV...\n")
        return 2
    grace, command = float(argv[0]), argv[2:]
    lifeline = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the command must not hold the lifeline open
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True,  # noqa: S603
                            preexec_fn=_die_with_parent, close_fds=True)
    pgid = proc.pid
    done = threading.Event()

    def watch() -> None:
        while os.read(lifeline, 4096):
            pass
        if not done.is_set():  # the agent is gone, or closed the pipe to stop us
            _kill_group(pgid, grace, proc)
            os._exit(143)

    threading.Thread(target=watch, daemon=True).start()
    status = proc.wait()
    done.set()
    if _group_alive(pgid):  # what the command started and left behind
        _kill_group(pgid, 0.0, proc)
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # the lifeline decides; a terminal's ^C reaches the agent
    sys.exit(main(sys.argv[1:]))
