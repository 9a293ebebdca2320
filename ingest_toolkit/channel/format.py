"""Byte layout of log segments, as specified in ``docs/log-format.md``.

Only constants, fixed-width layouts and the functions that frame and validate bytes live here;
reading and writing files is ``segment.py``'s job.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from crc32c import crc32c

__all__ = [
    "FORMAT_VERSION",
    "FRAME_HEADER",
    "FRAME_MAGIC",
    "FRAME_OVERHEAD",
    "FrameType",
    "SEGMENT_HEADER",
    "SEGMENT_HEADER_SIZE",
    "SEGMENT_MAGIC",
    "MAX_FRAME_SIZE",
    "FrameError",
    "check_frame",
    "encode_frame",
    "encode_frames",
    "frame_type_and_seq",
    "segment_channel_id",
    "POINTER_OFFSET_MASK",
    "POINTER_SHIFT",
    "MAX_LOG_ID",
    "encode_segment_header",
    "decode_segment_header",
    "segment_key",
    "SegmentKey",
    "ENCRYPTED_VERSION",
    "SEALED_RUNS_VERSION",
    "BOUND_RUNS_VERSION",
    "RUN_OVERHEAD",
    "make_pointer",
    "pointer_log_id",
    "pointer_offset",
]

FORMAT_VERSION: Final = 1

# Segment header: magic, version, header size, flags, log id, channel id, created (unix ns),
# reserved, CRC32C of the preceding 60 bytes.
SEGMENT_MAGIC: Final = b"ITKLOG\r\n"
SEGMENT_HEADER: Final = struct.Struct("<8sHHIQ16sQ12sI")
SEGMENT_HEADER_SIZE: Final = SEGMENT_HEADER.size  # 64
assert SEGMENT_HEADER_SIZE == 64
# Version 2: the same header for a segment whose PUT payloads are encrypted (docs/encryption.md).
# Its flags word holds the cipher (byte 12: 1 = AES-256-GCM), zero, and the key id (u16 at 14);
# its reserved bytes the session salt (48..55) and the key check value (56..59). A reader of
# version 1 only refuses such a segment instead of reading ciphertext as events.
ENCRYPTED_VERSION: Final = 2
# Version 3: encrypted like version 2, but the PUT frames of a transaction are sealed in runs (RUN
# frames, one AEAD call per run instead of one per event; docs/log-format.md, "Sealed runs"). Its
# header is that of version 2. A reader of version 1 or 2 refuses such a segment.
SEALED_RUNS_VERSION: Final = 3
# Version 4: sealed runs as in version 3, each bound to its place: the run's key is the segment's
# (derived from the session key and the log id), its nonce holds its offset and its associated
# data the log id and offset too, so a run copied or moved anywhere else fails authentication
# (docs/log-format.md, "Sealed runs"). What a channel writes now; versions 2 and 3 are still read.
BOUND_RUNS_VERSION: Final = 4
CIPHER_AES256_GCM: Final = 1
SALT_BYTES: Final = 8
CHECK_BYTES: Final = 4
_CRYPTO_FIELDS: Final = struct.Struct("<BxH")  # cipher, zero, key id: the flags word of version 2

# Frame: magic, type, flags, total length, txn id, sequence | payload | CRC32C(all before it).
FRAME_MAGIC: Final = b"\xc7\x1f"
FRAME_HEADER: Final = struct.Struct("<2sBBIQQ")
FRAME_TRAILER: Final = struct.Struct("<I")
FRAME_OVERHEAD: Final = FRAME_HEADER.size + FRAME_TRAILER.size  # 28
MAX_FRAME_SIZE: Final = 1 << 30  # a frame's length field never exceeds 1 GiB
RUN_OVERHEAD: Final = FRAME_OVERHEAD + 16  # a RUN frame's header, AES-GCM tag and CRC around its PUT frames
MAX_SEGMENT_SIZE: Final = 1 << 32  # pointer offsets are 32-bit

# Event pointer: (log id << POINTER_SHIFT) | frame offset, so pointers order like (log id, offset).
# make_pointer / pointer_log_id / pointer_offset are the rule; the constants are for vectorised
# code (numpy) and the few hot loops that cannot afford a call per pointer.
POINTER_SHIFT: Final = 32
POINTER_OFFSET_MASK: Final = (1 << POINTER_SHIFT) - 1
MAX_LOG_ID: Final = (1 << 32) - 1  # a pointer holds the log id in 32 bits

_pack_header = FRAME_HEADER.pack
_pack_trailer = FRAME_TRAILER.pack
_unpack_header = FRAME_HEADER.unpack_from
_unpack_trailer = FRAME_TRAILER.unpack_from


class FrameType(IntEnum):
    PUT = 1
    TAKE = 2
    COMMIT = 3
    ROLLBACK = 4
    NOOP = 5  # filler written by `channel repair` over damaged bytes; replay skips it
    RUN = 6  # a sealed run of PUT frames (version 3 and 4 segments only): header | ciphertext | tag | CRC


class FrameError(ValueError):
    """A frame failed validation; ``reason`` says how. Turned into CorruptLogError by callers."""


def encode_frame(ftype: int, txn_id: int, seq: int, payload: bytes) -> bytes:
    frame = _pack_header(FRAME_MAGIC, ftype, 0, len(payload) + FRAME_OVERHEAD, txn_id, seq) + payload
    return frame + _pack_trailer(crc32c(frame))


def encode_frames(ftype: int, txn_id: int, first_seq: int, payloads: list[bytes]) -> list[bytes]:
    """:func:`encode_frame` of each payload, with sequence numbers from ``first_seq`` on.

    The put hot path: the body of :func:`encode_frame` is written out in the loop because a call
    per frame costs about a third more time per frame (measured on 256-byte events); a test keeps
    the two byte-identical.
    """
    pack_header, pack_trailer, magic, overhead = _pack_header, _pack_trailer, FRAME_MAGIC, FRAME_OVERHEAD
    frames: list[bytes] = []
    append = frames.append
    for seq, payload in enumerate(payloads, first_seq):
        frame = pack_header(magic, ftype, 0, len(payload) + overhead, txn_id, seq) + payload
        append(frame + pack_trailer(crc32c(frame)))
    return frames


def frame_type_and_seq(frame: bytes) -> tuple[int, int]:
    """The type and sequence number fields of an encoded frame's header (not validated)."""
    _magic, ftype, _flags, _length, _txn_id, seq = _unpack_header(frame)
    return ftype, seq


Buffer = bytes | memoryview | mmap.mmap


def check_frame(buf: Buffer, pos: int, limit: int) -> tuple[int, int, int, int]:
    """Validate the frame at ``buf[pos:]`` (not reading past ``limit``).

    Returns ``(type, length, txn_id, seq)``; raises FrameError naming the first problem.
    """
    if limit - pos < FRAME_OVERHEAD:
        raise FrameError("truncated frame header")
    magic, ftype, flags, length, txn_id, seq = _unpack_header(buf, pos)
    if magic != FRAME_MAGIC:
        raise FrameError(f"bad frame magic {bytes(magic).hex()}")
    if not FRAME_OVERHEAD <= length <= MAX_FRAME_SIZE:
        raise FrameError(f"impossible frame length {length}")
    if pos + length > limit:
        raise FrameError(f"frame of {length} bytes runs past the end of the data")
    end = pos + length - 4
    crc = crc32c(buf[pos:end]) if length <= _COPY_LIMIT else _crc_in_place(buf, pos, end)
    if crc != _unpack_trailer(buf, end)[0]:
        raise FrameError("checksum mismatch")
    if ftype not in _FRAME_TYPES or flags != 0:
        raise FrameError(f"unknown frame type {ftype} / flags {flags}")
    return ftype, length, txn_id, seq


_FRAME_TYPES: Final = frozenset(int(t) for t in FrameType)
_COPY_LIMIT: Final = 1 << 16  # larger frames are checksummed in place, not copied


def _crc_in_place(buf: Buffer, start: int, end: int) -> int:
    """CRC32C of ``buf[start:end]`` without copying it (a claimed length sizes no allocation);
    the views are released at once, so an mmap can be closed afterwards."""
    with memoryview(buf) as view, view[start:end] as span:
        return crc32c(span)


@dataclass(frozen=True, slots=True)
class SegmentKey:
    """The encryption fields of an encrypted (version 2, 3 or 4) segment header."""

    key_id: int  # 1..65535
    salt: bytes  # SALT_BYTES, drawn at random by the session that wrote the segment
    check: bytes  # CHECK_BYTES derived with the session key: tells a wrong key before a frame is read
    version: int = ENCRYPTED_VERSION  # 2: each PUT frame alone; 3: sealed runs; 4: runs bound to their place

    @property
    def runs(self) -> bool:
        """PUT frames are sealed in runs (RUN frames): versions 3 and 4."""
        return self.version >= SEALED_RUNS_VERSION

    @property
    def bound(self) -> bool:
        """Each run is authenticated with its segment and offset: version 4."""
        return self.version >= BOUND_RUNS_VERSION


def encode_segment_header(log_id: int, channel_id: bytes, created_ns: int, key: SegmentKey | None = None) -> bytes:
    version, flags, reserved = FORMAT_VERSION, 0, bytes(12)
    if key is not None:
        assert len(key.salt) == SALT_BYTES and len(key.check) == CHECK_BYTES and 1 <= key.key_id <= 0xFFFF
        assert key.version in _ENCRYPTED_VERSIONS
        version = key.version
        flags = int.from_bytes(_CRYPTO_FIELDS.pack(CIPHER_AES256_GCM, key.key_id), "little")
        reserved = key.salt + key.check
    head = SEGMENT_HEADER.pack(
        SEGMENT_MAGIC, version, SEGMENT_HEADER_SIZE, flags, log_id, channel_id, created_ns, reserved, 0,
    )[:-4]
    return head + _pack_trailer(crc32c(head))


def segment_key(buf: bytes) -> SegmentKey | None:
    """The encryption fields of a valid segment header; None for a plain (version 1) segment.
    Raises FrameError when the header is invalid."""
    decode_segment_header(buf)
    _magic, version, _hsize, flags, _log_id, _channel_id, _created, reserved, _crc = SEGMENT_HEADER.unpack_from(buf)
    if version == FORMAT_VERSION:
        return None
    _cipher, key_id = _CRYPTO_FIELDS.unpack(flags.to_bytes(4, "little"))
    salt, check = bytes(reserved[:SALT_BYTES]), bytes(reserved[SALT_BYTES:])
    return SegmentKey(key_id, salt, check, version)


def segment_channel_id(buf: bytes) -> bytes:
    """The channel id field of a segment header, read without validating the header."""
    return bytes(SEGMENT_HEADER.unpack_from(buf)[5])


def decode_segment_header(buf: bytes) -> tuple[int, bytes, int]:
    """Return ``(log_id, channel_id, created_ns)``; raises FrameError when invalid."""
    if len(buf) < SEGMENT_HEADER_SIZE:
        raise FrameError("segment shorter than its header")
    magic, version, hsize, flags, log_id, channel_id, created_ns, _r, crc = SEGMENT_HEADER.unpack_from(buf)
    if magic != SEGMENT_MAGIC:
        raise FrameError(f"not a log segment (magic {magic!r})")
    if crc32c(buf[: SEGMENT_HEADER_SIZE - 4]) != crc:
        raise FrameError("segment header checksum mismatch")
    if version not in _VERSIONS or hsize != SEGMENT_HEADER_SIZE:
        raise FrameError(f"segment format version {version} is not supported (expected one of "
                         f"{', '.join(map(str, _VERSIONS))})")
    if version != FORMAT_VERSION:
        cipher, key_id = _CRYPTO_FIELDS.unpack(flags.to_bytes(4, "little"))
        if cipher != CIPHER_AES256_GCM or not key_id:
            raise FrameError(f"unknown cipher {cipher} or key id {key_id} in an encrypted segment header")
    return log_id, channel_id, created_ns


_ENCRYPTED_VERSIONS: Final = (ENCRYPTED_VERSION, SEALED_RUNS_VERSION, BOUND_RUNS_VERSION)
_VERSIONS: Final = (FORMAT_VERSION, *_ENCRYPTED_VERSIONS)


def make_pointer(log_id: int, offset: int) -> int:
    return (log_id << POINTER_SHIFT) | offset


def pointer_log_id(pointer: int) -> int:
    return pointer >> POINTER_SHIFT


def pointer_offset(pointer: int) -> int:
    return pointer & POINTER_OFFSET_MASK
