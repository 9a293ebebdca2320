"""The landing's storage through ``pyarrow.fs``: no JVM needed, so it works under Spark Connect.

See :mod:`.base` for the interface. ``create_exclusive`` checks, then moves: atomic on HDFS
through libhdfs, a copy with a race window on object stores (docs/landing.md). ``sync`` is a
no-op, as for :mod:`.hadoop`: Spark closed the files.
"""

from __future__ import annotations

from pyarrow import fs as pafs

from ..faults import COMMIT_WRITE, fault_point
from .base import FileInfo, join_uri, parent_of, tmp_name

__all__ = ["ArrowStorage"]


class ArrowStorage:
    """``pyarrow.fs`` file system for the root URI (no JVM needed)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self._fs, self._base = pafs.FileSystem.from_uri(self.root)
        self._base = self._base.rstrip("/")

    def uri(self, rel: str) -> str:
        return join_uri(self.root, rel)

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
        self._fs.create_dir(self._p(parent_of(rel)), recursive=True)
        with self._fs.open_output_stream(tmp) as stream:
            stream.write(data)
        fault_point(COMMIT_WRITE)  # a crash here leaves the hidden file (recovery removes it)
        if self.exists(rel):
            self._fs.delete_file(tmp)
            raise FileExistsError(self.uri(rel))
        self._fs.move(tmp, self._p(rel))

    def move(self, src: str, dst: str) -> bool:
        if self.exists(dst):
            return False
        self._fs.create_dir(self._p(parent_of(dst)), recursive=True)
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
