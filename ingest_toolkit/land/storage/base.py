"""The storage interface of the landing and the rules every backend shares.

A :class:`Storage` is rooted at the landing root URI and takes '/'-separated paths relative to
it. Two operations carry the exactly-once protocol (docs/landing.md):

* ``create_exclusive`` is the commit point: of two landings creating the same manifest name,
  exactly one succeeds and the other gets :class:`FileExistsError`.
* ``move`` never replaces its target: two runs finishing the same batch's moves at once cannot
  delete each other's work.

This module imports no backend: each backend module imports it.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Protocol

__all__ = ["FileInfo", "Storage", "is_tmp_name", "join_uri", "parent_of", "tmp_name"]

_TMP_NAME = re.compile(r"^\..+\.tmp-[0-9a-f]{8}$")


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


def join_uri(root: str, rel: str) -> str:
    """The URI of ``rel`` below ``root`` (``root`` itself for the empty path)."""
    return f"{root}/{rel}" if rel else root


def parent_of(rel: str) -> str:
    """The directory of ``rel`` ('' for a name at the root)."""
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def tmp_name(rel: str) -> str:
    """A hidden sibling of ``rel`` for writing it before it is published."""
    parent, _, name = rel.rpartition("/")
    hidden = f".{name}.tmp-{secrets.token_hex(4)}"
    return f"{parent}/{hidden}" if parent else hidden


def is_tmp_name(name: str) -> bool:
    """Whether a file name is one :func:`tmp_name` makes (``.<name>.tmp-<8 hex digits>``)."""
    return _TMP_NAME.match(name) is not None
