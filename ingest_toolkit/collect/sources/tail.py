"""Tail source: follows growing files (glob patterns) across rotation, exactly once.

* Only complete lines are delivered; a partial last line waits for its newline. When a file
  that was rotated away (or deleted) has not grown for ``rotate_grace`` seconds, its partial
  last line is delivered as it is and the file is closed.
* Rotation by rename: the old inode stays open and is read to its end before the file that now
  has the name (files are read in the order they were first seen). Files are tracked by
  (device, inode), so a rotated file still matched by a pattern (``app.log*``) just continues.
* Truncation (size below the position; copytruncate), or first bytes that no longer match the
  recorded fingerprint: the file is read again from offset 0 as a new *generation*.
* Positions are durable (tracker.py protocol): batch id ``<source>:<generation>:<start>-<end>``
  where the generation is a random id given to each (inode, content) the source starts reading,
  so a truncated and rewritten file, or a reused inode, never collides with an old batch id.

Symlinks are not followed (``O_NOFOLLOW``): point the patterns at the real files.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import logging
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ...channel import Event
from ..errors import OversizedLineError, RefusedFileError
from ..pipeline import Pipeline
from .base import Counters, PollingWorker, SourceSettings, SourceStopped, make_batch_id, put_until_committed
from .files import open_nofollow, read_range
from .lines import LineSplitter, Oversized
from .tracker import StateFile

__all__ = ["TailSettings", "TailSource"]

log = logging.getLogger("ingest_toolkit.collect.tail")

MiB = 1 << 20
FINGERPRINT_BYTES = 1024


class TailSettings(SourceSettings):
    type: Literal["tail"]
    paths: list[str] = Field(min_length=1)
    batch_size: int = Field(default=1000, ge=1)
    batch_bytes: int = Field(default=4 * MiB, ge=1)
    max_event_bytes: int = Field(default=1 * MiB, ge=1)
    oversized: Oversized = "split"
    start_at: Literal["beginning", "end"] = "beginning"
    rotate_grace: float = Field(default=2.0, ge=0)
    path_header: str | None = None
    poll_interval: float = Field(default=0.25, gt=0)
    max_backoff: float = Field(default=5.0, gt=0)


@dataclass
class _File:
    fd: int
    dev: int
    ino: int
    path: str | None  # None once no pattern matches it any more (rotated away or deleted)
    generation: str
    offset: int = 0
    pending: tuple[int, int] | None = None
    fingerprint: str = ""
    fingerprint_len: int = 0
    order: int = 0
    gone_since: float | None = None
    last_path: str = ""
    grew_at: float = field(default_factory=time.monotonic)
    stuck: bool = False  # an oversized line under oversized = "fail"

    @property
    def key(self) -> str:
        return f"{self.dev}.{self.ino}"

    def to_doc(self) -> dict[str, Any]:
        return {"path": self.last_path, "generation": self.generation, "offset": self.offset,
                "pending": list(self.pending) if self.pending else None,
                "fingerprint": self.fingerprint, "fingerprint_len": self.fingerprint_len}


def _fingerprint(fd: int, length: int) -> str:
    return hashlib.sha256(os.pread(fd, length, 0)).hexdigest() if length else ""


class TailSource:
    """Follows the files matching ``settings.paths``; one worker thread."""

    def __init__(self, name: str, settings: TailSettings, pipeline: Pipeline, *, state_dir: Path) -> None:
        self.name, self.settings, self.pipeline = name, settings, pipeline
        self._state = StateFile(Path(state_dir) / "tail.json")
        self._saved: dict[str, dict[str, Any]] | None = None  # positions from the last run
        self._files: dict[str, _File] = {}
        self._order = itertools.count()
        self._refused: set[str] = set()
        self._first_run = False
        self.counters = Counters("events", "batches", "bytes", "duplicates", "retries", "errors",
                                 "rotations", "truncations", "files_refused", "oversized")
        self.crash_hook: Callable[[str], None] | None = None
        self._worker = PollingWorker(name, self.poll, poll_interval=settings.poll_interval, log=log,
                                     counters=self.counters)
        self._stop = self._worker.stop_event  # watched by the backoff waits of a batch

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._load()
        self._worker.start()

    def stop(self, timeout: float = 10.0) -> None:
        if not self._worker.stop(timeout):
            return
        for f in self._files.values():
            os.close(f.fd)
        self._files.clear()
        self._saved = None

    def stats(self) -> dict[str, Any]:
        lag = 0
        for f in list(self._files.values()):
            try:
                lag += max(os.fstat(f.fd).st_size - f.offset, 0)
            except OSError:
                pass
        return {**self.counters.snapshot(), "running": self._worker.running, "files": len(self._files),
                "lag_bytes": lag,
                "position_writes": self._state.writes}

    def _load(self) -> None:
        if self._saved is None:
            doc = self._state.load()
            self._first_run = doc is None
            self._saved = dict(doc["files"]) if doc else {}

    def _save(self) -> None:
        self._state.save({"files": {f.key: f.to_doc() for f in self._files.values()}})

    # -- one poll -------------------------------------------------------------------------
    def poll(self) -> bool:
        """Discover files, read every tracked file to its end; True if anything was delivered."""
        self._load()
        self._discover()
        busy = False
        for f in sorted(self._files.values(), key=lambda f: f.order):
            if self._stop.is_set():
                raise SourceStopped(self.name)
            if f.stuck:
                continue
            try:
                busy |= self._follow(f)
            except OversizedLineError as err:  # oversized = "fail"
                f.stuck = True
                self.counters.add(errors=1)
                log.error("source %s: %s: %s; this file is no longer followed until the source restarts",
                          self.name, f.last_path, err)
        self._forget_saved()
        return busy

    def _discover(self) -> None:
        seen: set[str] = set()
        for pattern in self.settings.paths:
            for path in sorted(glob.glob(pattern)):
                key = self._track(path)
                if key is not None:
                    seen.add(key)
        now = time.monotonic()
        for f in self._files.values():
            if f.key not in seen and f.gone_since is None:
                f.path, f.gone_since = None, now
                self.counters.add(rotations=1)
                log.info("source %s: %s was rotated away or deleted; reading it to its end", self.name,
                         f.last_path)

    def _track(self, path: str) -> str | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        key = f"{st.st_dev}.{st.st_ino}"
        if key in self._files:
            f = self._files[key]
            f.path, f.last_path, f.gone_since = path, path, None
            return key
        if not stat.S_ISREG(st.st_mode):
            if stat.S_ISLNK(st.st_mode) and path not in self._refused:
                self._refused.add(path)
                self.counters.add(files_refused=1)
                log.error("source %s: refusing %s: it is a symbolic link (links are never followed)",
                          self.name, path)
            return None
        try:
            fd, st = open_nofollow(path, allow_links=True)
        except (RefusedFileError, FileNotFoundError):
            return None
        f = self._open_state(fd, st, path)
        self._files[f.key] = f
        return f.key

    def _open_state(self, fd: int, st: os.stat_result, path: str) -> _File:
        f = _File(fd, st.st_dev, st.st_ino, path, uuid.uuid4().hex[:12], order=next(self._order), last_path=path)
        saved = (self._saved or {}).pop(f.key, None)
        if saved is not None and self._resumable(f, saved, st.st_size):
            f.generation, f.offset = saved["generation"], int(saved["offset"])
            pending = saved.get("pending")
            f.pending = (int(pending[0]), int(pending[1])) if pending else None
            f.fingerprint, f.fingerprint_len = saved["fingerprint"], int(saved["fingerprint_len"])
        elif self._first_run and self.settings.start_at == "end":
            f.offset = st.st_size
            self._update_fingerprint(f)
        return f

    def _resumable(self, f: _File, saved: dict[str, Any], size: int) -> bool:
        length = int(saved.get("fingerprint_len", 0))
        if size < int(saved.get("offset", 0)) or _fingerprint(f.fd, length) != saved.get("fingerprint"):
            log.warning("source %s: %s is not the file read before (truncated or replaced); reading it "
                        "from the start", self.name, f.path)
            return False
        return True

    def _forget_saved(self) -> None:
        if self._saved:
            for key, doc in self._saved.items():
                log.warning("source %s: %s (%s) is no longer matched by any pattern; lines written to it "
                            "after offset %s are not read", self.name, doc.get("path"), key, doc.get("offset"))
            self._saved.clear()
        self._first_run = False

    # -- one file -------------------------------------------------------------------------
    def _follow(self, f: _File) -> bool:
        size = os.fstat(f.fd).st_size
        self._check_truncation(f, size)
        delivered = self._deliver(f, size, final=False)
        if delivered:
            f.grew_at = time.monotonic()
        if f.gone_since is not None and time.monotonic() - max(f.gone_since, f.grew_at) >= self.settings.rotate_grace:
            self._deliver(f, os.fstat(f.fd).st_size, final=True)  # its partial last line, if any
            os.close(f.fd)
            del self._files[f.key]
            self._save()
        return delivered

    def _check_truncation(self, f: _File, size: int) -> None:
        """Size below the position, or changed first bytes: the file was truncated or rewritten."""
        if size >= f.offset and _fingerprint(f.fd, f.fingerprint_len) == f.fingerprint:
            return
        self.counters.add(truncations=1)
        log.warning("source %s: %s was truncated or rewritten (size %d, position %d); reading it again "
                    "from the start", self.name, f.last_path, size, f.offset)
        f.generation, f.offset, f.pending = uuid.uuid4().hex[:12], 0, None
        f.fingerprint, f.fingerprint_len = "", 0

    def _deliver(self, f: _File, size: int, *, final: bool) -> bool:
        if f.pending is not None and f.pending[1] > size:
            f.pending = None  # the range is gone (truncated): whatever was committed stays
        batches = self._batches(f, f.pending[1] if f.pending else f.offset, size, final)
        current = self._exact(f, *f.pending) if f.pending else next(batches, None)
        if current is None:
            return False
        if f.pending is None:
            f.pending = (current[1], current[2])
            self._save()
        while current is not None:
            self._put(f, *current)
            self._hook("after_commit")
            f.offset, f.pending = current[2], None
            try:
                following = next(batches, None) if not self._stop.is_set() else None
            except OversizedLineError:
                self._save()
                raise
            f.pending = (following[1], following[2]) if following else None
            self._update_fingerprint(f)
            self._save()
            current = following
        return True

    def _update_fingerprint(self, f: _File) -> None:
        length = min(f.offset, FINGERPRINT_BYTES)
        if length > f.fingerprint_len:
            f.fingerprint, f.fingerprint_len = _fingerprint(f.fd, length), length

    def _hook(self, point: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(point)

    def _put(self, f: _File, events: list[Event], start: int, end: int) -> None:
        batch_id = make_batch_id(self.name, f.generation, f"{start}-{end}")
        result = put_until_committed(self.pipeline, events, batch_id, stop=self._stop, log=log,
                                     counters=self.counters, max_backoff=self.settings.max_backoff)
        self.counters.add(batches=1, duplicates=int(result.duplicate),
                          events=0 if result.duplicate else len(events),
                          bytes=0 if result.duplicate else sum(len(e.body) for e in events))

    def _batches(self, f: _File, start: int, end: int, final: bool,
                 whole: bool = False) -> Iterator[tuple[list[Event], int, int]]:
        s = self.settings
        limit, limit_bytes = (1 << 62, 1 << 62) if whole else (s.batch_size, s.batch_bytes)
        splitter = LineSplitter(start, s.max_event_bytes, s.oversized)
        headers = {s.path_header: f.last_path} if s.path_header else {}
        events: list[Event] = []
        size, first, last = 0, start, start

        def pieces() -> Iterator[Any]:
            for _, data in read_range(f.fd, start, end):
                yield from splitter.feed(data)
            if final:
                yield from splitter.flush()

        try:
            for piece in pieces():
                if piece.oversized:
                    self.counters.add(oversized=1)
                events.append(Event(piece.body, dict(headers)))
                size, last = size + len(piece.body), piece.end
                if len(events) >= limit or size >= limit_bytes:
                    yield events, first, last
                    events, size, first = [], 0, last
        except OversizedLineError:
            if events:  # the lines before the oversized one still go out
                yield events, first, last
            raise
        if events:
            yield events, first, last

    def _exact(self, f: _File, start: int, end: int) -> tuple[list[Event], int, int]:
        batch = next(self._batches(f, start, end, True, whole=True), None)
        return batch if batch is not None else ([], start, end)
