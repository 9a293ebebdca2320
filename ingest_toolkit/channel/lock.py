"""Exclusive ownership of a channel directory (one owner per directory, across processes)."""

from __future__ import annotations

import fcntl
import os

from ..errors import ChannelLockedError

__all__ = ["DirectoryLock", "LOCK_FILE", "lock_holder"]

LOCK_FILE = "in_use.lock"


class DirectoryLock:
    """``flock`` on ``<dir>/in_use.lock``; the file records the holder's pid for the error text.

    The kernel releases the lock when the process dies, so a SIGKILLed owner never leaves a
    stale lock behind.
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd = -1

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown pid"
            os.close(fd)
            raise ChannelLockedError(path=os.path.dirname(self.path), holder=holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def lock_holder(directory: str) -> int | None:
    """The pid of the live process holding ``<directory>/in_use.lock``; None when no process does.

    Takes no lock, so a process starting at the same moment is never refused because of this
    look: the kernel's table of locks (``/proc/locks``) names the holder. Where that table does
    not exist, the pid the lock file records counts if that process is alive.
    """
    path = os.path.join(directory, LOCK_FILE)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            rows = [line.split() for line in f]
    except OSError:
        return _recorded_live_pid(path)
    pids = [int(r[4]) for r in rows if len(r) > 5 and r[1] == "FLOCK" and r[5] == key and r[4].isdigit()]
    return pids[0] if pids else None


def _recorded_live_pid(path: str) -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            words = f.read(64).split()
        pid = int(words[1]) if len(words) > 1 and words[0] == "pid" else 0
    except (OSError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except PermissionError:
        return pid  # alive, another user's
    except OSError:
        return None
    return pid
