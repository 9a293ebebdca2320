"""Listing the files under a table's location, on every storage the table layer reaches (the
Iceberg retention job's search for files no snapshot references: PyIceberg's FileIO reads,
writes and deletes, but does not list).

* ``file://`` or a path: ``os.walk``;
* ``hdfs://``: ``hdfs-native`` (the Rust HDFS client the tables already use, no JVM);
* ``s3://``: ``pyarrow.fs.S3FileSystem`` with the endpoint and keys of :class:`~.io.TableIO`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse

from .io import TableIO

__all__ = ["StoredFile", "list_files"]


@dataclass(frozen=True)
class StoredFile:
    """A file as the storage lists it: its URI (spelled as the table's locations are), size and
    modification time (epoch milliseconds)."""

    uri: str
    bytes: int
    modified_ms: int


def list_files(io: TableIO, location: str) -> list[StoredFile]:
    """Every file below ``location`` (a URI or path of the table, spelled as its library spells
    it); none when it does not exist."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return _local(parsed.path if parsed.scheme else location, "file://" if parsed.scheme else "")
    if parsed.scheme == "hdfs":
        return _hdfs(location)
    if parsed.scheme in ("s3", "s3a"):
        return _s3(io, parsed.netloc, parsed.path, parsed.scheme)
    raise ValueError(f"cannot list {location}: not a file://, hdfs:// or s3:// location")


def _local(root: str, prefix: str) -> list[StoredFile]:
    found = []
    for directory, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                continue  # deleted while we listed
            found.append(StoredFile(f"{prefix}{path}", stat.st_size, int(stat.st_mtime * 1000)))
    return found


def _hdfs(location: str) -> list[StoredFile]:
    from hdfs_native import Client

    parsed = urlparse(location)
    namenode = f"hdfs://{parsed.netloc}"
    try:
        statuses = list(Client(namenode).list_status(parsed.path, True))
    except FileNotFoundError:
        return []
    return [StoredFile(f"{namenode}{s.path}", s.length, s.modification_time) for s in statuses if not s.isdir]


def _s3(io: TableIO, bucket: str, path: str, scheme: str) -> list[StoredFile]:
    from pyarrow import fs as pafs

    options = io.delta_options
    endpoint = options.get("AWS_ENDPOINT_URL", "")
    filesystem = pafs.S3FileSystem(
        access_key=options.get("AWS_ACCESS_KEY_ID"), secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
        region=options.get("AWS_REGION") or None, endpoint_override=endpoint.split("://", 1)[-1] or None,
        scheme="http" if endpoint.startswith("http://") else "https")
    infos = filesystem.get_file_info(pafs.FileSelector(f"{bucket}{path}", recursive=True, allow_not_found=True))
    return [StoredFile(f"{scheme}://{i.path}", i.size or 0, int(i.mtime.timestamp() * 1000) if i.mtime else 0)
            for i in infos if i.type == pafs.FileType.File]
