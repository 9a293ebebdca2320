"""The tail of the newest segment: a torn write, or damage to data that may have been acknowledged?

Where the newest segment stops parsing, the bytes after it (``docs/log-format.md``, section 5):

* hold a complete, valid COMMIT frame: damage to written data (CorruptLogError);
* else are a **torn write** when the frame that fails is one a crash interrupted: its bytes are a
  prefix of what the writer wrote, the rest still reads as the zeros of preallocated space (the
  file ends inside the frame, its first bytes are zero or only the first magic byte, its length
  field and what follows are zero, it ends in four or more zero bytes where its CRC belongs, its
  zeros start on a 512-byte sector boundary, or a whole sector inside it is zero). A commit
  returns only after a sync covering its COMMIT, so under ``durability = "fsync"`` nothing in a
  torn write was acknowledged;
* else are **damage**: a frame written whole (every byte there) that fails its checks, or bytes
  that are not a frame where one must start. The frame may be the COMMIT of a transaction whose
  commit returned: recovery refuses it, or sets it aside (``recovery_mode``).

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

__all__ = ["MAX_COMMIT_FRAME", "MAX_COMMIT_PAYLOAD", "SECTOR", "Tail", "TailStats", "all_zero", "classify_tail",
           "find_commit_frame", "is_torn", "nonzero_end"]

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


SECTOR: Final = 512  # the smallest unit a disk writes whole: a crash tears writes at (or above) it
_HEAD: Final = fmt.FRAME_HEADER.size


@dataclass(frozen=True, slots=True)
class Tail:
    """What follows the last valid frame of the newest segment (module docstring).

    ``offset``: where the valid frames end (the cut); ``end``: where the bytes that are not zero
    end; ``torn``: a write the crash interrupted (else damage); ``reason``: why the frame at
    ``offset`` failed; ``frame``: its ``(type, txn id)`` when its header is readable."""

    offset: int
    end: int
    torn: bool
    reason: str
    frame: tuple[int, int] | None = None

    @property
    def nbytes(self) -> int:
        return self.end - self.offset


def classify_tail(data: Image, pos: int, path: str, *, newest: bool, reason: str,
                  stats: TailStats | None = None) -> Tail | None:
    """What follows the last valid frame at ``pos``: None when only zeros do (preallocated space,
    a clean end), else a :class:`Tail`. Raises CorruptLogError when the bytes are damage that no
    recovery mode may cut: in a segment other than the newest, or followed by a complete COMMIT."""
    if all_zero(data, pos):
        return None
    if not newest:
        raise CorruptLogError(path=path, offset=pos, reason=reason)
    commit_at = find_commit_frame(data, pos + 1, stats)
    if commit_at is not None:
        raise CorruptLogError(
            path=path, offset=pos,
            reason=f"{reason}; a complete COMMIT frame follows at offset {commit_at}, so this "
                   "is damage to written data, not a torn write")
    frame = None
    if len(data) - pos >= _HEAD and data[pos: pos + 2] == fmt.FRAME_MAGIC:
        _magic, ftype, _flags, _length, txn, _seq = fmt.FRAME_HEADER.unpack_from(data, pos)
        frame = (ftype, txn)
    return Tail(pos, nonzero_end(data, pos), is_torn(data, pos), reason, frame)


def is_torn(data: Image, pos: int) -> bool:
    """Whether the frame that fails at ``pos`` is one a crash interrupted: a prefix of it is there
    and the rest is still zeros (module docstring). A frame written whole is never torn."""
    size = len(data)
    start = bytes(data[pos: pos + 2])
    if start in (b"\x00\x00", fmt.FRAME_MAGIC[:1] + b"\x00") or size - pos < _HEAD:
        return True  # not a byte of the frame, or only its first one, was written; or the file ends in the header
    if start != fmt.FRAME_MAGIC:
        return False  # bytes that are no frame's where a frame starts: the writer never wrote them
    length = fmt.FRAME_HEADER.unpack_from(data, pos)[3]
    if not fmt.FRAME_OVERHEAD <= length <= fmt.MAX_FRAME_SIZE:
        return not any(bytes(data[pos + 4: pos + _HEAD]))  # the length field and what follows never written
    end = pos + length
    zeros_from = nonzero_end(data, pos, min(end, size))
    if _length_damaged(data, pos, zeros_from):
        return False  # a frame written whole whose length field changed afterwards
    if end > size:
        return True  # the file ends inside the frame
    if end - zeros_from >= 4 or (zeros_from < end and zeros_from % SECTOR == 0):
        return True  # its CRC never written, or its zeros start where a sector does
    return _zero_sector(data, pos, end)


_LENGTH_CHECK_LIMIT: Final = 64 << 20


def _length_damaged(data: Image, pos: int, zeros_from: int) -> bool:
    """Whether the bytes at ``pos`` up to ``zeros_from`` (where the zeros start) are a whole frame
    with another number in its length field: with the length that ends the frame there (its CRC
    may end in up to three zero bytes), its checksum holds. A torn write never leaves that: its
    length field is the writer's, or zero."""
    if zeros_from - pos > _LENGTH_CHECK_LIMIT:
        return False
    for length in range(zeros_from - pos, zeros_from - pos + 4):
        end = pos + length
        if not fmt.FRAME_OVERHEAD <= length or end > len(data):
            continue
        header = bytearray(data[pos: pos + _HEAD])
        header[4:8] = length.to_bytes(4, "little")
        crc = crc32c(bytes(data[pos + _HEAD: end - 4]), crc32c(bytes(header)))
        if crc == int.from_bytes(data[end - 4: end], "little"):
            return True
    return False


_ZERO_SECTOR: Final = bytes(SECTOR)


def _zero_sector(data: Image, pos: int, end: int) -> bool:
    """Whether a whole sector-aligned block of zeros lies in ``[pos, end)`` (a page of the write
    that never reached the disk). Runs of 512 zeros are found in C; when the first aligned block
    of a run is not all zero, no run that starts at or before that block can cover a later one,
    so the search goes on after it: one probe per aligned block at most."""
    at = pos
    while (hit := data.find(_ZERO_SECTOR, at, end)) >= 0:
        aligned = -(-hit // SECTOR) * SECTOR
        if aligned + SECTOR <= end and data[aligned: aligned + SECTOR] == _ZERO_SECTOR:
            return True
        at = aligned + 1
    return False


def nonzero_end(data: Image, pos: int, stop: int | None = None, chunk: int = 1 << 20) -> int:
    """The end of the bytes in ``[pos, stop)`` (default: to the end) that are not zero (``pos``
    when there are none)."""
    end = len(data) if stop is None else stop
    while end > pos:
        start = max(pos, end - chunk)
        stripped = bytes(data[start:end]).rstrip(b"\x00")
        if stripped:
            return start + len(stripped)
        end = start
    return pos


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
