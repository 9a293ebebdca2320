"""Walking a segment frame by frame, damaged ranges included, and the NOOP frames covering them.

A *damaged range* starts where a frame fails validation and ends where the next valid frame
starts (found by its magic ``c7 1f`` and a full check, CRC included), or at the end of the
file (a *tail*). Ranges end at frame boundaries, so every frame outside them keeps its offset
when the range is overwritten by NOOP frames of exactly its length.

A NOOP frame is at least 28 bytes, and 29 is impossible (a protobuf payload of one byte does
not exist). Damage that starts and ends at frame boundaries always spans whole frames and
therefore at least 28 bytes, never 29 (no real frame is 29 bytes either). A shorter range can
only come from bytes inserted or removed; such a range absorbs the valid frames that follow it
until it can be covered, and those frames are reported as lost like the damaged ones. A range
longer than :data:`NOOP_MAX` is covered by several NOOP frames.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .. import format as fmt
from ..codec import varint
from ..format import FrameError, FrameType
from ..proto import channel_pb2 as pb
from ..segment import FrameOpener, all_zero, check_sealed, scan_segment
from ..tail import is_torn

__all__ = ["NOOP_MAX", "Damage", "Image", "Piece", "header_error", "noop_frame", "noop_frames", "noop_size_ok",
           "noop_sizes", "open_image", "walk", "without_torn_tail"]

NOOP_MAX = 1 << 24  # the largest NOOP frame repair writes
_MIN = fmt.FRAME_OVERHEAD
_GUESS_LIMIT = 10_000
_KNOWN_TYPES = frozenset(int(t) for t in FrameType)

Image = bytes | mmap.mmap


@dataclass(frozen=True, slots=True)
class Piece:
    """A frame: a valid one, or one whose header was read inside a damaged range."""

    offset: int
    type: int
    length: int
    txn: int
    seq: int
    verified: bool = True  # False: header read from damaged bytes, checksum failed or unchecked
    inner: tuple[Piece, ...] = ()  # a RUN frame's PUT frames (authenticated), at their offsets in the file

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def type_name(self) -> str:
        name = FrameType(self.type).name if self.type in _KNOWN_TYPES else f"type {self.type}"
        return name if self.verified else f"{name}?"


@dataclass(slots=True)
class Damage:
    log_id: int
    path: str
    offset: int
    length: int
    reason: str
    tail: bool  # nothing valid follows: the segment is cut at ``offset``
    missing: bool = False  # the bytes are not there at all (a sealed segment cut short)
    frames: list[Piece] = field(default_factory=list)  # what the range held, as far as readable

    @property
    def end(self) -> int:
        return self.offset + self.length


@contextmanager
def open_image(path: str) -> Iterator[tuple[Image, int]]:
    image, size = scan_segment(path)
    try:
        yield image, size
    finally:
        if not isinstance(image, bytes):
            image.close()


def header_error(image: Image) -> str | None:
    try:
        fmt.decode_segment_header(bytes(image[: fmt.SEGMENT_HEADER_SIZE]))
    except FrameError as err:
        return str(err)
    return None


def walk(image: Image, size: int, log_id: int, path: str, *,
         data_end: int | None, opener: FrameOpener | None = None) -> Iterator[Piece | Damage]:
    """Yield the valid frames and damaged ranges of a segment image in offset order; a RUN frame
    (a sealed run of an encrypted segment) with its PUT frames in ``inner``.

    ``data_end`` is the sealed size from ``.meta`` (None for an unsealed segment, whose zero tail
    is preallocated space and not damage). ``opener``: an encrypted segment's check of its PUT
    and RUN frames; a frame it refuses is damage like a checksum mismatch (a RUN frame is one
    frame: damage to any byte of it is damage to all of its events).
    """
    pos = fmt.SEGMENT_HEADER_SIZE
    while pos < size:
        try:
            ftype, length, txn, seq = fmt.check_frame(image, pos, size)
            inner = check_sealed(opener, image, pos, ftype, length, txn, seq) or ()
        except FrameError as err:
            if data_end is None and all_zero(image, pos):
                return
            damage = _damage(image, pos, size, log_id, path, str(err))
            yield damage
            pos = damage.end
            continue
        yield Piece(pos, ftype, length, txn, seq, inner=tuple(Piece(*frame) for frame in inner))
        pos += length
    if data_end is not None and data_end > size:
        yield Damage(log_id, path, size, data_end - size, tail=True, missing=True,
                     reason=f"sealed with {data_end} bytes but the file holds {size}: cut short")


def without_torn_tail(items: list[Piece | Damage], image: Image) -> list[Piece | Damage]:
    """The items of the newest, unsealed segment before its torn write, if it ends in one.

    As recovery sees it (log-format.md, section 5): the first damage after which no valid COMMIT
    frame follows is a write torn by a crash when the frame there is one a crash interrupted
    (:func:`~ingest_toolkit.channel.tail.is_torn`); recovery cuts it, so it is not repair's nor
    verify's to report as damage. Damage to a frame written whole stays: that is damage.
    """
    commits = [i for i, item in enumerate(items) if isinstance(item, Piece) and item.type == FrameType.COMMIT]
    last_commit = commits[-1] if commits else -1
    torn = next((i for i, item in enumerate(items) if isinstance(item, Damage) and i > last_commit), None)
    if torn is None or not is_torn(image, items[torn].offset):
        return items
    return items[:torn]


def _damage(image: Image, start: int, size: int, log_id: int, path: str, reason: str) -> Damage:
    at = _resync(image, start + 1, size)
    absorbed: list[Piece] = []
    while at is not None and not noop_size_ok(at - start):
        ftype, length, txn, seq = fmt.check_frame(image, at, size)
        absorbed.append(Piece(at, ftype, length, txn, seq))
        at += length
        if at < size and not _valid(image, at, size):
            at = _resync(image, at + 1, size)
        elif at >= size:
            at = None
    end = size if at is None else at
    guessed = _guess(image, start, absorbed[0].offset if absorbed else end)
    return Damage(log_id, path, start, end - start, reason, tail=at is None, frames=guessed + absorbed)


def _valid(image: Image, pos: int, size: int) -> bool:
    try:
        fmt.check_frame(image, pos, size)
    except FrameError:
        return False
    return True


def _resync(image: Image, start: int, size: int) -> int | None:
    """Offset of the first valid frame at or after ``start``."""
    at = image.find(fmt.FRAME_MAGIC, start)
    while at != -1:
        if _valid(image, at, size):
            return at
        at = image.find(fmt.FRAME_MAGIC, at + 1)
    return None


def _guess(image: Image, start: int, end: int) -> list[Piece]:
    """Frame headers that chain from ``start`` inside ``[start, end)``, unverified."""
    found: list[Piece] = []
    pos = start
    while pos + fmt.FRAME_HEADER.size <= end and len(found) < _GUESS_LIMIT:
        magic, ftype, _flags, length, txn, seq = fmt.FRAME_HEADER.unpack_from(image, pos)
        if magic != fmt.FRAME_MAGIC or ftype not in _KNOWN_TYPES or not _MIN <= length <= fmt.MAX_FRAME_SIZE:
            break
        found.append(Piece(pos, ftype, length, txn, seq, verified=False))
        pos += length  # a length past ``end`` (a frame cut off) ends the chain
    return found


# -- NOOP frames ---------------------------------------------------------------------------
def noop_size_ok(length: int) -> bool:
    """Whether ``length`` bytes can be covered by NOOP frames exactly."""
    return length >= _MIN and length != _MIN + 1


def noop_sizes(length: int) -> list[int]:
    """Lengths of the NOOP frames covering ``length`` bytes: each valid and at most NOOP_MAX."""
    if not noop_size_ok(length):
        raise ValueError(f"{length} bytes cannot be covered by NOOP frames")
    sizes = []
    while length > NOOP_MAX:
        chunk = NOOP_MAX if noop_size_ok(length - NOOP_MAX) else NOOP_MAX - 64
        sizes.append(chunk)
        length -= chunk
    sizes.append(length)
    return sizes


def noop_frames(length: int, reason: str, now_ns: int) -> bytes:
    """NOOP frames of exactly ``length`` bytes in total."""
    return b"".join(noop_frame(size, reason, length, now_ns) for size in noop_sizes(length))


def noop_frame(length: int, reason: str, replaced: int, now_ns: int) -> bytes:
    """One NOOP frame of exactly ``length`` bytes; ``reason`` is padded or cut to fit.

    The payload is a valid protobuf ``Noop``: the ``reason`` string (always present, padded with
    spaces) followed by ``replaced_bytes`` and ``repaired_unix_ns`` when they fit. A string field
    of ``room`` bytes exists for every ``room >= 2`` except a few isolated sizes (130, 16387, ...)
    where the varint of its length grows; dropping an optional field then shifts ``room`` off them.
    """
    size = length - _MIN
    if size == 0:
        return fmt.encode_frame(FrameType.NOOP, 0, 0, b"")
    options = (pb.Noop(replaced_bytes=replaced, repaired_unix_ns=now_ns).SerializeToString(),
               pb.Noop(replaced_bytes=replaced).SerializeToString(), b"")
    text = reason.encode("ascii", "replace")
    for extra in options:
        text_len = _string_len(size - len(extra))
        if text_len is not None:
            padded = text[:text_len].ljust(text_len, b" ")
            return fmt.encode_frame(FrameType.NOOP, 0, 0, b"\x0a" + varint(text_len) + padded + extra)
    raise ValueError(f"no NOOP frame of {length} bytes")


def _string_len(room: int) -> int | None:
    """Length ``n`` of a string whose field (tag, varint length, bytes) takes ``room`` bytes."""
    for width in range(1, 6):
        n = room - 1 - width
        if n >= 0 and len(varint(n)) == width:
            return n
    return None
