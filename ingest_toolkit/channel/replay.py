"""Full replay: rebuild the pointer queue from every log segment.

Frames are totally ordered by (log id, offset) because the channel writes one segment at a
time. Replaying them in that order reproduces the committed state:

* PUT frames are pending under their transaction until its COMMIT, which appends them to the
  queue tail in put order; without a COMMIT (crash, or a ROLLBACK frame) they are dropped.
* TAKE frames list pointers; their COMMIT removes those pointers from the queue. An uncommitted
  take removes nothing, so its events are still queued, ahead of everything put after them.
* A COMMIT's count must match what its transaction wrote, or the log is reported corrupt.

The newest segment is the only one that may end in a torn write; :func:`replay` cuts it back
to its last valid frame (the caller seals it before writing anything new).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ChannelIdentityError, CorruptLogError
from . import format as fmt
from .codec import TXN_PUT, decode_commit, decode_take
from .format import FrameType
from .fs import FileSystem
from .pointer_queue import PointerQueue
from .segment import ScanResult, iter_frames, list_segments, read_meta, scan_segment

__all__ = ["ReplayResult", "ReplayStats", "SegmentInfo", "replay"]

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]  # (segments done, segments total)


@dataclass(slots=True)
class ReplayStats:
    segments: int = 0
    frames: int = 0
    puts_committed: int = 0
    takes_committed: int = 0
    txns_dropped: int = 0
    torn_bytes: int = 0
    orphan_takes: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    log_id: int
    path: str
    data_end: int
    torn_bytes: int
    frames: int
    first_seq: int
    last_seq: int


@dataclass(slots=True)
class ReplayResult:
    queue: PointerQueue
    refcounts: dict[int, int]
    segments: list[SegmentInfo]
    channel_id: bytes | None
    max_seq: int
    max_txn: int
    stats: ReplayStats = field(default_factory=ReplayStats)


class _State:
    """Pending transactions and the queue while frames are applied."""

    def __init__(self) -> None:
        self.queue = PointerQueue()
        self.puts: dict[int, list[int]] = {}
        self.takes: dict[int, list[int]] = {}
        self.removed: set[int] = set()  # committed takes not (yet) at the head
        self.stats = ReplayStats()
        self.max_seq = 0
        self.max_txn = 0

    def commit(self, txn: int, kind: int, count: int, path: str, offset: int) -> None:
        pointers = (self.puts if kind == TXN_PUT else self.takes).pop(txn, [])
        if len(pointers) != count:
            raise CorruptLogError(
                path=path, offset=offset,
                reason=f"COMMIT of transaction {txn} counts {count} events but {len(pointers)} "
                       "frames of it were found: frames are missing")
        if kind == TXN_PUT:
            self.queue.extend(pointers)
            self.stats.puts_committed += count
        else:
            self._remove(pointers)
            self.stats.takes_committed += count

    def _remove(self, pointers: list[int]) -> None:
        queue = self.queue
        if queue.peek(len(pointers)) == pointers:  # the usual case: taken from the head
            queue.popleft(len(pointers))
        else:
            self.removed.update(pointers)
        removed = self.removed
        while removed and len(queue) and queue.peek(1)[0] in removed:
            removed.discard(queue.popleft(1)[0])

    def finish(self) -> PointerQueue:
        self.stats.txns_dropped = len(self.puts) + len(self.takes)
        if not self.removed:
            return self.queue
        kept = [p for p in self.queue.peek(len(self.queue)) if p not in self.removed]
        self.stats.orphan_takes = len(self.removed) - (len(self.queue) - len(kept))
        return PointerQueue(kept)


def replay(fs: FileSystem, data_dirs: list[str], *, progress: ProgressFn | None = None) -> ReplayResult:
    """Replay every segment of ``data_dirs`` in log-id order."""
    started = time.monotonic()
    segments = sorted(seg for d in data_dirs for seg in list_segments(fs, d))
    _check_unique_ids(segments)
    state, infos, channel_id = _State(), [], None
    for index, (log_id, path) in enumerate(segments):
        newest = index == len(segments) - 1
        info, seg_channel = _replay_segment(state, log_id, path, newest=newest)
        if info is None:
            continue
        channel_id = _same_channel(channel_id, seg_channel, path)
        infos.append(info)
        if progress:
            progress(index + 1, len(segments))
    queue = state.finish()
    refcounts = dict(Counter(p >> 32 for p in queue.peek(len(queue))))
    state.stats.segments = len(infos)
    state.stats.seconds = time.monotonic() - started
    return ReplayResult(queue, refcounts, infos, channel_id, state.max_seq, state.max_txn, state.stats)


def _replay_segment(state: _State, log_id: int, path: str, *, newest: bool) -> tuple[SegmentInfo | None, bytes]:
    image, size = scan_segment(path)
    header = image[: fmt.SEGMENT_HEADER_SIZE]
    if newest and (size < fmt.SEGMENT_HEADER_SIZE or header == bytes(fmt.SEGMENT_HEADER_SIZE)):
        log.warning("newest segment %s has no complete header (crash while creating it); ignoring it", path)
        return None, b""
    results: list[ScanResult] = []
    try:
        frames, first_seq, last_seq = _apply_frames(state, image, log_id, path, newest=newest, results=results)
    finally:
        if not isinstance(image, bytes):
            image.close()
    scan = results[0]
    if scan.log_id != log_id:
        raise CorruptLogError(path=path, offset=0, reason=f"header names log id {scan.log_id}")
    _check_sealed(path, scan, newest=newest)
    if scan.torn_bytes:
        log.warning("%s: dropping a torn tail of %d bytes at offset %d (uncommitted writes of a crash)",
                    path, scan.torn_bytes, scan.data_end)
    state.stats.torn_bytes += scan.torn_bytes
    info = SegmentInfo(log_id, path, scan.data_end, scan.torn_bytes, frames, first_seq, last_seq)
    return info, scan.channel_id


def _apply_frames(state: _State, image, log_id: int, path: str, *, newest: bool,  # type: ignore[no-untyped-def]
                  results: list[ScanResult]) -> tuple[int, int, int]:
    """Apply one segment's frames; returns its (frame count, first PUT seq, last PUT seq)."""
    log_base = log_id << 32
    puts, takes = state.puts, state.takes
    max_txn = state.max_txn
    frames = 0
    first_seq = 0
    last_seq = 0
    for offset, ftype, length, txn, seq in iter_frames(image, path, newest=newest, result=results):
        frames += 1
        if txn > max_txn:
            max_txn = txn
        if ftype == FrameType.PUT:
            pending = puts.get(txn)
            if pending is None:
                pending = puts[txn] = []
            pending.append(log_base | offset)
            if seq > last_seq:
                last_seq = seq
            if seq < first_seq or not first_seq:
                first_seq = seq
            continue
        payload = image[offset + fmt.FRAME_HEADER.size : offset + length - 4]
        if ftype == FrameType.TAKE:
            takes.setdefault(txn, []).extend(decode_take(payload))
        elif ftype == FrameType.COMMIT:
            kind, count = decode_commit(payload)
            state.commit(txn, kind, count, path, offset)
        else:  # ROLLBACK
            puts.pop(txn, None)
            takes.pop(txn, None)
    state.max_seq, state.max_txn = max(state.max_seq, last_seq), max_txn
    state.stats.frames += frames
    return frames, first_seq, last_seq


def _check_sealed(path: str, scan: ScanResult, *, newest: bool) -> None:
    meta = read_meta(path)
    if meta is None:
        if not newest:
            log.warning("%s has no .meta although it is not the newest segment; trusting its frames", path)
        return
    if meta.data_end != scan.data_end or scan.file_size != meta.data_end:
        raise CorruptLogError(
            path=path, offset=scan.data_end,
            reason=f"segment was sealed with {meta.data_end} bytes of frames but holds "
                   f"{scan.data_end} valid bytes in a file of {scan.file_size}: it was truncated or "
                   "overwritten after it was sealed")


def _check_unique_ids(segments: list[tuple[int, str]]) -> None:
    for (a, pa), (b, pb_) in zip(segments, segments[1:], strict=False):
        if a == b:
            raise CorruptLogError(path=pb_, offset=0, reason=f"log id {a} also exists as {pa}")


def _same_channel(known: bytes | None, found: bytes, path: str) -> bytes:
    if known is not None and found != known:
        raise ChannelIdentityError(
            f"{path} belongs to channel {found.hex()} but earlier segments to {known.hex()}: "
            "data directories of two channels are mixed; give each channel its own directories")
    return found
