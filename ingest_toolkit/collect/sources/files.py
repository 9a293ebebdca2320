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
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import RefusedFileError

__all__ = ["FileIdentity", "content_digest", "open_dir", "open_nofollow", "read_range"]

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CHUNK = 1 << 20
DIGEST_BYTES = 8  # 64 bits: together with inode, size and mtime, a collision is not a practical risk


@dataclass(frozen=True)
class FileIdentity:
    """What makes a spooled file *this* file: (device, inode, size, mtime_ns) from ``fstat`` and
    ``digest``, a fingerprint of its whole content.

    Deterministic for the same file (a crash and restart, or a rename, find the same identity and
    so the same batch ids), different for a different file that happens to get a deleted file's
    inode (ext4 reuses one at once) with the same size: the digest and the mtime tell them apart.
    """

    dev: int
    ino: int
    size: int
    mtime_ns: int
    digest: str = ""  # empty until the content was read (see ``with_digest``)

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def with_digest(self, digest: str) -> FileIdentity:
        return FileIdentity(self.dev, self.ino, self.size, self.mtime_ns, digest)

    @property
    def stat_part(self) -> tuple[int, int, int, int]:
        """The part known from ``stat`` alone (no read)."""
        return self.dev, self.ino, self.size, self.mtime_ns

    def key(self) -> str:
        """The file's part of its batch ids: ``<dev>.<ino>.<size>.<mtime_ns>.<digest>``."""
        assert self.digest, "the identity of a file being delivered includes its content digest"
        return f"{self.dev}.{self.ino}.{self.size}.{self.mtime_ns}.{self.digest}"


def content_digest(fd: int, size: int) -> str:
    """BLAKE2b-64 (hex) of the first ``size`` bytes of ``fd``."""
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for _, data in read_range(fd, 0, size):
        digest.update(data)
    return digest.hexdigest()


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
