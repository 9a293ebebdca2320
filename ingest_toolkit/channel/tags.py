"""Commit tags: client batch ids remembered so that a retried batch is recognised.

A put transaction begun with ``FileChannel.transaction(tag=...)`` writes the tag into its COMMIT
frame, so the tag is durable exactly when the events are. When the commit is published the
channel records a :class:`TagRecord` in its :class:`TagStore`; checkpoints carry the store and
replay adds the tags of the COMMIT frames after the checkpoint position.

The store remembers the newest ``window`` tags committed within ``retention_ns``. A tag committed
again (a caller that did not check :meth:`FileChannel.find_tag` first) replaces its record and
becomes the newest. Records are kept in commit order, so eviction by count or age pops from the
front; ``find`` also checks the age itself, so a wall clock that stepped back cannot make an
expired tag answer.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ..errors import TransactionError

__all__ = ["MAX_TAG_BYTES", "InvalidTagError", "TagRecord", "TagStore", "check_tag"]

MAX_TAG_BYTES: Final = 128


class InvalidTagError(TransactionError, ValueError):
    """A commit tag is empty, not text, not encodable as UTF-8, or longer than 128 bytes."""


@dataclass(frozen=True, slots=True)
class TagRecord:
    """A committed, tagged put transaction: its tag, first event's seq, event count, commit time."""

    tag: str
    first_seq: int
    count: int
    commit_unix_ns: int


def check_tag(tag: object) -> str:
    """Return ``tag`` if it is a valid commit tag; raise InvalidTagError saying why not."""
    if not isinstance(tag, str):
        raise InvalidTagError(f"a commit tag must be a str, not {type(tag).__name__}")
    if not tag:
        raise InvalidTagError("a commit tag must not be empty: pass None for an untagged transaction")
    try:
        size = len(tag.encode("utf-8"))
    except UnicodeEncodeError as err:
        raise InvalidTagError(f"commit tag {tag!r} is not valid UTF-8 text ({err.reason})") from None
    if size > MAX_TAG_BYTES:
        raise InvalidTagError(f"commit tag {tag[:40]!r}... is {size} bytes in UTF-8; at most {MAX_TAG_BYTES} "
                              "are allowed: use a shorter client batch id (e.g. a UUID or a hash)")
    return tag


class TagStore:
    """The remembered tags, oldest commit first. Not thread-safe: the channel guards it.

    ``window=None`` and ``retention_ns=None`` remember everything (offline tools compare full
    histories); the channel passes its configured limits.
    """

    def __init__(self, window: int | None = None, retention_ns: int | None = None) -> None:
        self._window, self._retention = window, retention_ns
        self._records: OrderedDict[str, TagRecord] = OrderedDict()

    def add(self, record: TagRecord, now_ns: int | None = None) -> None:
        """Remember ``record`` as the newest tag; evict what falls out of the window."""
        records = self._records
        records.pop(record.tag, None)  # a tag committed again becomes the newest
        records[record.tag] = record
        if self._window is not None and len(records) > self._window:
            for _ in range(len(records) - self._window):
                records.popitem(last=False)
        self._expire(now_ns)

    def extend(self, records: Iterable[TagRecord], now_ns: int | None = None) -> None:
        """Add ``records`` in order (oldest first), as loaded from a checkpoint."""
        now_ns = now_ns if now_ns is not None else time.time_ns()
        for record in records:
            self.add(record, now_ns)

    def find(self, tag: str, now_ns: int | None = None) -> TagRecord | None:
        record = self._records.get(tag)
        if record is None or self._expired(record, now_ns or time.time_ns()):
            return None
        return record

    def remembered_since(self, now_ns: int | None = None) -> int:
        """The wall-clock time (ns since the epoch) after which every committed tag is still
        remembered: a retry of a batch first sent after it is recognised, whenever it was
        committed. The retention's cut-off, or, once the window is full, the commit time of the
        oldest remembered tag (every tag evicted for room was committed no later). 0 when
        everything is remembered; ``now_ns`` when nothing is (a window of 0)."""
        now_ns = now_ns if now_ns is not None else time.time_ns()
        since = 0 if self._retention is None else max(0, now_ns - self._retention)
        if self._window is not None and len(self._records) >= self._window:
            if not self._records:
                return now_ns
            since = max(since, next(iter(self._records.values())).commit_unix_ns)
        return since

    def records(self) -> list[TagRecord]:
        """Every remembered record, oldest commit first (a copy)."""
        return list(self._records.values())

    def as_dict(self) -> dict[str, TagRecord]:
        return dict(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def _expire(self, now_ns: int | None) -> None:
        if self._retention is None or not self._records:
            return
        now_ns = now_ns if now_ns is not None else time.time_ns()
        records = self._records
        while records and self._expired(next(iter(records.values())), now_ns):
            records.popitem(last=False)

    def _expired(self, record: TagRecord, now_ns: int) -> bool:
        return self._retention is not None and now_ns - record.commit_unix_ns > self._retention
