"""Durable positions of file sources: a small JSON document replaced atomically.

The write goes to a temporary file that is fsynced, renamed over the old one, and the directory
is fsynced, so a crash leaves the old or the new document, never a mix.

Exactly-once protocol (used by spool_dir and tail): before a batch ``[start, end)`` is put, the
position file records it as ``pending`` (the *intent*); after the channel commit it records
``offset = end`` (and, when the next batch is already read, that batch as the new intent, so a
busy source writes once per batch). The batch id is derived from the file identity and the range.
After a crash, a pending range is re-read and re-sent with the same batch id: if the channel
already committed it, the pipeline recognises the tag and skips it; otherwise it is stored now.
Either way every line is stored once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ...channel.fs import OsFileSystem, write_atomic
from ..errors import SourceStateError

__all__ = ["StateFile"]


class StateFile:
    """One JSON document at ``path``; ``load`` returns None when it does not exist yet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fs = OsFileSystem()
        self.writes = 0

    def load(self) -> dict[str, Any] | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise SourceStateError(str(self.path), err.strerror or str(err)) from None
        try:
            doc = json.loads(raw)
        except ValueError as err:
            raise SourceStateError(str(self.path), f"not JSON: {err}") from None
        if not isinstance(doc, dict) or doc.get("version") != 1:
            raise SourceStateError(str(self.path), "unknown format (expected version 1)")
        return doc

    def save(self, doc: dict[str, Any]) -> None:
        os.makedirs(self.path.parent, exist_ok=True)
        data = json.dumps({"version": 1, **doc}, sort_keys=True).encode()
        write_atomic(self._fs, str(self.path), data)
        self.writes += 1
