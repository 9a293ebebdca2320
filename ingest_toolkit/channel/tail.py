"""The torn tail of the newest segment: is it a torn write, or damage to acknowledged data?

Where the newest segment stops parsing, the bytes after it are a torn write only if they hold
no complete, valid COMMIT frame (``docs/log-format.md``, section 5): a commit returns after a
sync that covers everything before its COMMIT, so without one nothing there was acknowledged.

The search must stay linear in the bytes it scans, because clients choose event bodies and a
body may carry COMMIT headers every few bytes. A COMMIT frame as the writer makes it has a
signature fixed in 17 of its first 26 bytes: magic, type 3, flags 0, a length whose upper three
bytes are zero (at most :data:`MAX_COMMIT_FRAME`: kind, count, a tag of at most 128 bytes, first
seq, commit time), sequence 0, and a payload that starts with its ``kind`` (field 1, PUT or
TAKE). The regular expression engine finds candidates with that signature in C; only they are
checksummed, each over at most :data:`MAX_COMMIT_FRAME` bytes, and a claimed length that no
COMMIT can have costs nothing. At most two candidates start in any 26 bytes (the sequence and
kind fields exclude closer ones), so the work per scanned byte is bounded (:class:`TailStats`
counts candidates and checksummed bytes): 256 MiB of bodies made to defeat this search cost
seconds, not days (``bench/torn_tail.py``).
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from typing import Final

from crc32c import crc32c

from ..errors import CorruptLogError
from . import format as fmt
from .codec import TXN_TAKE, encode_commit
from .format import FrameType
from .tags import MAX_TAG_BYTES, TagRecord

__all__ = ["MAX_COMMIT_FRAME", "MAX_COMMIT_PAYLOAD", "TailStats", "all_zero", "classify_tail", "find_commit_frame"]

_U64: Final = (1 << 64) - 1
#: The longest payload a COMMIT frame can carry: every field at its widest.
MAX_COMMIT_PAYLOAD: Final = len(encode_commit(TXN_TAKE, _U64, TagRecord("x" * MAX_TAG_BYTES, _U64, _U64, _U64)))
MAX_COMMIT_FRAME: Final = fmt.FRAME_OVERHEAD + MAX_COMMIT_PAYLOAD

_MIN_COMMIT_FRAME: Final = fmt.FRAME_OVERHEAD + 2  # the kind field alone
assert MAX_COMMIT_FRAME < 256  # the length's upper three bytes are zero
# magic, type, flags, length (low byte, then three zero bytes), txn id, seq 0, Commit.kind.
# The match consumes the first 10 bytes only (two candidates can start 10 bytes apart, never
# closer), so finditer sees overlapping candidates; the rest of the signature is a lookahead.
_SIGNATURE: Final = re.compile(
    re.escape(fmt.FRAME_MAGIC + bytes([FrameType.COMMIT, 0]))
    + b"[" + re.escape(bytes([_MIN_COMMIT_FRAME])) + b"-" + re.escape(bytes([MAX_COMMIT_FRAME])) + b"]"
    + b"\x00\x00\x00..(?=.{6}\x00{8}\x08[\x01\x02])", re.DOTALL)

Image = bytes | mmap.mmap


@dataclass(slots=True)
class TailStats:
    """What a tail search did: candidates found by their prefix, bytes checksummed."""

    candidates: int = 0
    crc_bytes: int = 0


def classify_tail(data: Image, pos: int, path: str, *, newest: bool, reason: str,
                  stats: TailStats | None = None) -> int:
    """Return the count of bytes after ``pos`` to drop as a torn tail (0: only zeros), or raise
    CorruptLogError when they are damage: in a segment other than the newest, or followed by a
    complete COMMIT frame."""
    if all_zero(data, pos):
        return 0  # preallocated space never written: a clean end
    if not newest:
        raise CorruptLogError(path=path, offset=pos, reason=reason)
    commit_at = find_commit_frame(data, pos + 1, stats)
    if commit_at is not None:
        raise CorruptLogError(
            path=path, offset=pos,
            reason=f"{reason}; a complete COMMIT frame follows at offset {commit_at}, so this "
                   "is damage to written data, not a torn write")
    return len(data) - pos


def find_commit_frame(data: Image, start: int, stats: TailStats | None = None) -> int | None:
    """Offset of the first complete, valid COMMIT frame at or after ``start``; None if none.

    Linear: candidates are found by their signature (module docstring), at most two in any 26
    bytes, and each is checksummed over at most :data:`MAX_COMMIT_FRAME` bytes."""
    size, candidates, crc_bytes, found = len(data), 0, 0, None
    for match in _SIGNATURE.finditer(data, start):
        at = match.start()
        candidates += 1
        end = at + data[at + 4] - 4  # the length's low byte: the others are zero (signature)
        if end + 4 <= size:
            crc_bytes += end - at
            if crc32c(data[at:end]) == int.from_bytes(data[end:end + 4], "little"):
                found = at
                break
    if stats is not None:
        stats.candidates += candidates
        stats.crc_bytes += crc_bytes
    return found


def all_zero(data: Image, pos: int, chunk: int = 1 << 20) -> bool:
    """Whether every byte of ``data`` from ``pos`` on is zero (preallocated, never written)."""
    zeros = bytes(chunk)
    for start in range(pos, len(data), chunk):
        piece = data[start:start + chunk]
        if piece != zeros[: len(piece)]:
            return False
    return True
