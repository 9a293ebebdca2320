"""Landing storage for roots that are not local paths: Hadoop FileSystem (driver JVM) or pyarrow.fs.

See :mod:`ingest_toolkit.land.storage` for the interface. What each backend guarantees for the
two protocol operations:

* ``create_exclusive``: :class:`HadoopStorage` writes a hidden file (``hsync``) and renames it;
  HDFS renames atomically and refuses an existing target, so of two landings exactly one wins
  (tests/hdfs proves it on a real NameNode). On a store that declares the path capability
  ``fs.option.create.conditional.overwrite`` (S3A since Hadoop 3.4.2, with
  ``fs.s3a.create.conditional.enabled``, the default) it writes the file directly with that
  option instead: the store creates it only if the name is free (S3's ``If-None-Match: *``), an
  object store's only atomic create. :class:`ArrowStorage` checks, then moves: atomic on HDFS
  through libhdfs, a copy with a race window on object stores (docs/landing.md).
* ``sync``: a no-op. Spark closed the files; on HDFS a closed file is on every replica's
  DataNode (in memory unless ``dfs.datanode.synconclose`` is true, which docs/landing.md
  recommends).
"""

from __future__ import annotations

from typing import Any

from pyarrow import fs as pafs

from .storage import FileInfo, tmp_name

__all__ = ["ArrowStorage", "HadoopStorage"]

_CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite"  # Options.CreateFileOptionKeys


def _taken(err: Exception) -> bool:
    """Whether a failed conditional create means "the name exists" (S3A: RemoteFileChangedException
    or FileAlreadyExistsException around a 412 Precondition Failed)."""
    from .hadoop_errors import java_causes

    for name, message in java_causes(err):
        if name.endswith(("RemoteFileChangedException", "FileAlreadyExistsException")) or "412" in message:
            return True
    return False


def _parent(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


class HadoopStorage:
    """Hadoop FileSystem of the driver JVM (py4j)."""

    def __init__(self, root: str, spark: Any) -> None:
        self.root = root.rstrip("/")
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()
        self._fs = self._path("").getFileSystem(self._conf)
        self._conditional: bool | None = None  # whether the store creates a file only if absent

    def conditional_create(self) -> bool:
        """Whether the store refuses, atomically, to create a file whose name exists (S3A with
        conditional writes); asked once (the answer does not change)."""
        if self._conditional is None:
            try:
                self._conditional = bool(self._fs.hasPathCapability(self._path(""), _CONDITIONAL_CREATE))
            except Exception:  # a FileSystem that cannot answer (older client): the rename path
                self._conditional = False
        return self._conditional

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
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]

        statuses = self._fs.listStatus(path)
        try:
            paths = self._jvm.org.apache.hadoop.fs.FileUtil.stat2Paths(statuses)
        except Py4JError:  # an array of a FileStatus subclass (S3AFileStatus[]): one call per entry
            return sorted(str(status.getPath().getName()) for status in statuses)
        rendered = str(self._jvm.org.apache.commons.lang3.ArrayUtils.toString(paths))
        return sorted(p.rsplit("/", 1)[-1] for p in rendered.strip("{}").split(",") if p)

    def list_files(self, rel: str) -> list[FileInfo]:
        path = self._path(rel)
        if not self._fs.exists(path):
            return []
        base = str(self._fs.makeQualified(path).toString()).rstrip("/") + "/"
        found, files = [], self._fs.listFiles(path, True)
        while files.hasNext():
            status = files.next()
            found.append(FileInfo(str(status.getPath().toString()).removeprefix(base), int(status.getLen()),
                                  int(status.getModificationTime()) / 1000.0))
        return found

    def read_bytes(self, rel: str) -> bytes:
        stream = self._fs.open(self._path(rel))
        try:
            return bytes(stream.readAllBytes())
        finally:
            stream.close()

    def create_exclusive(self, rel: str, data: bytes) -> None:
        target = self._path(rel)
        if self._fs.exists(target):
            raise FileExistsError(self.uri(rel))
        if self.conditional_create():
            self._create_if_absent(rel, data)
            return
        tmp = self._path(tmp_name(rel))
        stream = self._fs.create(tmp, False)
        try:
            stream.write(bytearray(data))
            stream.hsync()
        finally:
            stream.close()
        if self._rename(tmp, target):
            return
        self._fs.delete(tmp, False)
        if self._fs.exists(target):
            raise FileExistsError(self.uri(rel))
        raise OSError(f"renaming a new manifest to {self.uri(rel)} failed")

    def _create_if_absent(self, rel: str, data: bytes) -> None:
        """Write ``rel`` with the conditional-create option: the store makes the object visible
        at close only if no object has that name (S3: ``If-None-Match: *``, 412 otherwise)."""
        from py4j.protocol import Py4JJavaError

        builder = self._fs.createFile(self._path(rel))
        builder.must(_CONDITIONAL_CREATE, True)
        try:
            stream = builder.build()
            try:
                stream.write(bytearray(data))
            finally:
                stream.close()
        except Py4JJavaError as err:
            if _taken(err):
                raise FileExistsError(self.uri(rel)) from err
            raise

    def move(self, src: str, dst: str) -> bool:
        target = self._path(dst)
        if self._fs.exists(target):
            return False
        self._fs.mkdirs(self._path(_parent(dst)))
        if self._rename(self._path(src), target):
            return True
        if self._fs.exists(target):
            return False
        raise OSError(f"rename {self.uri(src)} -> {self.uri(dst)} failed")

    def _rename(self, src: Any, dst: Any) -> bool:
        """Hadoop's rename: False (or FileAlreadyExistsException on some file systems) when the
        target exists; HDFS never replaces a file."""
        from py4j.protocol import Py4JJavaError

        try:
            return bool(self._fs.rename(src, dst))
        except Py4JJavaError as err:
            name = str(err.java_exception.getClass().getName())
            if "FileAlreadyExistsException" in name or "FileNotFoundException" in name:
                return False  # as HDFS answers: the caller checks the target (moved by another run?)
            raise

    def delete(self, rel: str) -> None:
        self._fs.delete(self._path(rel), True)

    def mtime(self, rel: str) -> float:
        return int(self._fs.getFileStatus(self._path(rel)).getModificationTime()) / 1000.0

    def parquet_rows(self, rel: str) -> int:
        parquet = self._jvm.org.apache.parquet.hadoop
        reader = parquet.ParquetFileReader.open(parquet.util.HadoopInputFile.fromPath(self._path(rel), self._conf))
        try:
            return int(reader.getRecordCount())
        finally:
            reader.close()

    def sync(self, files: list[str], *, contents: bool = True) -> None:
        """Nothing to do: see the module docstring."""


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
        return sorted(info.base_name for info in infos)

    def list_files(self, rel: str) -> list[FileInfo]:
        base = self._p(rel).rstrip("/") + "/"
        infos = self._fs.get_file_info(pafs.FileSelector(self._p(rel), allow_not_found=True, recursive=True))
        return [FileInfo(info.path.removeprefix(base), int(info.size),
                         info.mtime.timestamp() if info.mtime is not None else 0.0)
                for info in infos if info.type == pafs.FileType.File]

    def read_bytes(self, rel: str) -> bytes:
        with self._fs.open_input_stream(self._p(rel)) as stream:
            return bytes(stream.readall())

    def create_exclusive(self, rel: str, data: bytes) -> None:
        if self.exists(rel):
            raise FileExistsError(self.uri(rel))
        tmp = self._p(tmp_name(rel))
        self._fs.create_dir(self._p(_parent(rel)), recursive=True)
        with self._fs.open_output_stream(tmp) as stream:
            stream.write(data)
        if self.exists(rel):
            self._fs.delete_file(tmp)
            raise FileExistsError(self.uri(rel))
        self._fs.move(tmp, self._p(rel))

    def move(self, src: str, dst: str) -> bool:
        if self.exists(dst):
            return False
        self._fs.create_dir(self._p(_parent(dst)), recursive=True)
        self._fs.move(self._p(src), self._p(dst))
        return True

    def delete(self, rel: str) -> None:
        info = self._fs.get_file_info(self._p(rel))
        if info.type == pafs.FileType.Directory:
            self._fs.delete_dir(self._p(rel))
        elif info.type == pafs.FileType.File:
            self._fs.delete_file(self._p(rel))

    def mtime(self, rel: str) -> float:
        mtime = self._fs.get_file_info(self._p(rel)).mtime
        return float(mtime.timestamp()) if mtime is not None else 0.0

    def parquet_rows(self, rel: str) -> int:
        import pyarrow.parquet as pq

        with self._fs.open_input_file(self._p(rel)) as stream:
            return int(pq.read_metadata(stream).num_rows)

    def sync(self, files: list[str], *, contents: bool = True) -> None:
        """Nothing to do: see the module docstring."""
