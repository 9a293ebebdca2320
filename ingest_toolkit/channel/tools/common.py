"""Plumbing shared by the operator tools: the channel's directories, offline locking, listings."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ...errors import ChannelError, ChannelLockedError
from ..fs import OsFileSystem
from ..lock import LOCK_FILE, DirectoryLock
from ..recovery import CHANNEL_ID_FILE
from ..segment import list_segments

__all__ = ["ChannelDirs", "ChannelInUseError", "PhaseProgress", "ToolError", "lock_state", "offline",
           "read_channel_id", "segments_of"]

PhaseProgress = Callable[[str, int, int], None]  # (phase, segments done, segments total)


class ToolError(ChannelError):
    """An operator tool cannot do what was asked; the message says why and what to do."""


class ChannelInUseError(ChannelLockedError):
    """An offline tool found the channel owned by a running process."""

    def __init__(self, err: ChannelLockedError, tool: str) -> None:
        ChannelError.__init__(
            self, f"channel directory {err.path} is locked by another process ({err.holder}): "
                  f"'channel {tool}' works on a stopped channel only. Stop the process that owns it, "
                  "or use 'ingest-toolkit channel inspect', which reads a live channel without a lock")
        self.path, self.holder = err.path, err.holder


@dataclass(frozen=True, slots=True)
class ChannelDirs:
    checkpoint_dir: str
    data_dirs: tuple[str, ...]

    @classmethod
    def of(cls, checkpoint_dir: str, data_dirs: list[str] | tuple[str, ...]) -> ChannelDirs:
        if not data_dirs:
            raise ToolError("no data directory given: pass --data-dir (once per data directory)")
        dirs = cls(os.fspath(checkpoint_dir), tuple(os.fspath(d) for d in data_dirs))
        for directory in (dirs.checkpoint_dir, *dirs.data_dirs):
            if not os.path.isdir(directory):
                raise ToolError(f"{directory} is not a directory: check --checkpoint-dir and --data-dir")
        return dirs

    def all(self) -> tuple[str, ...]:
        return (self.checkpoint_dir, *self.data_dirs)


@contextmanager
def offline(dirs: ChannelDirs, tool: str) -> Iterator[None]:
    """Own every directory of the channel, as the channel itself would, for the block."""
    locks: list[DirectoryLock] = []
    try:
        for directory in dirs.all():
            lock = DirectoryLock(directory)
            try:
                lock.acquire()
            except ChannelLockedError as err:
                raise ChannelInUseError(err, tool) from None
            locks.append(lock)
        yield
    finally:
        for lock in reversed(locks):
            lock.release()


def segments_of(dirs: ChannelDirs) -> list[tuple[int, str]]:
    """``(log_id, path)`` of every segment of the channel, in log order."""
    fs = OsFileSystem()
    return sorted(seg for directory in dirs.data_dirs for seg in list_segments(fs, directory))


def read_channel_id(checkpoint_dir: str) -> tuple[str | None, str | None]:
    """``(channel id, problem)`` from ``channel.id``; both None when the file does not exist."""
    path = os.path.join(checkpoint_dir, CHANNEL_ID_FILE)
    try:
        with open(path, encoding="ascii") as f:
            return str(uuid.UUID(f.read().strip())), None
    except FileNotFoundError:
        return None, None
    except (ValueError, UnicodeDecodeError) as err:
        return None, f"{path} does not hold a channel id ({err})"


def lock_state(directory: str) -> tuple[bool | None, str | None]:
    """Whether ``in_use.lock`` of ``directory`` is held right now, and the holder it names.

    Reads ``/proc/locks`` (Linux) so that no lock is taken; ``None`` when that is not possible.
    The holder ("pid <n>") is given only when the lock is held, or may be (``None``: then it is
    the last owner the file names): the pid a stopped owner left in the file is not an owner.
    """
    path = os.path.join(directory, LOCK_FILE)
    try:
        st = os.stat(path)
        with open(path, encoding="ascii", errors="replace") as f:
            holder = f.read(64).strip() or None
    except FileNotFoundError:
        return False, None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            held = any(len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == key
                       for parts in (line.split() for line in f))
    except OSError:
        return None, holder
    return held, holder if held else None
