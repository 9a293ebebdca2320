"""The only door between the channel and the operating system's files.

Every read, write, sync, rename and unlink the channel performs goes through a
:class:`FileSystem`, so tests can substitute a layer that drops unsynced writes (power loss) or
fails with ENOSPC/EIO at a chosen call. :func:`write_atomic` is the one helper for replacing a
small file: temporary file, write, fsync, rename, fsync of the directory; :func:`read_file` the
one for reading a small file whole (checkpoint files, ``.meta``, ``channel.id``, headers).

Two reads still bypass it: the replay's scan maps a segment (``segment.scan_segment``; a
:class:`File` has no mmap), and the checkpointer's log-size figure uses ``os.stat``.
"""

from __future__ import annotations

import os
from typing import Protocol

__all__ = ["File", "FileSystem", "OsFile", "OsFileSystem", "read_file", "write_atomic"]


class File(Protocol):
    path: str

    def pwrite(self, data: bytes | memoryview, offset: int) -> None: ...
    def pread(self, size: int, offset: int) -> bytes: ...
    def sync(self) -> None: ...
    def truncate(self, size: int) -> None: ...
    def allocate(self, offset: int, length: int) -> None: ...
    def size(self) -> int: ...
    def close(self) -> None: ...


class FileSystem(Protocol):
    def create(self, path: str) -> File: ...
    def open_read(self, path: str) -> File: ...
    def open_write(self, path: str) -> File: ...
    def rename(self, src: str, dst: str) -> None: ...
    def unlink(self, path: str) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
    def sync_dir(self, path: str) -> None: ...
    def makedirs(self, path: str) -> None: ...
    def exists(self, path: str) -> bool: ...
    def free_bytes(self, path: str) -> int: ...


class OsFile:
    """A file descriptor with positional I/O; short writes are completed, not returned."""

    __slots__ = ("path", "_fd")

    def __init__(self, path: str, flags: int) -> None:
        self.path = path
        self._fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)

    def pwrite(self, data: bytes | memoryview, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, offset)
            view, offset = view[written:], offset + written

    def pread(self, size: int, offset: int) -> bytes:
        data = os.pread(self._fd, size, offset)
        if len(data) == size or not data:
            return data
        parts = [data]  # a short read before EOF is legal; keep reading until EOF or size
        got = len(data)
        while got < size:
            more = os.pread(self._fd, size - got, offset + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def allocate(self, offset: int, length: int) -> None:
        os.posix_fallocate(self._fd, offset, length)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsFileSystem:
    def create(self, path: str) -> File:
        return OsFile(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)

    def open_read(self, path: str) -> File:
        return OsFile(path, os.O_RDONLY)

    def open_write(self, path: str) -> File:
        return OsFile(path, os.O_RDWR)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def free_bytes(self, path: str) -> int:
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize


def read_file(fs: FileSystem, path: str, limit: int, *, expect: int | None = None) -> bytes | None:
    """The bytes of ``path``, at most ``limit + 1`` of them (so a caller seeing more than ``limit``
    knows the file is too large); None when it does not exist. ``expect``: a size the file must
    have, checked before reading (a claimed size bounds nothing): a ValueError when it differs."""
    try:
        f = fs.open_read(path)
    except FileNotFoundError:
        return None
    try:
        if expect is not None and (actual := f.size()) != expect:
            raise ValueError(f"{actual} bytes (expected {expect})")
        return f.pread(limit + 1, 0)
    finally:
        f.close()


def write_atomic(fs: FileSystem, path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file."""
    tmp = f"{path}.tmp"
    if fs.exists(tmp):
        fs.unlink(tmp)  # leftover of a crash during an earlier replace
    f = fs.create(tmp)
    try:
        f.pwrite(data, 0)
        f.sync()
    finally:
        f.close()
    fs.rename(tmp, path)
    fs.sync_dir(os.path.dirname(path) or ".")
