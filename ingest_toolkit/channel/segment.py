"""Log segments: appending frames, sealing, and scanning them back.

A segment is written by one :class:`SegmentWriter` at a time, at positions it tracks itself
(``pwrite``), so a failed write leaves the position unchanged and the next write overwrites the
partial bytes. Sealing syncs, cuts the file to its data end and writes ``log-<id>.meta``; every
segment but the newest one is sealed, which is what lets recovery tell a torn tail (allowed
only in the newest segment) from damage (reported everywhere else).
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from google.protobuf.message import DecodeError

from ..errors import CorruptLogError
from . import format as fmt
from .format import FrameError
from .fs import File, FileSystem, OsFileSystem, read_file, write_atomic
from .proto import channel_pb2 as pb
from .tail import Tail, all_zero, classify_tail

__all__ = ["FrameOpener", "ScanResult", "SegmentWriter", "all_zero", "check_sealed", "header_lost", "iter_frames",
           "meta_path", "read_meta", "scan_segment", "segment_path", "list_segments", "survey_headers",
           "vanished_segments", "written_after_header", "written_proof"]

log = logging.getLogger(__name__)

_SEGMENT_PREFIX = "log-"
_PUT = int(fmt.FrameType.PUT)
AUTH_FAILED = ("PUT frame fails authentication (AES-GCM tag): its bytes were changed after it was written, or it "
               "was encrypted with another key")
MALFORMED_RUN = "sealed run (RUN frame) authenticates but is malformed"
OUTSIDE_RUN = "PUT frame outside a sealed run in a version 3 (encrypted) segment: it was not written by the channel"
RUN_NOT_ALLOWED = "sealed run (RUN frame) in a segment that is not version 3 (encrypted with sealed runs)"
_RUN = int(fmt.FrameType.RUN)
_MAX_META_BYTES = 4096  # a SegmentMeta is under 100 bytes


def segment_path(directory: str, log_id: int) -> str:
    return os.path.join(directory, f"{_SEGMENT_PREFIX}{log_id}")


def meta_path(path: str) -> str:
    return f"{path}.meta"


def list_segments(fs: FileSystem, directory: str) -> list[tuple[int, str]]:
    """``(log_id, path)`` of every ``log-<id>`` file in ``directory``."""
    found = []
    for name in fs.listdir(directory):
        suffix = name[len(_SEGMENT_PREFIX):]
        if name.startswith(_SEGMENT_PREFIX) and suffix.isdigit():
            found.append((int(suffix), os.path.join(directory, name)))
    return found


def read_meta(path: str, fs: FileSystem | None = None) -> pb.SegmentMeta | None:
    """The segment's ``.meta``; None when it has none. Raises CorruptLogError when unreadable."""
    data = read_file(fs or OsFileSystem(), meta_path(path), _MAX_META_BYTES)
    if data is None:
        return None
    if len(data) > _MAX_META_BYTES:
        raise CorruptLogError(path=meta_path(path), offset=0, reason=f"larger than {_MAX_META_BYTES} bytes: not "
                                                                     "segment metadata")
    try:
        meta = pb.SegmentMeta.FromString(data)
    except DecodeError as err:
        raise CorruptLogError(path=meta_path(path), offset=0, reason=f"unreadable segment metadata ({err})") from None
    if meta.format_version != fmt.FORMAT_VERSION or not meta.log_id:
        raise CorruptLogError(path=meta_path(path), offset=0, reason="not a segment metadata file of this version")
    return meta


def header_lost(path: str, fs: FileSystem | None = None) -> str | None:
    """How the segment at ``path`` lost its header: it is empty, shorter than the header, or
    its header is all zeros (what a crash while creating it leaves, and what a lost inode or a
    bad restore leaves). None when the header's bytes are there (a damaged header is then
    reported by the scan, at offset 0)."""
    head = read_file(fs or OsFileSystem(), path, fmt.SEGMENT_HEADER_SIZE)
    if head is None:
        return "is missing"
    head = head[: fmt.SEGMENT_HEADER_SIZE]
    if not head:
        return "is empty (0 bytes)"
    if len(head) < fmt.SEGMENT_HEADER_SIZE:
        return f"holds {len(head)} bytes, fewer than its {fmt.SEGMENT_HEADER_SIZE}-byte header"
    if head == bytes(fmt.SEGMENT_HEADER_SIZE):
        return f"has a zeroed {fmt.SEGMENT_HEADER_SIZE}-byte header"
    return None


def written_after_header(path: str, fs: FileSystem | None = None, chunk: int = 1 << 20) -> int | None:
    """Offset of the first non-zero byte after the 64-byte header slot; None when every byte there
    is zero (or there is none). A segment's header is synced before any frame is written to it,
    so bytes there are frames: proof that the segment was created completely."""
    file = (fs or OsFileSystem()).open_read(path)
    try:
        size, offset = file.size(), fmt.SEGMENT_HEADER_SIZE
        while offset < size:
            piece = file.pread(min(chunk, size - offset), offset)
            if not piece:
                return None
            stripped = piece.lstrip(b"\x00")
            if stripped:
                return offset + len(piece) - len(stripped)
            offset += len(piece)
        return None
    finally:
        file.close()


def survey_headers(segments: list[tuple[int, str]],
                   fs: FileSystem | None = None) -> tuple[list[str | None], list[bool]]:
    """For segments in log order: :func:`header_lost` of each, and whether a later segment with
    its header exists (proof that this one was written: segments are created one at a time)."""
    lost = [header_lost(path, fs) for _log_id, path in segments]
    later, seen = [False] * len(segments), False
    for i in range(len(segments) - 1, -1, -1):
        later[i] = seen
        seen = seen or lost[i] is None
    return lost, later


def written_proof(path: str, log_id: int, *, later_written: bool,
                  checkpoint: tuple[int, str] = (0, ""), fs: FileSystem | None = None) -> str | None:
    """What proves segment ``log_id`` was written completely at least once; None when nothing does.

    A segment is created (header synced, directory synced) before any frame, any later segment
    or any checkpoint can refer to it, so each of these is proof: frames after its header (any
    byte there that is not zero), ``later_written`` (a later segment with its header exists), its
    ``.meta``, or ``checkpoint`` (the highest log id the checkpoint names, and its path). Without
    proof, a segment with no header is the remains of an interrupted creation (or a stray file)."""
    if log_id == 0:
        return None  # log ids start at 1: never a segment the channel wrote
    fs = fs or OsFileSystem()
    if fs.exists(meta_path(path)):
        return f"it was sealed (its .meta {os.path.basename(meta_path(path))} exists)"
    frames_at = written_after_header(path, fs) if fs.exists(path) else None
    if frames_at is not None:
        return (f"frames follow the header (data at offset {frames_at}; a header is synced before any "
                "frame is written)")
    if later_written:
        return "a later segment exists"
    through, checkpoint_path = checkpoint
    if log_id <= through:
        return f"the checkpoint {checkpoint_path} refers to it"
    return None


def vanished_segments(fs: FileSystem, data_dirs: list[str] | tuple[str, ...], present: set[int],
                      checkpoint: tuple[int, str] = (0, "")) -> list[tuple[str, str]]:
    """``(segment path, proof)`` of every segment that is gone although its ``.meta`` shows it
    was written and nothing deleted it.

    A ``.meta`` without its segment is normally left by a crash between deleting a drained
    segment and its ``.meta``; only segments before the newest one, and before the checkpoint's
    position, are ever deleted as drained. ``present``: ids of the segments that exist."""
    newest = max(present, default=0)
    found = []
    for directory in data_dirs:
        for name in sorted(fs.listdir(directory)):
            stem = name.removeprefix(_SEGMENT_PREFIX).removesuffix(".meta")
            if not (name.startswith(_SEGMENT_PREFIX) and name.endswith(".meta") and stem.isdigit()):
                continue
            log_id, path = int(stem), os.path.join(directory, f"{_SEGMENT_PREFIX}{stem}")
            if log_id in present or fs.exists(path):
                continue
            if log_id > newest:
                found.append((path, f"its .meta {name} exists and no later segment does (only drained "
                                    "segments before the newest are ever deleted)"))
            elif checkpoint[0] and log_id >= checkpoint[0]:
                found.append((path, f"its .meta {name} exists and the checkpoint {checkpoint[1]} was written at "
                                    "or before it, so it was never deleted as drained"))
    return found


class SegmentWriter:
    """Appends frames to one segment; the channel's lock serialises every call."""

    def __init__(self, fs: FileSystem, path: str, file: File, log_id: int,
                 channel_id: bytes, preallocate: int, limit: int = 0) -> None:
        self.fs, self.path, self.file, self.log_id = fs, path, file, log_id
        self.directory = os.path.dirname(path)
        self.channel_id = channel_id
        self.position = fmt.SEGMENT_HEADER_SIZE
        self.frames = 0
        self.first_seq = 0
        self.last_seq = 0
        self._allocated = 0
        self._preallocate = preallocate
        self._limit = limit  # the segment's maximum size (max_file_size); 0: none
        self.sealed = False

    @classmethod
    def create(cls, fs: FileSystem, directory: str, log_id: int, channel_id: bytes,
               preallocate: int, limit: int = 0, key: fmt.SegmentKey | None = None) -> SegmentWriter:
        """Create ``log-<id>`` with its header durable (file, contents and directory entry).

        ``preallocate``: bytes reserved ahead of the writes; never past ``limit`` (the segment's
        ``max_file_size``), so a small segment is not inflated by a larger preallocation.
        ``key``: the encryption fields of the header when the session encrypts its PUT frames."""
        path = segment_path(directory, log_id)
        file = fs.create(path)
        writer = cls(fs, path, file, log_id, channel_id, preallocate, limit)
        try:
            file.pwrite(fmt.encode_segment_header(log_id, channel_id, time.time_ns(), key), 0)
            writer._allocated = fmt.SEGMENT_HEADER_SIZE
            writer._reserve(preallocate)
            file.sync()
            fs.sync_dir(directory)
        except BaseException:
            file.close()
            _remove_quietly(fs, path)  # never used: a retry creates it again
            raise
        return writer

    def append(self, data: bytes, frames: int, first_seq: int = 0, last_seq: int = 0) -> int:
        """Write ``data`` at the end of the segment; returns the offset it starts at.

        A write that fails leaves the position where it was and cuts the file there: the next
        write may be shorter, and the bytes a failed write left behind it must not follow the
        log's last frame (recovery would take them for damage)."""
        offset = self.position
        self._reserve(len(data))
        try:
            self.file.pwrite(data, offset)
        except OSError:
            self._cut_back(offset)
            raise
        self.position = offset + len(data)  # only after the write succeeded
        self.frames += frames
        if last_seq:  # PUT frames: keep the range of sequences this segment holds
            self.first_seq = min(self.first_seq or first_seq, first_seq)
            self.last_seq = max(self.last_seq, last_seq)
        return offset

    def _reserve(self, length: int) -> None:
        end = self.position + length
        if self._preallocate and end > self._allocated:
            chunk = max(self._preallocate, end - self._allocated)
            if self._limit:  # never beyond the segment's size; what the write needs always
                chunk = max(end - self._allocated, min(chunk, self._limit - self._allocated))
            self.file.allocate(self._allocated, chunk)
            self._allocated += chunk

    def _cut_back(self, offset: int) -> None:
        """Drop whatever a failed write left at and after ``offset`` (preallocation included: it is
        reserved again by the next write). Best effort: the channel goes on either way."""
        try:
            self.file.truncate(offset)
        except OSError as err:
            log.warning("%s: could not cut a failed write back to offset %d (%s)", self.path, offset, err)
            return
        self._allocated = min(self._allocated, offset)

    def sync(self) -> None:
        self.file.sync()

    def seal(self, *, close: bool = True) -> None:
        """Make the segment final: sync, cut the preallocated tail, record ``.meta``.

        ``close=False`` keeps the descriptor open for a sync running in another thread; the
        caller closes it with :meth:`close_file` once that sync is done.
        """
        self.file.sync()
        self.file.truncate(self.position)
        self.file.sync()
        if close:
            self.file.close()
        self.sealed = True
        write_atomic(self.fs, meta_path(self.path), self.meta().SerializeToString())

    def close_file(self) -> None:
        self.file.close()

    def abandon(self) -> None:
        """Close without sealing (after an I/O error); recovery treats it as a crashed segment."""
        self.file.close()
        self.sealed = True

    def meta(self) -> pb.SegmentMeta:
        return pb.SegmentMeta(
            format_version=fmt.FORMAT_VERSION, log_id=self.log_id, channel_id=self.channel_id,
            data_end=self.position, frames=self.frames, first_seq=self.first_seq,
            last_seq=self.last_seq, sealed_unix_ns=time.time_ns())


def _remove_quietly(fs: FileSystem, path: str) -> None:
    try:
        fs.unlink(path)
    except OSError as err:
        log.warning("could not remove the unfinished segment %s (%s); the next open removes it", path, err)


@dataclass(frozen=True, slots=True)
class ScanResult:
    log_id: int
    channel_id: bytes
    data_end: int  # where valid frames end
    file_size: int
    torn_bytes: int  # bytes after data_end up to the last one that is not zero (the tail recovery cuts)
    tail: Tail | None = None  # what those bytes are: a torn write, or damage (tail.py)


class FrameOpener(Protocol):
    """What a scan asks an encrypted segment's :class:`~.crypto.Opener` (``crypto`` imports this
    module): each raises FrameError for a frame that fails authentication (or is not allowed in
    the segment's version), which is then damage exactly like a checksum mismatch."""

    def check_put(self, buf: bytes | mmap.mmap, pos: int, length: int, seq: int) -> None: ...

    def run_frames(self, buf: bytes | mmap.mmap, pos: int, length: int, txn: int,
                   seq: int) -> list[tuple[int, int, int, int, int]]: ...


def check_sealed(opener: FrameOpener | None, data: bytes | mmap.mmap, pos: int, ftype: int, length: int, txn: int,
                 seq: int) -> list[tuple[int, int, int, int, int]] | None:
    """The PUT frames of the RUN frame at ``pos`` (None for any other frame), after the checks
    of an encrypted segment; FrameError when they fail. ``opener`` None: a plain segment."""
    if opener is None:
        if ftype == _RUN:
            raise FrameError(RUN_NOT_ALLOWED)
        return None
    if ftype == _PUT:
        opener.check_put(data, pos, length, seq)
    elif ftype == _RUN:
        return opener.run_frames(data, pos, length, txn, seq)
    return None


def iter_frames(data: bytes | mmap.mmap, path: str, *, newest: bool, result: list[ScanResult],
                start: int = 0, opener: FrameOpener | None = None) -> Iterator[tuple[int, int, int, int, int]]:
    """Yield ``(offset, type, length, txn_id, seq)`` for every valid frame of a segment image,
    from ``start`` (a frame boundary; the header's end when 0). A RUN frame (a sealed run of an
    encrypted segment) is not yielded itself: its PUT frames are, at their offsets in the file.

    ``opener`` (an encrypted segment's :class:`~.crypto.Opener`) authenticates every PUT and RUN
    frame that passed its checks; a frame it refuses is damage exactly like a checksum mismatch.

    On reaching the end, appends a :class:`ScanResult` to ``result``. Damage raises
    :class:`CorruptLogError`, except the tail of the newest segment when no complete COMMIT frame
    follows the damage: the scan stops there and ``ScanResult.tail`` says whether it is a torn
    write or damage (:func:`~.tail.classify_tail`); what to do with it is the recovery mode's call.
    """
    size = len(data)
    try:
        log_id, channel_id, _created = fmt.decode_segment_header(data[: fmt.SEGMENT_HEADER_SIZE])
    except FrameError as err:
        raise CorruptLogError(path=path, offset=0, reason=str(err)) from None
    pos = max(start, fmt.SEGMENT_HEADER_SIZE)
    if pos > size:
        raise CorruptLogError(path=path, offset=size,
                              reason=f"the segment ends before offset {pos}, where the checkpoint says replay resumes")
    check = fmt.check_frame
    while pos < size:
        try:
            ftype, length, txn_id, seq = check(data, pos, size)
            inner = None
            if ftype == _RUN or (opener is not None and ftype == _PUT):
                inner = check_sealed(opener, data, pos, ftype, length, txn_id, seq)
        except FrameError as err:
            tail = classify_tail(data, pos, path, newest=newest, reason=str(err))
            result.append(ScanResult(log_id, channel_id, pos, size, tail.nbytes if tail else 0, tail))
            return
        if inner is None:
            yield pos, ftype, length, txn_id, seq
        else:
            yield from inner
        pos += length
    result.append(ScanResult(log_id, channel_id, pos, size, 0))


def scan_segment(path: str) -> tuple[mmap.mmap | bytes, int]:
    """Map a segment read-only for scanning; returns the image and the file size."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b"", 0
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), size
