"""PyIceberg's FileIO for ``hdfs://`` without a JVM (loaded by name: ``py-io-impl``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from pyiceberg.io.fsspec import FsspecFileIO

__all__ = ["HdfsFileIO"]


class HdfsFileIO(FsspecFileIO):
    """PyIceberg's fsspec FileIO that also reaches ``hdfs://`` (the ``hdfs.namenode`` property),
    through ``hdfs-native``: a Rust client of the HDFS protocol, no JVM and no libhdfs."""

    def __init__(self, properties: dict[str, str]) -> None:
        super().__init__(properties)
        self._scheme_to_fs["hdfs"] = _hdfs_filesystem

    def _get_fs(self, scheme: str, hostname: str | None = None) -> Any:
        if scheme == "hdfs":
            return _hdfs_filesystem(self.properties)
        return super()._get_fs(scheme, hostname)


def _hdfs_filesystem(properties: Mapping[str, str]) -> Any:
    from hdfs_native.fsspec import HdfsFileSystem

    parsed = urlparse(properties["hdfs.namenode"])
    return HdfsFileSystem(host=parsed.hostname, port=parsed.port)
