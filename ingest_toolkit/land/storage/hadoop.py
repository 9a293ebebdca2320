"""The landing's storage through the Hadoop ``FileSystem`` API of the driver's JVM (py4j).

For roots that are not local paths, with Spark's own settings and credentials: ``hdfs://``,
``s3a://``, ``abfs://`` ... (a classic session; Spark Connect has no JVM in the client: see
:mod:`.arrow`). See :mod:`.base` for the interface. What it guarantees for the two protocol
operations:

* ``create_exclusive``: :class:`HadoopStorage` writes a hidden file (``hsync``) and renames it;
  HDFS renames atomically and refuses an existing target, so of two landings exactly one wins
  (tests/hdfs proves it on a real NameNode). On a store that declares the path capability
  ``fs.option.create.conditional.overwrite`` (S3A since Hadoop 3.4.2, with
  ``fs.s3a.create.conditional.enabled``, the default) it writes the file directly with that
  option instead: the store creates it only if the name is free (S3's ``If-None-Match: *``), an
  object store's only atomic create.
* ``sync``: a no-op. Spark closed the files; on HDFS a closed file is on every replica's
  DataNode (in memory unless ``dfs.datanode.synconclose`` is true, which docs/landing.md
  recommends).
"""

from __future__ import annotations

from typing import Any

from ..faults import COMMIT_WRITE, fault_point
from ..hadoop_errors import java_causes
from .base import FileInfo, join_uri, parent_of, tmp_name

__all__ = ["HadoopStorage"]

_CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite"  # Options.CreateFileOptionKeys


def _taken(err: Exception) -> bool:
    """Whether a failed conditional create means "the name exists" (S3A: RemoteFileChangedException
    or FileAlreadyExistsException around a 412 Precondition Failed)."""
    for name, message in java_causes(err):
        if name.endswith(("RemoteFileChangedException", "FileAlreadyExistsException")) or "412" in message:
            return True
    return False


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
        return join_uri(self.root, rel)

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
            fault_point(COMMIT_WRITE)  # a crash here leaves the hidden file open (recovery removes it)
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
        self._fs.mkdirs(self._path(parent_of(dst)))
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
