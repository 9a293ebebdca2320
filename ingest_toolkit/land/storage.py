"""File operations of the landing outside Spark's own write: manifests, moves, cleanup.

Two implementations of one small interface, both rooted at the landing root URI and taking
'/'-separated paths relative to it:

* :class:`HadoopStorage` calls the Hadoop ``FileSystem`` API in the driver's JVM (through
  py4j). It reaches exactly what Spark reaches (``file://``, ``hdfs://``, ``s3a://``, ``abfs://``
  ...) with the same Hadoop configuration and credentials, and assumes nothing about executors
  sharing a disk with the driver. Manifests are written with ``hsync`` before the rename.
* :class:`ArrowStorage` uses ``pyarrow.fs`` (local, HDFS through libhdfs, S3, GCS). It is the
  one that works under Spark Connect, where the client has no JVM.

``auto`` picks Hadoop when the session has a JVM. Both rely on one property of the target file
system: renaming a file is atomic (true for local file systems and HDFS; on object stores a
rename is a copy, see docs/landing.md).
"""

from __future__ import annotations

import secrets
from typing import Any, Protocol

from pyarrow import fs as pafs

__all__ = ["ArrowStorage", "HadoopStorage", "Storage", "open_storage"]


class Storage(Protocol):
    root: str

    def uri(self, rel: str) -> str: ...

    def exists(self, rel: str) -> bool: ...

    def list_dir(self, rel: str) -> list[str]: ...

    def list_files(self, rel: str) -> list[tuple[str, int]]: ...

    def read_bytes(self, rel: str) -> bytes: ...

    def write_atomic(self, rel: str, data: bytes) -> None: ...

    def move(self, src: str, dst: str) -> None: ...

    def delete(self, rel: str) -> None: ...

    def mtime(self, rel: str) -> float: ...


def open_storage(root: str, mode: str = "auto", spark: Any = None) -> Storage:
    """Storage for ``root``; ``mode`` is ``auto``, ``hadoop`` (needs a classic session) or ``arrow``."""
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


def _parent(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _tmp_name(rel: str) -> str:
    parent, _, name = rel.rpartition("/")
    return f"{parent}/.{name}.tmp-{secrets.token_hex(4)}" if parent else f".{name}.tmp-{secrets.token_hex(4)}"


class HadoopStorage:
    """Hadoop FileSystem of the driver JVM (py4j)."""

    def __init__(self, root: str, spark: Any) -> None:
        self.root = root.rstrip("/")
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()
        self._fs = self._path("").getFileSystem(self._conf)

    def uri(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _path(self, rel: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self.uri(rel))

    def exists(self, rel: str) -> bool:
        return bool(self._fs.exists(self._path(rel)))

    def list_dir(self, rel: str) -> list[str]:
        path = self._path(rel)
        if not self._fs.exists(path):
            return []
        # The whole listing in one py4j call ("{path,path,...}") instead of one call per entry
        # (py4j cannot pass a Path[] where Object[] is expected, ArrayUtils takes an Object).
        # Names with a comma are split apart and never match the names the landing looks for.
        paths = self._jvm.org.apache.hadoop.fs.FileUtil.stat2Paths(self._fs.listStatus(path))
        rendered = str(self._jvm.org.apache.commons.lang3.ArrayUtils.toString(paths))
        return [p.rsplit("/", 1)[-1] for p in rendered.strip("{}").split(",") if p]

    def list_files(self, rel: str) -> list[tuple[str, int]]:
        path = self._path(rel)
        if not self._fs.exists(path):
            return []
        base = str(self._fs.makeQualified(path).toString()).rstrip("/") + "/"
        found, files = [], self._fs.listFiles(path, True)
        while files.hasNext():
            status = files.next()
            found.append((str(status.getPath().toString()).removeprefix(base), int(status.getLen())))
        return found

    def read_bytes(self, rel: str) -> bytes:
        stream = self._fs.open(self._path(rel))
        try:
            return bytes(stream.readAllBytes())
        finally:
            stream.close()

    def write_atomic(self, rel: str, data: bytes) -> None:
        tmp = self._path(_tmp_name(rel))
        stream = self._fs.create(tmp, True)
        try:
            stream.write(bytearray(data))
            stream.hsync()
        finally:
            stream.close()
        if not self._fs.rename(tmp, self._path(rel)):
            self._fs.delete(tmp, False)
            raise OSError(f"rename to {self.uri(rel)} failed (does it exist already?)")

    def move(self, src: str, dst: str) -> None:
        target = self._path(dst)
        self._fs.mkdirs(self._path(_parent(dst)))
        if self._fs.exists(target):
            self._fs.delete(target, False)
        if not self._fs.rename(self._path(src), target):
            raise OSError(f"rename {self.uri(src)} -> {self.uri(dst)} failed")

    def delete(self, rel: str) -> None:
        self._fs.delete(self._path(rel), True)

    def mtime(self, rel: str) -> float:
        return int(self._fs.getFileStatus(self._path(rel)).getModificationTime()) / 1000.0


class ArrowStorage:
    """``pyarrow.fs`` file system for the root URI (no JVM needed)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self._fs, self._base = pafs.FileSystem.from_uri(self.root)
        self._base = self._base.rstrip("/")

    def uri(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _p(self, rel: str) -> str:
        return f"{self._base}/{rel}" if rel else self._base

    def exists(self, rel: str) -> bool:
        return bool(self._fs.get_file_info(self._p(rel)).type != pafs.FileType.NotFound)

    def list_dir(self, rel: str) -> list[str]:
        infos = self._fs.get_file_info(pafs.FileSelector(self._p(rel), allow_not_found=True))
        return [info.base_name for info in infos]

    def list_files(self, rel: str) -> list[tuple[str, int]]:
        base = self._p(rel).rstrip("/") + "/"
        infos = self._fs.get_file_info(pafs.FileSelector(self._p(rel), allow_not_found=True, recursive=True))
        return [(info.path.removeprefix(base), int(info.size)) for info in infos
                if info.type == pafs.FileType.File]

    def read_bytes(self, rel: str) -> bytes:
        with self._fs.open_input_stream(self._p(rel)) as stream:
            return bytes(stream.readall())

    def write_atomic(self, rel: str, data: bytes) -> None:
        tmp = self._p(_tmp_name(rel))
        self._fs.create_dir(self._p(_parent(rel)), recursive=True)
        with self._fs.open_output_stream(tmp) as stream:
            stream.write(data)
        self._fs.move(tmp, self._p(rel))

    def move(self, src: str, dst: str) -> None:
        self._fs.create_dir(self._p(_parent(dst)), recursive=True)
        if self.exists(dst):
            self._fs.delete_file(self._p(dst))
        self._fs.move(self._p(src), self._p(dst))

    def delete(self, rel: str) -> None:
        info = self._fs.get_file_info(self._p(rel))
        if info.type == pafs.FileType.Directory:
            self._fs.delete_dir(self._p(rel))
        elif info.type == pafs.FileType.File:
            self._fs.delete_file(self._p(rel))

    def mtime(self, rel: str) -> float:
        mtime = self._fs.get_file_info(self._p(rel)).mtime
        return float(mtime.timestamp()) if mtime is not None else 0.0
