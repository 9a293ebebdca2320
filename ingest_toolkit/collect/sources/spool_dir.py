"""Spooling-directory source: ingests complete files dropped into a directory, exactly once.

Drop-then-rename convention: a writer creates the file under an ignored name (a hidden
``.name.tmp``, or any name ending in an ``ignore_suffixes`` entry), writes and closes it, then
renames it to its final name in the same directory (rename is atomic within a filesystem). Every
file under a non-ignored name is taken to be complete and must not change afterwards.

Per file: open without following links (see files.py); identity = (device, inode, size, mtime_ns)
at pickup plus a BLAKE2b-64 digest of the whole content (see FileIdentity: the same file always
gets the same identity, a new file on a reused inode a different one); optionally check the whole
file first (decoding and oversized lines, when their policy is ``fail``/``skip-file``) so that a
bad file delivers nothing; then deliver it in batches of up to ``batch_size`` events, each one put
transaction per channel with batch id ``<source>:<dev>.<ino>.<size>.<mtime_ns>.<digest>:<start>-<end>``,
the position recorded durably after each commit (protocol in tracker.py); finally rename it with
``completed_suffix`` or delete it.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...channel import Event
from ...errors import ConfigError
from ..errors import OversizedLineError, RefusedFileError
from ..pipeline import Pipeline
from .base import Counters, PollingWorker, SourceStopped, make_batch_id, put_until_committed
from .files import FileIdentity, content_digest, open_dir, open_nofollow, read_range
from .lines import ChunkSplitter, LineSplitter, Oversized, Piece, longest_line
from .spool_settings import SpoolDirSettings
from .tracker import StateFile

__all__ = ["SpoolDirSettings", "SpoolDirSource"]

log = logging.getLogger("ingest_toolkit.collect.spool_dir")

class _Batch:
    __slots__ = ("end", "events", "start")

    def __init__(self, events: list[Event], start: int, end: int) -> None:
        self.events, self.start, self.end = events, start, end


class SpoolDirSource:
    """Ingests every complete file in ``settings.dir``; one worker thread, files in mtime order."""

    def __init__(self, name: str, settings: SpoolDirSettings, pipeline: Pipeline, *, state_dir: Path) -> None:
        self.name, self.settings, self.pipeline = name, settings, pipeline
        self._state = StateFile(Path(state_dir) / "spool_dir.json")
        self._doc: dict[str, Any] = {}
        self._dir_fd = -1
        self._ignore = re.compile(settings.ignore_pattern) if settings.ignore_pattern else None
        self._suffixes = (*settings.ignore_suffixes, settings.completed_suffix, settings.failed_suffix)
        self._passed_over: dict[str, tuple[int, ...] | None] = {}  # refused or skipped (stat identity), logged once
        self._backlog = 0
        self._current = ""  # name of the file being read
        self._replace = settings.decode_errors == "replace"
        self._transcode = codecs.lookup(settings.encoding).name != "utf-8"
        self.counters = Counters("events", "batches", "bytes", "duplicates", "retries", "errors",
                                 "files_completed", "files_failed", "files_skipped", "files_refused",
                                 "files_modified", "oversized", "decode_replaced")
        self.crash_hook: Callable[[str], None] | None = None  # tests: fault injection points
        self._worker = PollingWorker(name, self.poll, poll_interval=settings.poll_interval, log=log,
                                     counters=self.counters)
        self._stop = self._worker.stop_event  # watched by the backoff waits of a batch

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._open()
        self._worker.start()

    def stop(self, timeout: float = 10.0) -> None:
        if not self._worker.stop(timeout):
            return
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def stats(self) -> dict[str, Any]:
        return {**self.counters.snapshot(), "running": self._worker.running, "pending_files": self._backlog,
                "current_file": self._doc.get("file"), "position_writes": self._state.writes}

    def _open(self) -> None:
        if self._dir_fd >= 0:
            return
        self._doc = self._state.load() or {}
        if self._doc.get("file") is not None and "digest" not in self._doc:
            log.warning("source %s: the position file names %s without a content digest (written by an older "
                        "version); that file is read again from its start if it is still there", self.name,
                        self._doc["file"])
        try:
            self._dir_fd = open_dir(str(self.settings.dir))
        except OSError as err:
            raise ConfigError(f"spool directory {self.settings.dir} cannot be opened: {err.strerror}",
                              key=f"sources.{self.name}.dir") from None

    # -- one poll -------------------------------------------------------------------------
    def poll(self) -> bool:
        """Ingest every ready file once; returns False (the worker then waits poll_interval)."""
        self._open()
        names = self._candidates()
        self._backlog = len(names)
        for name in names:
            if self._stop.is_set():
                raise SourceStopped(name)
            self._ingest(name)
            self._backlog -= 1
        return False

    def _ignored(self, name: str) -> bool:
        return (name.startswith(".") or name.endswith(self._suffixes)
                or (self._ignore is not None and self._ignore.search(name) is not None))

    def _candidates(self) -> list[str]:
        found: list[tuple[bool, int, str]] = []
        with os.scandir(self._dir_fd) as entries:
            for entry in entries:
                if self._ignored(entry.name):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    self._pass_over(entry.name, None, "it is a symbolic link (links are never followed)")
                elif stat.S_ISREG(st.st_mode):  # subdirectories and special files are ignored
                    # a file interrupted by a stop or crash is finished first (found by identity)
                    first = self._tracked_stat() == FileIdentity.of(st).stat_part
                    found.append((not first, st.st_mtime_ns, entry.name))
        return [name for *_, name in sorted(found)]

    def _tracked_stat(self) -> tuple[object, ...] | None:
        """The stat part of the identity of the file the position file tracks (None: none)."""
        doc = self._doc
        if doc.get("file") is None:
            return None
        return doc.get("dev"), doc.get("ino"), doc.get("size"), doc.get("mtime_ns")

    def _is_tracked(self, identity: FileIdentity) -> bool:
        """Whether ``identity`` is the file the position file tracks. The digest is part of the
        match: after a crash between a delete and the position write, a new file that got the
        deleted one's inode (and size) must not inherit its position (it would be skipped)."""
        return (self._tracked_stat() == identity.stat_part
                and self._doc.get("digest") == identity.digest)

    def _pass_over(self, name: str, identity: FileIdentity | None, reason: str, *, skipped: bool = False) -> None:
        seen = identity.stat_part if identity is not None else None
        if name in self._passed_over and self._passed_over[name] == seen:
            return
        self._passed_over[name] = seen
        self.counters.add(**{"files_skipped" if skipped else "files_refused": 1})
        log.error("source %s: %s %s in %s: %s", self.name, "skipping" if skipped else "refusing", name,
                  self.settings.dir, reason)

    # -- one file -------------------------------------------------------------------------
    def _ingest(self, name: str) -> None:
        try:
            fd, st = open_nofollow(name, dir_fd=self._dir_fd)
        except RefusedFileError as err:
            self._pass_over(name, None, err.reason)
            return
        except FileNotFoundError:
            return
        try:
            identity = FileIdentity.of(st)
            if self._passed_over.get(name) == identity.stat_part:
                return
            self._passed_over.pop(name, None)
            self._ingest_open(fd, name, identity.with_digest(content_digest(fd, identity.size)))
        finally:
            os.close(fd)

    def _ingest_open(self, fd: int, name: str, identity: FileIdentity) -> None:
        self._current = name
        offset, pending = self._resume(name, identity)
        if offset == 0:
            problem = self._check(fd, identity.size)
            if problem is not None:
                self._reject(name, identity, *problem)
                return
        try:
            self._deliver(fd, name, identity, offset, pending)
        except (OversizedLineError, UnicodeDecodeError) as err:
            self._reject(name, identity, "delivery", f"{err} (the part before it was delivered)")
            return
        self._finish(fd, name, identity)

    def _resume(self, name: str, identity: FileIdentity) -> tuple[int, tuple[int, int] | None]:
        doc = self._doc
        if not self._is_tracked(identity):
            if doc.get("file") == name:
                log.warning("source %s: %s is not the file it was reading before (replaced); reading it from "
                            "the start", self.name, name)
            return 0, None
        if doc["file"] != name:
            log.info("source %s: %s was renamed to %s while being read; resuming it", self.name, doc["file"], name)
        pending = doc.get("pending")
        return int(doc["offset"]), (int(pending[0]), int(pending[1])) if pending else None

    def _save(self, name: str | None, identity: FileIdentity | None, offset: int, pending: _Batch | None) -> None:
        doc: dict[str, Any] = {"file": name}
        if identity is not None:
            doc.update(dev=identity.dev, ino=identity.ino, size=identity.size, mtime_ns=identity.mtime_ns,
                       digest=identity.digest, offset=offset, pending=[pending.start, pending.end] if pending else None)
        self._state.save(doc)
        self._doc = doc

    def _hook(self, point: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(point)

    def _deliver(self, fd: int, name: str, identity: FileIdentity, offset: int,
                 pending: tuple[int, int] | None) -> None:
        s = self.settings
        batches = self._batches(fd, pending[1] if pending else offset, identity.size, s.batch_size, s.batch_bytes)
        current = self._exact(fd, *pending) if pending else next(batches, None)
        if current is not None and pending is None:
            self._save(name, identity, offset, current)  # intent first: see tracker.py
        while current is not None:
            self._put(current, identity)
            self._hook("after_commit")
            if self._stop.is_set():
                self._save(name, identity, current.end, None)
                raise SourceStopped(name)
            following = next(batches, None)
            self._save(name, identity, current.end, following)
            current = following

    def _put(self, batch: _Batch, identity: FileIdentity) -> None:
        batch_id = make_batch_id(self.name, identity.key(), f"{batch.start}-{batch.end}")
        result = put_until_committed(self.pipeline, batch.events, batch_id, stop=self._stop, log=log,
                                     counters=self.counters, max_backoff=self.settings.max_backoff)
        self.counters.add(batches=1, duplicates=int(result.duplicate),
                          events=0 if result.duplicate else len(batch.events),
                          bytes=0 if result.duplicate else sum(len(e.body) for e in batch.events))

    # -- reading --------------------------------------------------------------------------
    def _splitter(self, start: int, policy: Oversized) -> LineSplitter | ChunkSplitter:
        cls = LineSplitter if self.settings.unit == "line" else ChunkSplitter
        return cls(start, self.settings.max_event_bytes, policy)

    def _pieces(self, fd: int, start: int, end: int, policy: Oversized) -> Iterator[Piece]:
        splitter = self._splitter(start, policy)
        for _, data in read_range(fd, start, end):
            yield from splitter.feed(data)
        yield from splitter.flush()

    def _batches(self, fd: int, start: int, end: int, limit: int, limit_bytes: int) -> Iterator[_Batch]:
        events: list[Event] = []
        size, first, last = 0, start, start
        for piece in self._pieces(fd, start, end, self.settings.oversized):
            events.append(self._event(piece))
            size, last = size + len(piece.body), piece.end
            if len(events) >= limit or size >= limit_bytes:
                yield _Batch(events, first, last)
                events, size, first = [], 0, last
        if events:
            yield _Batch(events, first, last)

    def _exact(self, fd: int, start: int, end: int) -> _Batch:
        """The batch ``[start, end)`` exactly as it was first read (a pending intent)."""
        batch = next(self._batches(fd, start, end, 1 << 62, 1 << 62), None)
        return batch if batch is not None else _Batch([], start, end)

    def _event(self, piece: Piece) -> Event:
        body = piece.body
        if piece.oversized:
            self.counters.add(oversized=1)
        if self._replace:
            encoding = self.settings.encoding
            try:
                text = body.decode(encoding)
            except UnicodeDecodeError:
                self.counters.add(decode_replaced=1)
                text = body.decode(encoding, "replace")
            body = text.encode("utf-8")
        elif self._transcode:
            body = body.decode(self.settings.encoding).encode("utf-8")
        return Event(body, {self.settings.file_header: self._current} if self.settings.file_header else {})

    def _check(self, fd: int, size: int) -> tuple[str, str] | None:
        """A whole-file pre-check for the ``fail``/``skip-file`` policies: (kind, problem) or None."""
        s = self.settings
        if s.decode_errors != "replace":
            decoder = codecs.getincrementaldecoder(s.encoding)("strict")
            try:
                for _, data in read_range(fd, 0, size):
                    decoder.decode(data)
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                return "decode", self._locate_decode_error(fd, size)
        if s.oversized == "fail" and self._too_long(fd, size):
            try:
                for _ in self._pieces(fd, 0, size, "fail"):
                    pass
            except OversizedLineError as err:
                return "oversized", str(err)
        return None

    def _too_long(self, fd: int, size: int) -> bool:
        limit = self.settings.max_event_bytes
        if self.settings.unit == "file":
            return size > limit
        return longest_line(data for _, data in read_range(fd, 0, size)) > limit

    def _locate_decode_error(self, fd: int, size: int) -> str:
        encoding = self.settings.encoding
        for number, piece in enumerate(self._pieces(fd, 0, size, "split"), 1):
            try:
                piece.body.decode(encoding)
            except UnicodeDecodeError as err:
                offset = piece.start + err.start
                return f"bytes not valid {encoding} at byte offset {offset} (line {number}): {err.reason}"
        return f"bytes not valid {encoding} (a character cut by a max_event_bytes split)"

    # -- the end of a file ----------------------------------------------------------------
    def _reject(self, name: str, identity: FileIdentity, kind: str, problem: str) -> None:
        if kind == "decode" and self.settings.decode_errors == "skip-file":
            self._pass_over(name, identity, f"{problem}; left in place (decode_errors = 'skip-file')", skipped=True)
            return
        target = self._move(name, identity, self.settings.failed_suffix)
        self.counters.add(files_failed=1, errors=1)
        log.error("source %s: %s in %s: %s; moved to %s, nothing lost", self.name, name, self.settings.dir,
                  problem, target)
        self._save(None, None, 0, None)

    def _finish(self, fd: int, name: str, identity: FileIdentity) -> None:
        self._hook("before_finish")
        st = os.fstat(fd)
        if st.st_size != identity.size or st.st_mtime_ns != identity.mtime_ns:
            target = self._move(name, identity, self.settings.failed_suffix)
            self.counters.add(files_modified=1, errors=1)
            log.error("source %s: %s changed while it was read (size %d -> %d); the first %d bytes were "
                      "delivered; kept as %s. Writers must drop files by rename", self.name, name,
                      identity.size, st.st_size, identity.size, target)
        elif self.settings.completed == "delete":
            if self._same_file(name, identity):
                os.unlink(name, dir_fd=self._dir_fd)
        else:
            self._move(name, identity, self.settings.completed_suffix)
        os.fsync(self._dir_fd)
        self._hook("before_clear")  # a crash here leaves the position naming a file that is gone
        self._save(None, None, 0, None)
        self.counters.add(files_completed=1)

    def _same_file(self, name: str, identity: FileIdentity) -> bool:
        try:
            st = os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == (identity.dev, identity.ino)

    def _move(self, name: str, identity: FileIdentity, suffix: str) -> str:
        """Rename ``name`` to ``name+suffix`` (never over an existing file); '' if it is gone."""
        if not self._same_file(name, identity):
            log.warning("source %s: %s was moved or replaced by someone else; leaving it", self.name, name)
            return ""
        target = name + suffix
        if self._exists(target):
            target = f"{name}.{time.time_ns()}{suffix}"
        os.rename(name, target, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        os.fsync(self._dir_fd)
        return target

    def _exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True
