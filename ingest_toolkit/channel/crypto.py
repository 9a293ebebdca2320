"""Encryption at rest of event data in the log: AES-256-GCM over every PUT frame's payload.

The design and its threat model are in ``docs/encryption.md``; the byte layout in
``docs/log-format.md`` (segment header version 2, encrypted PUT frames). In short:

* Keys are 32 bytes, each under a numeric key id (1..65535), read from a key file that only its
  owner can read (mode 0600 or 0400) or from an environment variable (:func:`load_keyring`).
* Each channel *session* (one open of the channel: every open starts a new segment, and no
  segment is written by two sessions) draws a random 8-byte salt and derives its own subkey
  with HKDF-SHA256 from the master key, the channel id and the salt. Every segment the session
  writes carries the key id, the salt and a 4-byte key check value in its header.
* A session writes version 4 segments: the PUT frames of a put call are *sealed runs*, RUN frames
  whose body is the ciphertext of plain PUT frames back to back (at most ``RUN_BYTES``), with one
  tag: one AEAD call per run, not per event (that call's fixed cost, about 0.6 us, was most of
  the cost of encryption). GCM keeps the length, so each inner frame keeps its file offset and
  event pointers name inner frames as in a plain segment. Segments of version 2 (one AEAD call
  per PUT frame) and 3 (runs not bound to their place), written by earlier releases, are read.
* A run is bound to its place. It is sealed when it is appended, under the segment's own key
  (HKDF-SHA256 of the session subkey and the log id), with the nonce ``first seq (u64) | offset
  (u32)`` and the associated data ``frame header | log id (u64) | offset (u64)``: a run copied
  over another, moved, or replayed from another segment fails authentication. No nonce repeats
  under a segment key: sequence numbers are unique in a session, so two runs differ in their
  first seq, and the same run appended twice (a write retried after ENOSPC) lands either at the
  same offset (the same nonce, associated data and plaintext: the same bytes) or at another
  (another nonce). Two sessions share a subkey only if they draw the same salt under the same
  key and channel.
* The frame header (type, length, transaction id, sequence number) is in the associated data, so
  a ciphertext cannot be moved to another frame; the CRC32C still covers the whole frame.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from crc32c import crc32c

if TYPE_CHECKING:
    from .config import ChannelConfig

# ``cryptography`` is imported when a key is first used, not with the channel package: a channel
# without encryption does not pay for loading it (about 10-30 ms here).

from ..errors import ConfigError, CorruptLogError, EncryptionKeyError
from . import format as fmt
from .format import Buffer, SegmentKey
from .fs import FileSystem, read_file
from .segment import AUTH_FAILED, MALFORMED_RUN, OUTSIDE_RUN, RUN_NOT_ALLOWED

__all__ = ["CHECK_BYTES", "KEY_BYTES", "RUN_BYTES", "SALT_BYTES", "TAG_BYTES", "KeyChain", "KeyRing", "Opener",
           "Sealer", "SegmentKey", "keychain_of", "load_keyring", "parse_keys", "run_limit"]

KEY_BYTES: Final = 32
SALT_BYTES: Final = fmt.SALT_BYTES
CHECK_BYTES: Final = fmt.CHECK_BYTES
TAG_BYTES: Final = 16
MAX_KEY_ID: Final = 0xFFFF
_INFO: Final = b"ingest-toolkit log v2 session key\x00"
_SEGMENT_INFO: Final = b"ingest-toolkit log v4 segment key\x00"
_PUT: Final = int(fmt.FrameType.PUT)
_RUN: Final = int(fmt.FrameType.RUN)
# The most bytes of PUT frames one RUN frame seals (a single larger frame is a run alone). One
# AEAD call per 64 KiB costs nothing measurable (0.6 us per 230 events of 256 bytes), and a take
# of one event reads and decrypts at most that much (about 20 us). Larger runs cost more, not less: buffers
# of 128 KiB and more are mapped afresh by malloc on each put, and their page faults cost more
# than the encryption (measured: 0.35 us per event at 256 KiB, none at 64 KiB). Never more than a
# quarter of max_file_size: runs must not waste segments.
RUN_BYTES: Final = 64 * 1024
# Where the PUT frames of a RUN frame are: ``(shift, positions)``, the pointer of each being the
# RUN frame's pointer + shift + its position (positions of the whole put call, shift undoing it).
Placement = tuple[int, list[int]]
_HEAD: Final = fmt.FRAME_HEADER.size
_pack_header = fmt.FRAME_HEADER.pack
_unpack_header = fmt.FRAME_HEADER.unpack_from
_pack_crc = fmt.FRAME_TRAILER.pack
_CRC = fmt.FRAME_TRAILER.unpack_from
_NONCE: Final = struct.Struct("<QI")  # versions 2 and 3: sequence number, frame type (12 bytes)
_BOUND_NONCE: Final = struct.Struct("<QI")  # version 4: the run's first sequence number, its offset (u32)
_PLACE: Final = struct.Struct("<QQ")  # version 4, after the header in the associated data: log id, offset


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The configured keys. ``active``: the key id new segments are written with (None: keys
    to read old segments only). ``setting``: where the keys come from, for error messages."""

    keys: Mapping[int, bytes]
    active: int | None
    setting: str

    def __repr__(self) -> str:  # never the key bytes
        return f"KeyRing(ids={sorted(self.keys)}, active={self.active}, setting={self.setting!r})"


def parse_keys(text: str, where: str, key: str) -> dict[int, bytes]:
    """Keys from ``<id>:<key>`` entries separated by whitespace or commas; ``<key>`` is 64 hex
    digits or the base64 of 32 bytes; ``#`` starts a comment to the end of the line.
    ``where``/``key`` name the source and the setting in errors (never a key's bytes)."""
    keys: dict[int, bytes] = {}
    lines = (line.split("#", 1)[0] for line in text.splitlines())
    for number, entry in enumerate((e for line in lines for e in line.replace(",", " ").split()), 1):
        key_id, sep, material = entry.partition(":")
        if not sep or not key_id.isdigit() or not 1 <= int(key_id) <= MAX_KEY_ID:
            raise ConfigError(f"{where}: entry {number} is not '<key id>:<key>' with a key id from 1 to "
                              f"{MAX_KEY_ID}", key=key)
        if int(key_id) in keys:
            raise ConfigError(f"{where}: key id {int(key_id)} is given twice", key=key)
        keys[int(key_id)] = _key_bytes(material, f"{where}: key id {int(key_id)}", key)
    if not keys:
        raise ConfigError(f"{where} holds no key: write '<key id>:<64 hex digits or base64 of 32 bytes>'", key=key)
    return keys


def _key_bytes(material: str, where: str, key: str) -> bytes:
    try:
        raw = bytes.fromhex(material) if len(material) == 2 * KEY_BYTES else base64.b64decode(material, validate=True)
    except (ValueError, binascii.Error):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise ConfigError(f"{where} is not a {KEY_BYTES}-byte key (64 hex digits or base64 of 32 bytes)", key=key)
    return raw


def load_keyring(*, key_file: str | None, key_env: str | None, active: int | None,
                 environ: Mapping[str, str] | None = None) -> KeyRing | None:
    """The keys of ``channel.encryption_key_file`` and/or ``channel.encryption_key_env`` (both
    may be given: their ids must differ); None when neither is set. A key file that group or
    others may read or write is refused, as is an active key id that no source holds."""
    keys: dict[int, bytes] = {}
    settings = []
    if key_file is not None:
        settings.append(f"the key file {key_file} (channel.encryption_key_file)")
        _merge(keys, parse_keys(_read_key_file(key_file), key_file, "channel.encryption_key_file"),
               "channel.encryption_key_file")
    if key_env is not None:
        settings.append(f"the environment variable {key_env} (channel.encryption_key_env)")
        value = (os.environ if environ is None else environ).get(key_env)
        if value is None:
            raise ConfigError(f"channel.encryption_key_env names the environment variable {key_env}, which is "
                              "not set: set it to '<key id>:<key>' entries", key="channel.encryption_key_env")
        _merge(keys, parse_keys(value, f"environment variable {key_env}", "channel.encryption_key_env"),
               "channel.encryption_key_env")
    if not settings:
        return None
    setting = " and ".join(settings)
    if active is not None and active not in keys:
        raise ConfigError(f"channel.encryption_key_id is {active} but {setting} holds no key with that id "
                          f"(it holds {sorted(keys)})", key="channel.encryption_key_id")
    return KeyRing(keys, active, setting)


def keychain_of(config: ChannelConfig) -> KeyChain:
    """The key chain of a channel's configuration (keys read now; a problem is a ConfigError)."""
    return KeyChain(load_keyring(key_file=config.encryption_key_file, key_env=config.encryption_key_env,
                                 active=config.encryption_key_id))


def _merge(keys: dict[int, bytes], more: dict[int, bytes], key: str) -> None:
    both = sorted(set(keys) & set(more))
    if both:
        raise ConfigError(f"key id {both[0]} is in both the key file and the environment variable", key=key)
    keys.update(more)


def _read_key_file(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as err:
        raise ConfigError(f"cannot read the key file {path} ({err.strerror}): check "
                          "channel.encryption_key_file", key="channel.encryption_key_file") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode) or mode & 0o077:
            raise ConfigError(f"the key file {path} has mode {stat.filemode(mode)}: a key file must be a regular "
                              f"file that only its owner can read (chmod 600 {path})",
                              key="channel.encryption_key_file")
        data = f.read(1 << 20)
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(f"the key file {path} is not ASCII text of '<key id>:<key>' entries",
                          key="channel.encryption_key_file") from None


def run_limit(max_file_size: int) -> int:
    """The most bytes of PUT frames a run seals in a channel with ``max_file_size``."""
    return min(RUN_BYTES, max_file_size // 4)


def _derive(key: bytes, channel_id: bytes, salt: bytes) -> tuple[bytes, bytes]:
    """The session subkey and the key check value for ``salt``."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    out = HKDF(hashes.SHA256(), KEY_BYTES + CHECK_BYTES, salt=None, info=_INFO + channel_id + salt).derive(key)
    return out[:KEY_BYTES], out[KEY_BYTES:]


def _segment_key(subkey: bytes, log_id: int) -> bytes:
    """The key of one version 4 segment: its runs are sealed under it (module docstring)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(hashes.SHA256(), KEY_BYTES, salt=None, info=_SEGMENT_INFO + struct.pack("<Q", log_id)).derive(subkey)


class Sealer:
    """The write side of one session: frames PUT frames into runs, and seals each run when the
    log writer appends it, bound to its place (version 4 segments)."""

    def __init__(self, keyring: KeyRing, channel_id: bytes) -> None:
        if keyring.active is None:
            raise ValueError("no active key")  # the channel builds a Sealer only with one
        salt = os.urandom(SALT_BYTES)
        self._subkey, check = _derive(keyring.keys[keyring.active], channel_id, salt)
        self.segment_key = SegmentKey(keyring.active, salt, check, fmt.BOUND_RUNS_VERSION)
        self._segment: tuple[int, Any] = (0, None)  # (log id, its AESGCM.encrypt_into): one segment at a time

    def put_runs(self, txn_id: int, first_seq: int, payloads: list[bytes],
                 limit: int = RUN_BYTES) -> tuple[list[bytes], list[Placement]]:
        """*Open* RUN frames holding the PUT frames of ``payloads`` (sequence numbers from
        ``first_seq``) in clear, each run at most ``limit`` bytes of PUT frames unless one frame
        alone is more; and for each where its PUT frames are (:data:`Placement`). An open run
        has the size of the sealed one; :meth:`seal_chunk` seals it where it is written."""
        if not payloads:
            return [], []  # no run: a RUN frame holds at least one PUT frame
        frames = fmt.encode_frames(_PUT, txn_id, first_seq, payloads)
        # Offsets of the frames from the first, in C: a Python loop per frame costs more than the AEAD calls saved.
        starts = list(itertools.accumulate(map(len, frames), initial=0))
        n = len(frames)
        if starts[n] <= limit:
            return [_open_run(txn_id, first_seq, frames)], [(_HEAD, starts[:n])]
        runs: list[bytes] = []
        placements: list[Placement] = []
        i = 0
        while i < n:
            j = max(i + 1, bisect.bisect_right(starts, starts[i] + limit) - 1)  # one frame, however large
            runs.append(_open_run(txn_id, first_seq + i, frames[i:j]))
            placements.append((_HEAD - starts[i], starts[i:j]))
            i = j
        return runs, placements

    def seal_chunk(self, chunk: list[bytes], runs: int, log_id: int, offset: int) -> bytearray:
        """The bytes to write at ``offset`` of segment ``log_id`` for ``chunk``, whose first
        ``runs`` frames are open runs: those sealed in place, the others copied as they are.
        One buffer for the whole write: every copy of a large run costs page faults."""
        out = bytearray(sum(map(len, chunk)))
        encrypt_into = self._cipher(log_id)
        at = 0
        with memoryview(out) as view:
            for k, frame in enumerate(chunk):
                size = len(frame)
                if k >= runs:
                    view[at: at + size] = frame
                    at += size
                    continue
                header = frame[:_HEAD]
                seq = _unpack_header(header)[5]
                view[at: at + _HEAD] = header
                with memoryview(frame) as source, source[_HEAD: size - TAG_BYTES - 4] as plain, \
                        view[at + _HEAD: at + size - 4] as sealed, view[at: at + size - 4] as covered:
                    where = offset + at
                    encrypt_into(_BOUND_NONCE.pack(seq, where), plain, bytes(header) + _PLACE.pack(log_id, where),
                                 sealed)
                    view[at + size - 4: at + size] = _pack_crc(crc32c(covered))
                at += size
        return out

    def _cipher(self, log_id: int) -> Any:
        """``encrypt_into`` of segment ``log_id``'s key (derived once per segment)."""
        current, encrypt_into = self._segment
        if current != log_id or encrypt_into is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            encrypt_into = AESGCM(_segment_key(self._subkey, log_id)).encrypt_into
            self._segment = (log_id, encrypt_into)
        return encrypt_into


def _open_run(txn_id: int, first_seq: int, frames: list[bytes]) -> bytes:
    """A RUN frame with ``frames`` in clear where its ciphertext will be, and room for the tag
    and CRC: what a transaction keeps until the log writer seals it at its place."""
    size = sum(map(len, frames)) + fmt.RUN_OVERHEAD
    return b"".join([_pack_header(fmt.FRAME_MAGIC, _RUN, 0, size, txn_id, first_seq), *frames,
                     bytes(TAG_BYTES + 4)])


class Opener:
    """The read side of one segment: authenticates and decrypts PUT frames (version 2, ``runs``
    False) or RUN frames (versions 3 and 4, ``runs`` True; in version 4 bound to ``log_id`` and
    their offsets, under the segment's own key)."""

    def __init__(self, key: bytes, key_id: int, version: int = fmt.ENCRYPTED_VERSION, log_id: int = 0) -> None:
        self.key_id = key_id
        self.runs = version >= fmt.SEALED_RUNS_VERSION
        self.bound = version >= fmt.BOUND_RUNS_VERSION
        self.log_id = log_id
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._decrypt = AESGCM(key).decrypt
        self._invalid: type[Exception] = InvalidTag

    def payload(self, buf: Buffer, pos: int, length: int, seq: int) -> bytes:
        """The plaintext payload of the frame at ``pos`` (already checked: magic, length, CRC);
        raises InvalidTag when it is not authentic."""
        view = memoryview(buf)
        return self._decrypt(_NONCE.pack(seq, _PUT), view[pos + _HEAD: pos + length - 4], view[pos: pos + _HEAD])

    def check_put(self, buf: Buffer, pos: int, length: int, seq: int) -> None:
        """Raise FrameError unless the top-level PUT frame at ``pos`` (already checked) is
        authentic: in version 3 no PUT frame stands outside a run."""
        if self.runs:
            raise fmt.FrameError(OUTSIDE_RUN)
        if not self.authentic(buf, pos, length, seq):
            raise fmt.FrameError(AUTH_FAILED)

    def run_frames(self, buf: Buffer, pos: int, length: int, txn: int,
                   seq: int) -> list[tuple[int, int, int, int, int]]:
        """``(offset, type, length, txn, seq)`` of the PUT frames sealed in the RUN frame at
        ``pos`` (already checked: magic, length, CRC), offsets in the file; FrameError when it
        fails authentication, is not allowed here (version 2) or is malformed."""
        if not self.runs:
            raise fmt.FrameError(RUN_NOT_ALLOWED)
        plain = self.unseal(buf, pos, length, seq)
        if plain is None:
            raise fmt.FrameError(AUTH_FAILED)
        return run_frames(plain, pos + _HEAD, txn, seq)

    def unseal(self, buf: Buffer, pos: int, length: int, seq: int, offset: int | None = None) -> bytes | None:
        """The plaintext (PUT frames) of the RUN frame at ``pos`` of ``buf``; None when not
        authentic. ``offset``: where the frame lies in its segment (default ``pos``: ``buf`` is
        the whole segment); a version 4 run authenticates only there."""
        head = pos + _HEAD  # views, not slices: a run is up to RUN_BYTES; released at once (an mmap closes after)
        with memoryview(buf) as view, view[head: pos + length - 4] as sealed, view[pos: head] as header:
            if self.bound:
                where = pos if offset is None else offset
                nonce, aad = _BOUND_NONCE.pack(seq, where), bytes(header) + _PLACE.pack(self.log_id, where)
            else:
                nonce, aad = _NONCE.pack(seq, _RUN), bytes(header)
            try:
                return self._decrypt(nonce, sealed, aad)
            except (self._invalid, struct.error):  # struct.error: an offset beyond 32 bits is no place of a run
                return None

    def authentic(self, buf: Buffer, pos: int, length: int, seq: int) -> bool:
        """Whether the version 2 PUT frame at ``pos`` (already checked) authenticates: replay's
        check of every frame it reads. Slices copy (a few hundred bytes) but cost less than views."""
        head = pos + _HEAD
        try:
            self._decrypt(_NONCE.pack(seq, _PUT), buf[head: pos + length - 4], buf[pos: head])
        except self._invalid:
            return False
        return True

    def open_frames(self, buf: bytes, offsets: list[int]) -> tuple[list[bytes], list[int]] | None:
        """The plaintext payloads and sequence numbers of the PUT frames at ``offsets``, each
        checked and authenticated; None when any frame fails, for :meth:`plain_frames` and the
        exact reader to name it. The take's hot path. Magic and flags are not compared: the
        header is the associated data, so the tag fails when they changed. The CRC is: a flip in
        the CRC field alone is refused, as in a plain segment."""
        decrypt, pack_nonce, unpack, crc_of, unpack_crc = self._decrypt, _NONCE.pack, _unpack_header, crc32c, _CRC
        view, size, least = memoryview(buf), len(buf), fmt.FRAME_OVERHEAD + TAG_BYTES
        payloads: list[bytes] = []
        seqs: list[int] = []
        add_payload, add_seq = payloads.append, seqs.append
        try:
            for pos in offsets:
                _magic, ftype, _flags, length, _txn, seq = unpack(buf, pos)
                end = pos + length - 4
                if (ftype != _PUT or length < least or end + 4 > size
                        or crc_of(view[pos:end]) != unpack_crc(buf, end)[0]):
                    return None
                add_payload(decrypt(pack_nonce(seq, _PUT), buf[pos + _HEAD: end], buf[pos: pos + _HEAD]))
                add_seq(seq)
        except (self._invalid, struct.error):
            return None
        return payloads, seqs

    def plain_frames(self, buf: bytes, offsets: list[int], path: str, start: int) -> bytes:
        """``buf`` with every valid PUT frame at ``offsets`` replaced in place by its plaintext
        frame (shorter by the tag; the freed bytes after it are zero), so that pointers still
        name the frames. A frame that fails a check is left as it is (the exact reader reports
        it); one that fails authentication raises CorruptLogError."""
        out = bytearray(buf)
        size = len(buf)
        for pos in offsets:
            try:
                ftype, length, txn, seq = fmt.check_frame(buf, pos, size)
            except fmt.FrameError:
                continue
            if ftype != _PUT:
                continue
            try:
                plain = self.payload(buf, pos, length, seq)
            except self._invalid:
                raise CorruptLogError(path=path, offset=pos + start, reason=AUTH_FAILED) from None
            frame = _pack_header(fmt.FRAME_MAGIC, _PUT, 0, length - TAG_BYTES, txn, seq) + plain
            out[pos: pos + length] = frame + _pack_crc(crc32c(frame)) + bytes(TAG_BYTES)
        return bytes(out)


def run_frames(plain: bytes, base: int, txn: int, first_seq: int) -> list[tuple[int, int, int, int, int]]:
    """The PUT frames of an authentic run's plaintext ``plain``, which starts at file offset
    ``base``: each must be a valid PUT frame of transaction ``txn``, with sequence numbers from
    ``first_seq`` on, and together they fill ``plain`` exactly (else FrameError: the writer never
    makes such a run, so only a bug or a key holder can)."""
    found: list[tuple[int, int, int, int, int]] = []
    pos, size, seq = 0, len(plain), first_seq
    while pos < size:
        try:
            ftype, length, frame_txn, frame_seq = fmt.check_frame(plain, pos, size)
        except fmt.FrameError as err:
            raise fmt.FrameError(f"{MALFORMED_RUN}: its frame at offset {base + pos}: {err}") from None
        if ftype != _PUT or frame_txn != txn or frame_seq != seq:
            raise fmt.FrameError(f"{MALFORMED_RUN}: its frame at offset {base + pos} is not PUT frame {seq} of "
                                 f"transaction {txn}")
        found.append((base + pos, ftype, length, txn, seq))
        pos += length
        seq += 1
    if not found:
        raise fmt.FrameError(f"{MALFORMED_RUN}: it holds no frame")
    return found


class KeyChain:
    """Openers for the segments of a channel, by their header; derives each session's subkey once."""

    def __init__(self, keyring: KeyRing | None) -> None:
        self.keyring = keyring
        self._subkeys: dict[tuple[int, bytes, bytes], bytes] = {}
        self._openers: dict[tuple[int, bytes, bytes, int], Opener] = {}  # versions 2 and 3: one per session

    def sealer(self, channel_id: bytes) -> Sealer | None:
        """A new session's sealer when an active key is configured (else None: write in clear)."""
        if self.keyring is None or self.keyring.active is None:
            return None
        return Sealer(self.keyring, channel_id)

    def check_segments(self, fs: FileSystem, segments: list[tuple[int, str]]) -> None:
        """Raise EncryptionKeyError for the first segment whose key is missing or wrong: called
        before recovery changes anything, for every segment (even those a checkpoint lets replay
        skip: their queued events are read by takes)."""
        for _log_id, path in segments:
            header = read_file(fs, path, fmt.SEGMENT_HEADER_SIZE)
            if header is not None and len(header) >= fmt.SEGMENT_HEADER_SIZE:
                self.opener(path, header[: fmt.SEGMENT_HEADER_SIZE])

    def opener(self, path: str, header: bytes) -> Opener | None:
        """The opener of the segment with ``header`` (None: a plain segment, or a header that
        does not decode, which the scan reports). Raises EncryptionKeyError when the segment's
        key is not configured or the configured key is not the one it was written with."""
        try:
            found = fmt.segment_key(header)
            log_id = fmt.decode_segment_header(header)[0]
        except fmt.FrameError:
            return None
        if found is None:
            return None
        channel_id = fmt.segment_channel_id(header)
        subkey = self._subkey(path, found, channel_id)
        if found.bound:  # one per segment (a key of its own); the caller keeps it while it reads the segment
            return Opener(_segment_key(subkey, log_id), found.key_id, found.version, log_id)
        cache_key = (found.key_id, channel_id, found.salt, found.version)
        opener = self._openers.get(cache_key)
        if opener is None:
            opener = self._openers[cache_key] = Opener(subkey, found.key_id, found.version)
        return opener

    def _subkey(self, path: str, found: SegmentKey, channel_id: bytes) -> bytes:
        session = (found.key_id, channel_id, found.salt)
        subkey = self._subkeys.get(session)
        if subkey is None:
            subkey = self._subkeys[session] = self._derive(path, found, channel_id)
        return subkey

    def _derive(self, path: str, found: SegmentKey, channel_id: bytes) -> bytes:
        keyring = self.keyring
        if keyring is None:
            raise EncryptionKeyError(path=path, key_id=found.key_id, problem="and no encryption key is configured",
                                     setting="channel.encryption_key_file or channel.encryption_key_env "
                                             "(the tools: --key-file or --key-env)")
        key = keyring.keys.get(found.key_id)
        if key is None:
            raise EncryptionKeyError(path=path, key_id=found.key_id,
                                     problem=f"which {keyring.setting} does not hold (it holds {sorted(keyring.keys)})",
                                     setting=f"{keyring.setting}: add key {found.key_id}")
        subkey, check = _derive(key, channel_id, found.salt)
        if check != found.check:
            raise EncryptionKeyError(path=path, key_id=found.key_id,
                                     problem=f"but the key under id {found.key_id} in {keyring.setting} is a "
                                             "different key (the key check value in the header does not match)",
                                     setting=f"{keyring.setting}: restore the original key {found.key_id}")
        return subkey
