"""The frames a transaction commits, and the bookkeeping of where its events live.

Pure functions over frames and pointers, used by the channel under its lock (and by replay);
they know nothing of transactions objects, only their ids and pointers.
"""

from __future__ import annotations

import sys
from array import array
from collections import Counter

from . import format as fmt
from .codec import TXN_TAKE, encode_commit, encode_take
from .format import FrameType
from .tags import TagRecord

__all__ = ["commit_frame", "count_logs", "count_refs", "fit_frames", "put_seq_range", "take_frames"]

PUT = int(FrameType.PUT)
MAX_TAKE_FRAME_POINTERS = 1 << 16


def fit_frames(frames: list[bytes], i: int, room: int) -> tuple[int, int]:
    """How many frames from ``i`` fit in ``room`` bytes: returns (end index, their size)."""
    total = sum(map(len, frames[i:])) if i else sum(map(len, frames))
    if total <= room:
        return len(frames), total
    j, size = i, 0
    while j < len(frames) and size + len(frames[j]) <= room:
        size += len(frames[j])
        j += 1
    return j, size


def put_seq_range(chunk: list[bytes]) -> tuple[int, int]:
    """Sequence numbers of the first and last PUT frame of ``chunk`` ((0, 0) when none).

    A chunk holds frames of one transaction: PUT frames in seq order, possibly followed by its
    COMMIT, so looking at both ends is enough.
    """
    ends = (chunk[0], chunk[-2] if len(chunk) > 1 else chunk[0], chunk[-1])
    seqs = [seq for ftype, seq in map(fmt.frame_type_and_seq, ends) if ftype == PUT]
    return (min(seqs), max(seqs)) if seqs else (0, 0)


def commit_frame(txn_id: int, kind: int, count: int, tag: TagRecord | None = None) -> bytes:
    return fmt.encode_frame(FrameType.COMMIT, txn_id, 0, encode_commit(kind, count, tag))


def take_frame_pointers(max_file_size: int) -> int:
    """Pointers per TAKE frame: at most 65,536, and few enough that a frame fits an empty segment
    (the payload is a packed fixed64 field: 8 bytes a pointer plus a tag and a length)."""
    room = max_file_size - fmt.SEGMENT_HEADER_SIZE - fmt.FRAME_OVERHEAD - 16
    return max(1, min(MAX_TAKE_FRAME_POINTERS, room // 8))


def take_frames(txn_id: int, taken: list[int], max_file_size: int) -> list[bytes]:
    """The TAKE frames of a take transaction's pointers, then its COMMIT."""
    per_frame = take_frame_pointers(max_file_size)
    frames = [fmt.encode_frame(FrameType.TAKE, txn_id, 0, encode_take(taken[k:k + per_frame]))
              for k in range(0, len(taken), per_frame)]
    frames.append(commit_frame(txn_id, TXN_TAKE, len(taken)))
    return frames


def count_logs(refcounts: Counter[int], pointers: list[int], sign: int) -> None:
    log_of = fmt.pointer_log_id
    if pointers and sign > 0 and log_of(pointers[0]) == log_of(pointers[-1]):
        refcounts[log_of(pointers[0])] += len(pointers)  # puts: log ids never decrease in a commit
        return
    # pointer_log_id written out: a call per pointer costs take commits measurable time (a
    # commit of 1,000 takes spent about twice as long counting with map(pointer_log_id, ...)).
    shift = fmt.POINTER_SHIFT
    for log_id, n in Counter([p >> shift for p in pointers]).items():
        refcounts[log_id] += sign * n
        if refcounts[log_id] == 0:
            del refcounts[log_id]


def count_refs(pointers: array[int]) -> dict[int, int]:
    """Events per log id among ``pointers``, sorted by log id: a recount from scratch (what a
    checkpoint's reference counts are checked against when it is loaded; verify's recount)."""
    if sys.byteorder != "little":
        raise NotImplementedError("count_refs assumes a little-endian machine")
    high_words = array("I", pointers.tobytes())[1::2]  # log id = upper 32 bits of each pointer
    return dict(sorted(Counter(high_words).items()))
