"""The landing's storage for ``file://`` roots: plain system calls with fsync, run by the driver.

A ``file://`` root on a cluster must be a mount every host shares. This is the only backend
that makes landed files durable against power loss: ``sync`` fsyncs files and directories, and
``create_exclusive`` publishes a fully synced file under a name with ``link(2)``, which fails
atomically when the name exists; ``move`` links too, so it never replaces a file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ...errors import ConfigError
from ..faults import COMMIT_WRITE, fault_point
from .base import FileInfo, join_uri, tmp_name

__all__ = ["LocalStorage"]


class LocalStorage:
    """A ``file://`` root, through system calls with fsync."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        parsed = urlparse(self.root)
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"[landing] root {root!r} names the host {parsed.netloc!r}: a file:// URI with a host is "
                              f"not a local path; write root = 'file://{parsed.path or '/'}' (a mount every host "
                              "shares) or use the host's own scheme (hdfs://...)", key="root")
        self._base = Path(unquote(parsed.path))

    def uri(self, rel: str) -> str:
        return join_uri(self.root, rel)

    def _p(self, rel: str) -> Path:
        return self._base / rel if rel else self._base

    def exists(self, rel: str) -> bool:
        return self._p(rel).exists()

    def list_dir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(self._p(rel)))
        except FileNotFoundError:
            return []

    def list_files(self, rel: str) -> list[FileInfo]:
        base = self._p(rel)
        found = []
        for directory, _dirs, names in os.walk(base):
            for name in names:
                path = Path(directory) / name
                try:
                    st = path.stat()
                except FileNotFoundError:  # removed while listing
                    continue
                found.append(FileInfo(path.relative_to(base).as_posix(), st.st_size, st.st_mtime))
        return found

    def read_bytes(self, rel: str) -> bytes:
        return self._p(rel).read_bytes()

    def create_exclusive(self, rel: str, data: bytes) -> None:
        target = self._p(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._p(tmp_name(rel))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        fault_point(COMMIT_WRITE)  # a crash here leaves the hidden file (recovery removes it)
        try:
            os.link(tmp, target)  # the atomic step: fails with EEXIST if the name is taken
        finally:
            os.unlink(tmp)
        _sync_dir(target.parent)

    def move(self, src: str, dst: str) -> bool:
        source, target = self._p(src), self._p(dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except FileExistsError:
            return False
        os.unlink(source)
        return True

    def delete(self, rel: str) -> None:
        path = self._p(rel)
        if path.is_dir() and not path.is_symlink():
            _remove_tree(path)
        else:
            path.unlink(missing_ok=True)

    def mtime(self, rel: str) -> float:
        return self._p(rel).stat().st_mtime

    def parquet_rows(self, rel: str) -> int:
        import pyarrow.parquet as pq

        return int(pq.read_metadata(self._p(rel)).num_rows)

    def sync(self, files: list[str], *, contents: bool = True) -> None:
        directories: set[Path] = set()
        for rel in files:
            path = self._p(rel)
            if contents:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            directories.update(_parents_below(path.parent, self._base))
        for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
            _sync_dir(directory)


def _parents_below(directory: Path, base: Path) -> list[Path]:
    """``directory`` and its parents up to and including ``base``: a new file's entry, and the
    entries of directories Spark or a move created for it, are durable only once each is synced."""
    out = [directory]
    while directory != base and base in directory.parents:
        directory = directory.parent
        out.append(directory)
    return out


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_tree(path: Path) -> None:
    """``rm -r`` that tolerates entries vanishing underneath it (another run cleaning up)."""

    def gone_already(_func: Any, _path: str, exc: tuple[type[BaseException], BaseException, Any]) -> None:
        if not isinstance(exc[1], FileNotFoundError):
            raise exc[1]

    shutil.rmtree(path, onerror=gone_already)
