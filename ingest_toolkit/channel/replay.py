"""Replay: rebuild the pointer queue from the log, from a checkpoint or from the beginning.

Frames are totally ordered by (log id, offset) because the channel writes one segment at a
time. Replaying them in that order reproduces the committed state:

* PUT frames are pending under their transaction until its COMMIT, which appends them to the
  queue tail in put order; without a COMMIT (crash, or a ROLLBACK frame) they are dropped.
* TAKE frames list pointers; their COMMIT removes those pointers from the queue. An uncommitted
  take removes nothing, so its events are still queued, ahead of everything put after them.
* A COMMIT's count must match what its transaction wrote, or the log is reported corrupt.

The newest segment is the only one that may end in a torn write; :func:`replay` cuts it back
to its last valid frame (the caller seals it before writing anything new).

From a checkpoint, the state starts as the snapshot (queue, with the events of open takes put
back at the head; open puts pending) and only frames at or after the checkpoint's log position
are applied. Segments before that position are not read at all.

Commit tags: the tags remembered by the checkpoint seed the store, and every tagged put COMMIT
applied adds its tag, in log order, as the running channel did when it published the commit.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import DecodeError

from ..errors import ChannelIdentityError, CheckpointInvalid, CorruptLogError, SegmentLostError, TailRefusedError
from . import format as fmt
from .checkpoint import Checkpoint
from .codec import TXN_PUT, decode_commit, decode_take
from .config import RecoveryMode
from .crypto import KeyChain
from .format import FrameType
from .fs import FileSystem, read_file
from .pointer_queue import PointerQueue
from .segment import (
    FrameOpener,
    ScanResult,
    iter_frames,
    list_segments,
    read_meta,
    scan_segment,
    survey_headers,
    written_proof,
)
from .tags import TagRecord, TagStore
from .tail import Tail
from .txnframes import count_logs, count_refs

__all__ = ["ReplayResult", "ReplayStats", "SegmentInfo", "TailCut", "count_refs", "replay"]

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
    partial_txns: int = 0  # transactions that began in deleted segments (full replay only)
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


@dataclass(frozen=True, slots=True)
class TailCut:
    """The end of the newest segment that recovery cuts: ``[offset, end)`` of ``path``, a torn
    write or damage (``torn``), and what the cut drops: ``events`` put by ``transactions`` that
    have no COMMIT before it. ``frame``: the failing frame's (type, txn id) when readable."""

    log_id: int
    path: str
    offset: int
    end: int
    torn: bool
    reason: str
    events: int
    transactions: int
    frame: tuple[int, int] | None = None

    def describe(self) -> str:
        what = "torn write" if self.torn else "damaged tail"
        named = ""
        if self.frame is not None and self.frame[0] == FrameType.COMMIT:
            named = f"; the failing frame is the COMMIT of transaction {self.frame[1]}"
        held = "" if self.torn else ", and whatever events the damaged frames held"
        return (f"{what} of {self.end - self.offset} bytes at offset {self.offset} of {self.path} ({self.reason}): "
                f"{self.events} events of {self.transactions} transactions without a COMMIT before it{held}{named}")


@dataclass(slots=True)
class ReplayResult:
    queue: PointerQueue
    refcounts: dict[int, int]
    segments: list[SegmentInfo]
    channel_id: bytes | None
    max_seq: int
    max_txn: int
    stats: ReplayStats = field(default_factory=ReplayStats)
    puts_committed: int = 0  # cumulative, since the channel was created (checkpoint + replayed)
    takes_committed: int = 0
    tags: TagStore = field(default_factory=TagStore)  # remembered commit tags
    cut: TailCut | None = None  # the end of the newest segment that recovery cuts, if any


class _State:
    """Pending transactions and the queue while frames are applied."""

    def __init__(self, start: Checkpoint | None = None, tags: TagStore | None = None) -> None:
        self.queue = PointerQueue()
        self.tags = tags if tags is not None else TagStore()
        self.puts: dict[int, list[int]] = {}
        self.takes: dict[int, list[int]] = {}
        self.removed: set[int] = set()  # committed takes not (yet) at the head
        self.refs: Counter[int] = Counter()  # log id -> pointers in the queue, kept as they move
        # A full replay whose oldest segment is not log 1 starts after deleted history.
        self.truncated = False
        self.in_first_segment = False
        self.first_segment_txns: set[int] = set()
        self.stats = ReplayStats()
        self.max_seq = 0
        self.max_txn = 0
        self.cut: TailCut | None = None
        if start is not None:
            self._seed(start)

    def _seed(self, start: Checkpoint) -> None:
        self.queue.extend(start.queue)
        for _txn, pointers in reversed(start.takes):  # chunks in pop order: the first ends at the head
            self.queue.extendleft(pointers)
        self.puts = {txn: list(pointers) for txn, pointers in start.puts}
        self.refs.update(start.meta.log_refcounts)  # counts queued + open takes, as seeded here
        self.max_seq = start.meta.last_seq
        self.max_txn = max(start.meta.next_txn_id - 1, 0)
        self.tags.extend(start.tags)

    def commit(self, txn: int, kind: int, count: int, path: str, offset: int,
               tag: TagRecord | None = None) -> None:
        pointers = (self.puts if kind == TXN_PUT else self.takes).pop(txn, [])
        if len(pointers) < count and self._began_before_history(txn, pointers):
            # Its first frames were in a segment deleted as drained: those events were all taken
            # (PUT), or refer to puts that were (TAKE). Applying the frames found is exact.
            self.stats.partial_txns += 1
        elif len(pointers) != count:
            raise CorruptLogError(
                path=path, offset=offset,
                reason=f"COMMIT of transaction {txn} counts {count} events but {len(pointers)} "
                       "frames of it were found: frames are missing")
        if kind == TXN_PUT:
            self.queue.extend(pointers)
            count_logs(self.refs, pointers, +1)
            self.stats.puts_committed += count
            if tag is not None:
                self.tags.add(tag)
        else:
            self._remove(pointers)
            self.stats.takes_committed += count

    def _began_before_history(self, txn: int, pointers: list[int]) -> bool:
        """Could this transaction's missing frames lie in deleted segments?"""
        return self.truncated and (not pointers or self.in_first_segment or txn in self.first_segment_txns)

    def _remove(self, pointers: list[int]) -> None:
        queue = self.queue
        if queue.peek(len(pointers)) == pointers:  # the usual case: taken from the head
            queue.popleft(len(pointers))
            count_logs(self.refs, pointers, -1)
        else:
            self.removed.update(pointers)
        removed = self.removed
        while removed and len(queue) and queue.peek(1)[0] in removed:
            head = queue.popleft(1)[0]
            removed.discard(head)
            self.refs[fmt.pointer_log_id(head)] -= 1

    def finish(self) -> PointerQueue:
        self.stats.txns_dropped = len(self.puts) + len(self.takes)
        if not self.removed:
            return self.queue
        queued = self.queue.peek(len(self.queue))
        kept = [p for p in queued if p not in self.removed]
        count_logs(self.refs, [p for p in queued if p in self.removed], -1)
        self.stats.orphan_takes = len(self.removed) - (len(self.queue) - len(kept))
        return PointerQueue(kept)

    def refcounts(self) -> dict[int, int]:
        return {log_id: n for log_id, n in sorted(self.refs.items()) if n}


def replay(fs: FileSystem, data_dirs: list[str], *, start: Checkpoint | None = None,
           progress: ProgressFn | None = None, tags: TagStore | None = None,
           checkpoint: tuple[int, str] = (0, ""), keys: KeyChain | None = None,
           recovery_mode: RecoveryMode = "torn_tail") -> ReplayResult:
    """Replay the segments of ``data_dirs`` in log-id order, from ``start`` if given.

    ``tags`` is the store to fill with the remembered commit tags (the channel passes one with
    its window and retention); by default every tag found is kept. ``checkpoint`` is the
    highest log id a checkpoint proves was written, and its path (``checkpoint.written_through``):
    such a segment without its header is damage (SegmentLostError), never an interrupted creation.
    ``keys`` opens encrypted segments: each PUT frame replayed is authenticated (without keys,
    an encrypted segment raises EncryptionKeyError). ``recovery_mode`` judges the end of the
    newest segment when it does not parse (docs/durability.md, "Recovery modes"): a tail it lets
    recovery cut is ``ReplayResult.cut``; one it refuses raises TailRefusedError. Nothing is
    changed here: recovery records the incident and makes the cut.
    """
    keys = keys or KeyChain(None)
    started = time.monotonic()
    segments = sorted(seg for d in data_dirs for seg in list_segments(fs, d))
    _check_unique_ids(fs, segments)
    state, infos, channel_id = _State(start, tags), [], None
    if start is not None:
        refs = [log_id for log_id, n in start.meta.log_refcounts.items() if n]
        checkpoint = (max(checkpoint[0], start.meta.log_id, *refs), checkpoint[1] or "the checkpoint in use")
    first_log, first_offset = (start.meta.log_id, start.meta.log_offset) if start else (0, 0)
    state.truncated = start is None and bool(segments) and segments[0][0] > 1
    lost, later = survey_headers(segments, fs)
    for index, (log_id, path) in enumerate(segments):
        newest = not later[index]  # the last segment with a header: the one written at a crash
        damage = lost[index]
        if damage is not None:
            _interrupted_creation(fs, log_id, path, damage, later_written=later[index], checkpoint=checkpoint)
            continue  # recovery removes it
        if log_id < first_log:
            infos.append(_skipped_segment(fs, log_id, path))
            continue
        offset = first_offset if log_id == first_log else 0
        state.in_first_segment = state.truncated and not infos
        info, seg_channel = _replay_segment(fs, state, log_id, path, newest=newest, offset=offset, keys=keys,
                                            mode=recovery_mode)
        if state.in_first_segment:  # what is still pending may have begun in deleted segments
            state.first_segment_txns = set(state.puts) | set(state.takes)
            state.in_first_segment = False
        channel_id = _same_channel(channel_id, seg_channel, path)
        infos.append(info)
        _report(progress, index + 1, len(segments), state.stats)
    queue = state.finish()
    _check_counts(state, start)
    state.stats.segments = len(infos)
    state.stats.seconds = time.monotonic() - started
    result = ReplayResult(queue, state.refcounts(), infos, channel_id, state.max_seq,
                          state.max_txn, state.stats, tags=state.tags, cut=state.cut)
    result.puts_committed = (start.meta.puts_committed if start else 0) + state.stats.puts_committed
    # Without a checkpoint, history before the oldest kept segment is unknown; count takes so
    # that puts - takes is the queue, as it is while the channel runs.
    result.takes_committed = (start.meta.takes_committed + state.stats.takes_committed if start
                              else result.puts_committed - len(queue))
    return result


def _judge_tail(state: _State, log_id: int, path: str, tail: Tail, mode: RecoveryMode) -> TailCut:
    """The cut of the newest segment's ``tail`` if ``mode`` allows it, else TailRefusedError. The
    events it drops are those of the put transactions still without a COMMIT: whatever the cut
    held (torn) or whatever the damaged frame was (possibly one of their COMMITs)."""
    pending = [pointers for pointers in state.puts.values() if pointers]
    cut = TailCut(log_id, path, tail.offset, tail.end, tail.torn, tail.reason, sum(map(len, pending)), len(pending),
                  tail.frame)
    if mode == "strict" or (not tail.torn and mode != "set_aside"):
        raise TailRefusedError(path=path, offset=tail.offset, reason=tail.reason, torn=tail.torn, events=cut.events,
                               transactions=cut.transactions, mode=mode)
    return cut


def _check_counts(state: _State, start: Checkpoint | None) -> None:
    """No segment's count may end below zero: a checkpoint whose counts do not add up with the
    frames after it cannot be used (CheckpointInvalid: recovery replays in full instead)."""
    negative = sorted(log_id for log_id, n in state.refs.items() if n < 0)
    if not negative:
        return
    if start is not None:
        raise CheckpointInvalid("checkpoint.meta", f"the takes committed after checkpoint {start.meta.checkpoint_id} "
                                f"remove more events from log {negative[0]} than it counts there")
    raise CorruptLogError(path=f"log-{negative[0]}", offset=0,
                          reason="committed takes remove more events from it than were put: frames are missing")


def _report(progress: ProgressFn | None, done: int, total: int, stats: ReplayStats) -> None:
    if progress:
        progress(done, total)
    if total >= 8 and done % max(total // 8, 1) == 0:
        log.info("replay: %d of %d segments, %d frames", done, total, stats.frames)


def _interrupted_creation(fs: FileSystem, log_id: int, path: str, damage: str, *, later_written: bool,
                          checkpoint: tuple[int, str]) -> None:
    """A segment without its header: an interrupted creation (a warning) when nothing proves
    it was written, else SegmentLostError."""
    proof = written_proof(path, log_id, later_written=later_written, checkpoint=checkpoint, fs=fs)
    if proof is not None:
        raise SegmentLostError(path=path, damage=damage, proof=proof)
    log.warning("segment %s %s and nothing proves it was ever written (a crash while creating it, or a "
                "stray file); ignoring it", path, damage)


def _skipped_segment(fs: FileSystem, log_id: int, path: str) -> SegmentInfo:
    """A segment before the checkpoint position: known from its .meta, not read."""
    meta = read_meta(path, fs)
    if meta is None:
        raise CorruptLogError(path=path, offset=0,
                              reason="segment before the checkpoint position has no .meta: it was never sealed")
    return SegmentInfo(log_id, path, meta.data_end, 0, meta.frames, meta.first_seq, meta.last_seq)


def _replay_segment(fs: FileSystem, state: _State, log_id: int, path: str, *, newest: bool,
                    offset: int = 0, keys: KeyChain, mode: RecoveryMode) -> tuple[SegmentInfo, bytes]:
    image, _size = scan_segment(path)
    results: list[ScanResult] = []
    try:
        opener = keys.opener(path, bytes(image[: fmt.SEGMENT_HEADER_SIZE]))
        frames, first_seq, last_seq = _apply_frames(state, image, log_id, path, newest=newest, results=results,
                                                    start=offset, opener=opener)
    finally:
        if not isinstance(image, bytes):
            image.close()
    scan = results[0]
    if scan.log_id != log_id:
        raise CorruptLogError(path=path, offset=0, reason=f"header names log id {scan.log_id}")
    _check_sealed(fs, path, scan, newest=newest)
    if scan.tail is not None:
        state.cut = _judge_tail(state, log_id, path, scan.tail, mode)
    state.stats.torn_bytes += scan.torn_bytes
    info = SegmentInfo(log_id, path, scan.data_end, scan.torn_bytes, frames, first_seq, last_seq)
    return info, scan.channel_id


def _apply_frames(state: _State, image, log_id: int, path: str, *, newest: bool,  # type: ignore[no-untyped-def]
                  results: list[ScanResult], start: int = 0,
                  opener: FrameOpener | None = None) -> tuple[int, int, int]:
    """Apply one segment's frames; returns its (frame count, first PUT seq, last PUT seq)."""
    log_base = fmt.make_pointer(log_id, 0)  # | offset: make_pointer, without a call per frame
    puts, takes = state.puts, state.takes
    max_txn = state.max_txn
    frames = 0
    first_seq = 0
    last_seq = 0
    for offset, ftype, length, txn, seq in iter_frames(image, path, newest=newest, result=results, start=start,
                                                       opener=opener):
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
            takes.setdefault(txn, []).extend(_decoded(decode_take, payload, path, offset))
        elif ftype == FrameType.COMMIT:
            kind, count, tag = _decoded(decode_commit, payload, path, offset)
            state.commit(txn, kind, count, path, offset, tag)
        elif ftype == FrameType.ROLLBACK:
            puts.pop(txn, None)
            takes.pop(txn, None)
        # NOOP: filler left by repair, nothing to apply
    state.max_seq, state.max_txn = max(state.max_seq, last_seq), max_txn
    state.stats.frames += frames
    return frames, first_seq, last_seq


_T = TypeVar("_T")


def _decoded(decode: Callable[[bytes], _T], payload: bytes, path: str, offset: int) -> _T:
    """``decode(payload)``; a payload its CRC vouches for but protobuf refuses (crafted, or
    written by a broken writer) is CorruptLogError at the frame's offset."""
    try:
        return decode(payload)
    except DecodeError as err:
        raise CorruptLogError(path=path, offset=offset,
                              reason=f"frame payload is not a valid message ({err})") from None


def _check_sealed(fs: FileSystem, path: str, scan: ScanResult, *, newest: bool) -> None:
    meta = read_meta(path, fs)
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


def _check_unique_ids(fs: FileSystem, segments: list[tuple[int, str]]) -> None:
    for log_id, path in segments:
        if log_id > fmt.MAX_LOG_ID:
            raise CorruptLogError(path=path, offset=0, reason=f"log id {log_id} is beyond 2^32: not a segment of "
                                                              "this channel; move the file away")
    for (a, first), (b, second) in zip(segments, segments[1:], strict=False):
        if a == b:
            _same_channel(_header_channel_id(fs, first), _header_channel_id(fs, second), second)
            raise CorruptLogError(path=second, offset=0, reason=f"log id {a} also exists as {first}")


def _header_channel_id(fs: FileSystem, path: str) -> bytes:
    head = read_file(fs, path, fmt.SEGMENT_HEADER_SIZE) or b""
    if len(head) < fmt.SEGMENT_HEADER_SIZE:
        return b""  # no header: identifies no channel (the scan reports the file)
    return fmt.segment_channel_id(head)


def _same_channel(known: bytes | None, found: bytes, path: str) -> bytes:
    if known is not None and found != known:
        raise ChannelIdentityError(
            f"{path} belongs to channel {found.hex()} but earlier segments to {known.hex()}: "
            "data directories of two channels are mixed; give each channel its own directories")
    return found
