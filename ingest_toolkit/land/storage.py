"""File operations of the landing outside Spark's own write: manifests, moves, syncs, cleanup.

One small interface, rooted at the landing root URI and taking '/'-separated paths relative to
it, with three implementations:

* :class:`LocalStorage` for ``file://`` roots: plain system calls, run by the driver (a
  ``file://`` root on a cluster must be a mount every host shares). It is the only one that
  makes landed files durable against power loss: ``sync`` fsyncs files and directories, and
  ``create_exclusive`` publishes a fully synced file under a name with ``link(2)``, which fails
  atomically when the name exists.
* :class:`~ingest_toolkit.land.remote_storage.HadoopStorage` calls the Hadoop ``FileSystem`` API
  in the driver's JVM (py4j): ``hdfs://``, ``s3a://``, ``abfs://`` ... with Spark's own settings.
* :class:`~ingest_toolkit.land.remote_storage.ArrowStorage` uses ``pyarrow.fs``; it works under
  Spark Connect, where the client has no JVM.

Two operations carry the exactly-once protocol (docs/landing.md):

* ``create_exclusive`` is the commit point: of two landings creating the same manifest name,
  exactly one succeeds and the other gets :class:`FileExistsError`. Atomic on local file
  systems and HDFS; a check-then-rename on object stores (see docs/landing.md).
* ``move`` never replaces its target: two runs finishing the same batch's moves at once cannot
  delete each other's work.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

__all__ = ["FileInfo", "LocalStorage", "Storage", "open_storage", "tmp_name"]


@dataclass(frozen=True)
class FileInfo:
    path: str  # relative to the listed directory
    size: int
    mtime: float  # seconds since the epoch


class Storage(Protocol):
    root: str

    def uri(self, rel: str) -> str: ...

    def exists(self, rel: str) -> bool: ...

    def list_dir(self, rel: str) -> list[str]: ...

    def list_files(self, rel: str) -> list[FileInfo]: ...

    def read_bytes(self, rel: str) -> bytes: ...

    def create_exclusive(self, rel: str, data: bytes) -> None:
        """Write ``data`` as ``rel`` if no file has that name, atomically; else FileExistsError."""

    def move(self, src: str, dst: str) -> bool:
        """Rename ``src`` to ``dst``; False (``src`` left alone) when ``dst`` exists already."""

    def delete(self, rel: str) -> None: ...

    def mtime(self, rel: str) -> float: ...

    def parquet_rows(self, rel: str) -> int:
        """Rows of a Parquet file, from its footer."""

    def sync(self, files: list[str], *, contents: bool = True) -> None:
        """Make ``files`` and the directory entries naming them durable; ``contents=False``: only
        the entries (the contents were synced under another name, e.g. before a move). A no-op
        where the file system gives no such call: see each implementation."""


def open_storage(root: str, mode: str = "auto", spark: Any = None) -> Storage:
    """Storage for ``root``; ``mode`` is ``auto``, ``hadoop`` (needs a classic session) or ``arrow``.

    A ``file://`` root always gets :class:`LocalStorage`, whatever the mode: Hadoop's local file
    system neither syncs nor refuses to rename over an existing file, and pyarrow's local file
    system is the same system calls without the syncs.
    """
    if root.startswith("file:"):
        return LocalStorage(root)
    from .remote_storage import ArrowStorage, HadoopStorage

    jvm = _jvm_of(spark) if mode != "arrow" else None
    if mode == "hadoop" and jvm is None:
        raise ValueError("storage 'hadoop' needs a classic SparkSession with a JVM (not Spark Connect); "
                         "use storage = 'arrow'")
    if jvm is not None:
        return HadoopStorage(root, spark)
    return ArrowStorage(root)


def _jvm_of(spark: Any) -> Any:
    if spark is None:
        return None
    try:
        return spark._jvm
    except Exception:  # Spark Connect sessions raise on JVM attributes
        return None


def tmp_name(rel: str) -> str:
    """A hidden sibling of ``rel`` for writing it before it is published."""
    parent, _, name = rel.rpartition("/")
    hidden = f".{name}.tmp-{secrets.token_hex(4)}"
    return f"{parent}/{hidden}" if parent else hidden


class LocalStorage:
    """A ``file://`` root, through system calls with fsync."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        parsed = urlparse(self.root)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{root!r}: a file:// URI with a host is not a local path")
        self._base = Path(unquote(parsed.path))

    def uri(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

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
