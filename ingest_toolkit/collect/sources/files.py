"""Opening input files without following symlinks or leaving the configured directory.

Spool directories are opened once (``O_DIRECTORY``) and every file in them is opened *relative
to that descriptor* by its bare name with ``O_NOFOLLOW``: a symlink (to anywhere) is refused by
the kernel, a name with a slash is refused here, and swapping the directory path afterwards does
not redirect us. ``O_NONBLOCK`` keeps a FIFO planted in the directory from blocking the open; only
regular files are accepted. A file with several hard links is refused too: a hard link is how
another file's contents could be smuggled into a spool directory.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from ...errors import IngestError

__all__ = ["FileIdentity", "RefusedFileError", "open_dir", "open_nofollow", "read_range"]

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CHUNK = 1 << 20


class RefusedFileError(IngestError):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"refusing {name!r}: {reason}")
        self.name, self.reason = name, reason


@dataclass(frozen=True)
class FileIdentity:
    """(device, inode, size): a file renamed in place keeps it; a replaced or changed file does not."""

    dev: int
    ino: int
    size: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size)

    def key(self) -> str:
        return f"{self.dev}.{self.ino}.{self.size}"


def open_dir(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_nofollow(name: str, *, dir_fd: int | None = None, allow_links: bool = False) -> tuple[int, os.stat_result]:
    """Open a regular file for reading without following a symlink in its last component.

    With ``dir_fd``, ``name`` must be a bare file name inside that directory.
    """
    if dir_fd is not None and ("/" in name or name in (".", "..") or "\0" in name):
        raise RefusedFileError(name, "not a plain file name inside the directory")
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EMLINK):
            raise RefusedFileError(name, "it is a symbolic link (links are never followed)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFileError(name, "not a regular file")
        if st.st_nlink > 1 and not allow_links:
            raise RefusedFileError(name, f"it has {st.st_nlink} hard links (drop files by rename, not link)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_range(fd: int, start: int, end: int | None, chunk: int = CHUNK) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) chunks of ``[start, end)``; ``end=None`` reads to the current end of file."""
    offset = start
    while end is None or offset < end:
        size = chunk if end is None else min(chunk, end - offset)
        data = os.pread(fd, size, offset)
        if not data:
            return
        yield offset, data
        offset += len(data)
