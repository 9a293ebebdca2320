"""Exclusive ownership of a channel directory (one owner per directory, across processes)."""

from __future__ import annotations

import fcntl
import os

from ..errors import ChannelLockedError

__all__ = ["DirectoryLock", "LOCK_FILE"]

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
