"""Directories of landed and curated tables as ``pyarrow.fs`` reaches them: local paths, ``file://``,
``hdfs://``, ``s3a://``.

Spark reads and writes the data; a :class:`Location` only lists, tests and renames directories
(the table scans of the asset checks, the curated swap), through ``pyarrow.fs`` so that the same
code works on a local disk and on HDFS (where a directory rename is atomic). A root that is not
local is reached through the Hadoop client of a Spark session's JVM when one is given
(:mod:`.hadoop_arrow`: pyarrow alone needs a native ``libhdfs`` for HDFS and knows no
``s3a://``), else through pyarrow's own file systems.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyarrow import fs as pafs

from .hadoop_arrow import hadoop_filesystem

__all__ = ["Location", "local_path", "locate"]


@dataclass(frozen=True, slots=True)
class Location:
    """A directory as Spark names it (``uri``) and as pyarrow reaches it (``fs`` + ``path``)."""

    uri: str
    fs: pafs.FileSystem
    path: str

    def child(self, *parts: str) -> Location:
        return Location("/".join([self.uri.rstrip("/"), *parts]), self.fs, "/".join([self.path.rstrip("/"), *parts]))

    def exists(self) -> bool:
        return bool(self.fs.get_file_info(self.path).type != pafs.FileType.NotFound)

    def is_dir(self) -> bool:
        return bool(self.fs.get_file_info(self.path).type == pafs.FileType.Directory)

    def subdirs(self) -> list[str]:
        """Names of the directories directly below (none when this is not a directory)."""
        if not self.is_dir():
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=False))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def files(self, suffix: str = ".parquet") -> list[str]:
        """Paths (for pyarrow) of the data files below, hidden and staging entries skipped."""
        if not self.is_dir():
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True))
        return sorted(i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(suffix)
                      and not any(part.startswith(("_", ".")) for part in i.path[len(self.path):].split("/")))


def locate(root: str, spark: Any = None) -> Location:
    """A :class:`Location` for a local path (relative to the current directory) or a URI; a
    non-local URI goes through ``spark``'s Hadoop client when a classic session is given."""
    if "://" in root and not root.startswith("file:") and getattr(spark, "_jsc", None) is not None:
        filesystem, path = hadoop_filesystem(root, spark)
        return Location(root, filesystem, path)
    if "://" in root:
        filesystem, path = pafs.FileSystem.from_uri(root)
        return Location(root, filesystem, path)
    path = os.path.abspath(root)
    # Spark gets a file:// URI: a bare path would mean the cluster's default file system.
    return Location(Path(path).as_uri(), pafs.LocalFileSystem(), path)


def local_path(uri: str) -> Path | None:
    """The local directory a path or ``file://`` URI names; None for other schemes."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(parsed.path).resolve()
    if "://" in uri:
        return None
    return Path(uri).resolve()
