"""A ``pyarrow.fs`` file system over the Hadoop ``FileSystem`` of a Spark session's JVM.

pyarrow reaches HDFS only through ``libhdfs`` (a native library of a Hadoop installation, not
in PySpark), and knows no ``s3a://``. Code that reads and renames with pyarrow (the table scans
of the asset checks, the curated swap) gets, for any root that is not a local path,
:func:`hadoop_filesystem`: a :class:`pyarrow.fs.PyFileSystem` whose calls go through py4j to
the Hadoop client Spark itself writes with (same settings, same credentials, any scheme on
Spark's classpath). Paths are the URI's path (``/landing/events``); reads are ranged (a Parquet
footer and one column chunk, not the whole file).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
from pyarrow import fs as pafs

__all__ = ["HadoopFsHandler", "hadoop_filesystem"]


def hadoop_filesystem(uri: str, spark: Any) -> tuple[pafs.FileSystem, str]:
    """``(file system, path)`` for ``uri`` through ``spark``'s JVM (a classic session)."""
    parsed = urlparse(uri)
    handler = HadoopFsHandler(f"{parsed.scheme}://{parsed.netloc}", spark)
    return pafs.PyFileSystem(handler), parsed.path.rstrip("/") or "/"


class HadoopFsHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """The :class:`pyarrow.fs.FileSystemHandler` protocol on one Hadoop file system
    (``scheme://authority``); see the module docstring."""

    def __init__(self, authority: str, spark: Any) -> None:
        self.authority = authority.rstrip("/")
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()
        self._fs = self._path("/").getFileSystem(self._conf)

    def _path(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self.authority + "/" + path.lstrip("/"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HadoopFsHandler) and other.authority == self.authority

    def __ne__(self, other: object) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return "hadoop"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [self._info(path) for path in paths]

    def _info(self, path: str) -> pafs.FileInfo:
        if not self._fs.exists(self._path(path)):
            return pafs.FileInfo(path, pafs.FileType.NotFound)
        return self._from_status(path, self._fs.getFileStatus(self._path(path)))

    def _from_status(self, path: str, status: Any) -> pafs.FileInfo:
        mtime = int(status.getModificationTime()) / 1000.0
        if status.isDirectory():
            return pafs.FileInfo(path, pafs.FileType.Directory, mtime=mtime)
        return pafs.FileInfo(path, pafs.FileType.File, size=int(status.getLen()), mtime=mtime)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        base = selector.base_dir.rstrip("/") or "/"
        if not self._fs.exists(self._path(base)):
            if selector.allow_not_found:
                return []
            raise FileNotFoundError(f"{self.authority}{base}")
        found: list[pafs.FileInfo] = []
        pending = [base]
        while pending:
            directory = pending.pop()
            for status in self._fs.listStatus(self._path(directory)):
                child = f"{directory.rstrip('/')}/{status.getPath().getName()}"
                found.append(self._from_status(child, status))
                if selector.recursive and status.isDirectory():
                    pending.append(child)
        return found

    def create_dir(self, path: str, recursive: bool) -> None:
        self._fs.mkdirs(self._path(path))

    def delete_dir(self, path: str) -> None:
        self._fs.delete(self._path(path), True)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        if not self._fs.exists(self._path(path)):
            if missing_dir_ok:
                return
            raise FileNotFoundError(f"{self.authority}{path}")
        for status in self._fs.listStatus(self._path(path)):
            self._fs.delete(status.getPath(), True)

    def delete_root_dir_contents(self) -> None:
        raise OSError(f"refusing to delete everything under {self.authority}/")

    def delete_file(self, path: str) -> None:
        self._fs.delete(self._path(path), False)

    def move(self, src: str, dest: str) -> None:
        """A Hadoop rename; it returns False (never replacing a file on HDFS) instead of raising."""
        if not self._fs.rename(self._path(src), self._path(dest)):
            raise OSError(f"renaming {self.authority}{src} to {self.authority}{dest} failed (the source is missing "
                          "or the target exists)")

    def copy_file(self, src: str, dest: str) -> None:
        util = self._jvm.org.apache.hadoop.fs.FileUtil
        if not util.copy(self._fs, self._path(src), self._fs, self._path(dest), False, self._conf):
            raise OSError(f"copying {self.authority}{src} to {self.authority}{dest} failed")

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        """A missing file raises FileNotFoundError, as pyarrow's own file systems do (Hadoop's
        FileNotFoundException reached the caller as a py4j error, which readers of optional
        files, like the curated table's ``_schema.json``, do not expect)."""
        if not self._fs.exists(self._path(path)):
            raise FileNotFoundError(f"{self.authority}{path}")
        status = self._fs.getFileStatus(self._path(path))
        return pa.PythonFile(_JavaInput(self._fs.open(self._path(path)), int(status.getLen())), mode="r")

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return pa.PythonFile(_JavaOutput(self._fs.create(self._path(path), True)), mode="w")

    def open_append_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return pa.PythonFile(_JavaOutput(self._fs.append(self._path(path))), mode="w")


class _JavaInput:
    """A seekable binary file over an ``FSDataInputStream`` (positioned reads through py4j)."""

    def __init__(self, stream: Any, size: int) -> None:
        self._stream, self._size, self._pos, self.closed = stream, size, 0, False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = {0: 0, 1: self._pos, 2: self._size}[whence] + offset
        return self._pos

    def read(self, n: int = -1) -> bytes:
        n = self._size - self._pos if n is None or n < 0 else min(n, self._size - self._pos)
        if n <= 0:
            return b""
        self._stream.seek(self._pos)
        data = bytes(self._stream.readNBytes(n))
        self._pos += len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
            self.closed = True


class _JavaOutput:
    """A binary output file over an ``FSDataOutputStream``."""

    def __init__(self, stream: Any) -> None:
        self._stream, self._pos, self.closed = stream, 0, False

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def write(self, data: bytes) -> int:
        self._stream.write(bytearray(data))
        self._pos += len(data)
        return len(data)

    def flush(self) -> None:
        self._stream.hflush()

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
            self.closed = True
