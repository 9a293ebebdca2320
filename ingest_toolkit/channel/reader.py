"""Reading PUT frames back by pointer, for takes.

Pointers taken together are usually neighbours in one segment, so a run of them is fetched with
one ``pread`` spanning the run; every frame's checksum is verified. Bodies are sliced straight
out of the buffer; the header regions of the events with headers (what follows the body field)
are decoded together, in three protobuf parses (``codec.decode_header_regions``), when they are
provably what the channel's encoders write, else one by one by ``codec.decode_put``, the
reference: every event is what ``decode_put`` makes of its payload alone, on any input. The
result is columns, or events made from them.
``read_arrow`` decodes whole runs with numpy into Arrow arrays instead (``columnar.py``) and
leaves to this exact path every run it cannot decode exactly.

In an encrypted segment of version 3 the PUT frames lie inside sealed runs (RUN frames): an
event is read by reading its whole run, checking the run's CRC and tag and decrypting it once,
then reading the event's PUT frame from the plaintext exactly as from a plain segment (GCM keeps
lengths, so pointers are offsets into the plaintext as into the file). The runs of a segment are
found from the clear headers of its top-level frames, scanned lazily (a ``pread`` of 4 KiB per
run header, which also covers the small frames after it), and the plaintext of the last few runs
is cached, so that takes smaller than a run, one after another, decrypt it once.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crc32c import crc32c
from google.protobuf.message import DecodeError

from ..errors import CorruptLogError
from . import format as fmt
from .codec import Event, EventColumns, SplitPayloads, decode_put, decode_puts
from .crypto import RUN_BYTES, KeyChain, Opener
from .format import FrameError, FrameType
from .fs import File, FileSystem
from .segment import AUTH_FAILED

if TYPE_CHECKING:
    from .columnar import ArrowBuilder, ArrowColumns

__all__ = ["EventReader"]

_RUN_LIMIT = 8 << 20  # never read more than this span for one run
_MASK = fmt.POINTER_OFFSET_MASK  # pointer_offset, for runs of pointers
_HEAD = fmt.FRAME_HEADER.size
_OVERHEAD = fmt.FRAME_OVERHEAD
_MAGIC = fmt.FRAME_MAGIC
_PUT = int(FrameType.PUT)
_unpack_header = fmt.FRAME_HEADER.unpack_from
_unpack_crc = fmt.FRAME_TRAILER.unpack_from
_RUN = int(FrameType.RUN)
_RUN_TAIL = fmt.RUN_OVERHEAD - _HEAD  # a RUN frame's tag and CRC after its PUT frames
_TYPES = frozenset(int(t) for t in FrameType)
_MAX = fmt.MAX_FRAME_SIZE
_SCAN_BLOCK = 4096  # bytes read at once while scanning frame headers: a run header and the small frames after it
_CACHED_RUNS = 4  # plaintexts of sealed runs kept (each at most RUN_BYTES unless one event is larger) ...
_CACHED_BYTES = 1 << 20  # ... and at most this many bytes of them, but for the last run read


class _Frames:
    """The top-level frames of one segment found so far, in offset order: ``[starts[k], ends[k])``
    of type ``types[k]``; every frame before ``scanned`` has been seen."""

    __slots__ = ("ends", "scanned", "starts", "types")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.types: list[int] = []
        self.scanned = fmt.SEGMENT_HEADER_SIZE


class EventReader:
    """Reads PUT frames by pointer. ``max_frame``: the largest PUT frame the configuration lets
    the channel write (``max_event_size`` + frame overhead); a frame claiming more is read only
    after its checksum was verified in bounded chunks (it may have been written under a larger
    limit), so a damaged length never sizes an allocation."""

    def __init__(self, fs: FileSystem, paths: dict[int, str], max_frame: int = fmt.MAX_FRAME_SIZE,
                 keys: KeyChain | None = None) -> None:
        self._fs = fs
        self._paths = paths  # log id -> path, shared with (and updated by) the channel
        self._max_frame = max_frame
        self._keys = keys or KeyChain(None)
        self._files: dict[int, File] = {}
        self._openers: dict[int, Opener | None] = {}  # per open file: None for a plain segment
        self._lock = threading.Lock()
        # version 3 (sealed runs): the runs found per segment, and the plaintexts of the last runs read
        self._frames: dict[int, _Frames] = {}
        self._plain: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._max_run = max(RUN_BYTES, max_frame) + fmt.RUN_OVERHEAD  # larger: CRC checked in chunks first

    def read(self, pointers: list[int]) -> list[Event]:
        return self.read_columns(pointers).events()

    def read_columns(self, pointers: list[int]) -> EventColumns:
        out = EventColumns()
        i, n = 0, len(pointers)
        while i < n:
            sealed = self._sealed(pointers, i, n)
            if sealed is not None:
                path, plain, base, j = sealed
                _decode_run(path, plain, base, pointers, i, j, out)
            else:
                j = _run_end(pointers, i)
                self._read_run(pointers, i, j, out)  # decoded run by run: memory stays bounded by _RUN_LIMIT
            i = j
        return out

    def read_payloads(self, pointers: list[int]) -> tuple[list[bytes], list[int]]:
        """The PUT payloads (plaintext) and seqs of ``pointers``, verified as by
        :meth:`read_columns` (checksum, frame type, authentication) but not decoded. A damaged
        frame raises the same CorruptLogError; a payload that is not a Put message is not noticed
        here (its reader decodes it)."""
        payloads: list[bytes] = []
        seqs: list[int] = []
        i, n = 0, len(pointers)
        while i < n:
            sealed = self._sealed(pointers, i, n)
            if sealed is not None:
                path, plain, base, j = sealed
                _payload_run(path, plain, base, pointers, i, j, payloads, seqs)
                i = j
                continue
            j = _run_end(pointers, i)
            path, start, buf = self._run_buffer(pointers, i, j)
            opener = self._openers.get(fmt.pointer_log_id(pointers[i]))
            if opener is None:
                _payload_run(path, buf, start, pointers, i, j, payloads, seqs)
            else:
                opened = opener.open_frames(buf, [(p & _MASK) - start for p in pointers[i:j]])
                if opened is None:  # a frame failed: the exact path names it
                    self._decode_encrypted(opener, path, buf, start, pointers, i, j, EventColumns())
                    raise CorruptLogError(path=path, offset=start, reason="a frame of this run failed authentication")
                payloads += opened[0]
                seqs += opened[1]
            i = j
        return payloads, seqs

    def read_arrow(self, pointers: list[int]) -> ArrowColumns:
        """:meth:`read_columns` as Arrow columns (see :mod:`.columnar`), run by run.

        A run is decoded vectorized when every frame passes every check and every payload has
        the usual shape; otherwise the exact path decodes it from the same bytes, so a damaged
        frame raises the same error, and an unusual payload gives the same event, as
        :meth:`read_columns`.
        """
        import numpy as np  # numpy and pyarrow: only for the takes that want Arrow

        from .columnar import ArrowBuilder, runs

        builder = ArrowBuilder()
        array = np.array(pointers, np.int64)  # pointers are below 2^63: log ids are 32-bit
        for i, j in runs(array, _RUN_LIMIT):
            if self._sealed_runs(pointers[i]):
                self._arrow_sealed(builder, pointers, array, i, j)
                continue
            path, start, buf = self._run_buffer(pointers, i, j)
            opener = self._openers.get(fmt.pointer_log_id(pointers[i]))
            if opener is not None:  # encrypted: decrypted frame by frame, the exact path decodes
                exact = EventColumns()
                self._decode_encrypted(opener, path, buf, start, pointers, i, j, exact)
                builder.add_columns(_arrow_seqs(path, exact, pointers, i))
            elif not builder.add_run(buf, array[i:j], start):
                exact = EventColumns()
                _decode_run(path, buf, start, pointers, i, j, exact)
                builder.add_columns(_arrow_seqs(path, exact, pointers, i))
        return builder.finish()

    def _arrow_sealed(self, builder: ArrowBuilder, pointers: list[int], array: Any, i: int, j: int) -> None:
        """:meth:`read_arrow` of ``pointers[i:j]`` in a segment of sealed runs, run by run."""
        while i < j:
            sealed = self._sealed(pointers, i, j)
            assert sealed is not None
            path, plain, base, k = sealed
            if not builder.add_run(plain, array[i:k], base):
                exact = EventColumns()
                _decode_run(path, plain, base, pointers, i, k, exact)
                builder.add_columns(_arrow_seqs(path, exact, pointers, i))
            i = k

    # -- version 3: sealed runs -----------------------------------------------------------
    def _sealed_runs(self, pointer: int) -> bool:
        """Whether the segment of ``pointer`` holds its PUT frames in sealed runs (version 3)."""
        log_id = fmt.pointer_log_id(pointer)
        self._file(log_id)
        opener = self._openers.get(log_id)
        return opener is not None and opener.runs

    def _sealed(self, pointers: list[int], i: int, n: int) -> tuple[str, bytes, int, int] | None:
        """For a segment of sealed runs (else None): ``(path, plaintext, base, j)``, where the
        plaintext of the run holding ``pointers[i]`` starts at file offset ``base`` and holds
        ``pointers[i:j]`` (increasing, ``j <= n``); authenticated, from the cache if it is there."""
        if not self._sealed_runs(pointers[i]):
            return None
        log_id, offset = fmt.pointer_log_id(pointers[i]), fmt.pointer_offset(pointers[i])
        file = self._file(log_id)
        start, end = self._run_of(file, log_id, offset)
        plain = self._run_plaintext(file, log_id, start, end)
        run_end = fmt.make_pointer(log_id, end - _RUN_TAIL)  # the PUT frames of the run lie below
        return file.path, plain, start + _HEAD, _increasing_below(pointers, i, n, run_end)

    def _run_of(self, file: File, log_id: int, offset: int) -> tuple[int, int]:
        """``(start, end)`` of the RUN frame whose PUT frames hold ``offset``. When the frame there
        is not one (damage), CorruptLogError names that frame, as a take of a plain segment does."""
        with self._lock:
            found = self._frames.get(log_id)
            if found is None:
                found = self._frames[log_id] = _Frames()
            if offset >= found.scanned:
                _scan_frames(file, found, offset)
            k = bisect_right(found.starts, offset) - 1
            if k < 0:  # before the first frame: in the segment header
                raise CorruptLogError(path=file.path, offset=offset, reason="event pointer into the segment header")
            start, end, ftype = found.starts[k], found.ends[k], found.types[k]
        if ftype == _RUN and start + _HEAD <= offset < end - _RUN_TAIL:
            return start, end
        _check_top_frame(file, start, end - start)  # raises for a damaged frame
        what = FrameType(ftype).name + (" frame's header or tag" if ftype == _RUN else " frame")
        raise CorruptLogError(path=file.path, offset=start, reason=f"event pointer at offset {offset} names a {what}, "
                                                                   "not a PUT frame of a sealed run")

    def _run_plaintext(self, file: File, log_id: int, start: int, end: int) -> bytes:
        """The authenticated plaintext of the RUN frame at ``[start, end)`` (cached)."""
        key = (log_id, start)
        with self._lock:
            plain = self._plain.get(key)
            if plain is not None:
                self._plain.move_to_end(key)
                return plain
        length = end - start
        _within_file(file, start, length)
        if length > self._max_run:
            _verify_in_chunks(file, start, length)
        data = file.pread(length, start)
        try:
            ftype, checked, _txn, seq = fmt.check_frame(data, 0, len(data))
        except FrameError as err:
            raise CorruptLogError(path=file.path, offset=start, reason=str(err)) from None
        opener = self._openers.get(log_id)
        assert opener is not None
        plain = opener.unseal(data, 0, length, seq, start) if ftype == _RUN and checked == length else None
        if plain is None:
            raise CorruptLogError(path=file.path, offset=start, reason=AUTH_FAILED)
        with self._lock:
            cache = self._plain
            cache[key] = plain
            while len(cache) > 1 and (len(cache) > _CACHED_RUNS or sum(map(len, cache.values())) > _CACHED_BYTES):
                cache.popitem(last=False)
        return plain

    def _read_run(self, pointers: list[int], i: int, j: int, out: EventColumns) -> None:
        path, start, buf = self._run_buffer(pointers, i, j)
        opener = self._openers.get(fmt.pointer_log_id(pointers[i]))
        if opener is not None:
            self._decode_encrypted(opener, path, buf, start, pointers, i, j, out)
            return
        _decode_run(path, buf, start, pointers, i, j, out)

    @staticmethod
    def _decode_encrypted(opener: Opener, path: str, buf: bytes, start: int, pointers: list[int], i: int, j: int,
                          out: EventColumns) -> None:
        """Decrypt and decode a run of an encrypted segment. Any frame that fails a check or
        authentication sends the run to the exact path over its plaintext frames, which names
        the first damaged frame with the same error as in a plain segment."""
        offsets = [(p & _MASK) - start for p in pointers[i:j]]
        opened = opener.open_frames(buf, offsets)
        if opened is not None:
            try:
                _decode_payloads(*opened, out)
                return
            except DecodeError:  # authentic, yet not a Put: the exact path names the frame
                pass
        _decode_run(path, opener.plain_frames(buf, offsets, path, start), start, pointers, i, j, out)

    def _run_buffer(self, pointers: list[int], i: int, j: int) -> tuple[str, int, bytes]:
        """``(path, start, bytes)`` of the run ``pointers[i:j]``: one ``pread`` from its first
        frame to the end of its last."""
        log_id = fmt.pointer_log_id(pointers[i])
        start, last = fmt.pointer_offset(pointers[i]), fmt.pointer_offset(pointers[j - 1])
        file = self._file(log_id)
        head = file.pread(_HEAD, last)
        if len(head) < _HEAD:
            raise CorruptLogError(path=file.path, offset=last, reason="event pointer past the end of the file")
        length = _unpack_header(head)[3]
        if not _OVERHEAD <= length <= fmt.MAX_FRAME_SIZE:
            raise CorruptLogError(path=file.path, offset=last, reason=f"impossible frame length {length}")
        if last + length > file.size():  # a committed frame is whole in its file
            raise CorruptLogError(path=file.path, offset=last,
                                  reason=f"frame of {length} bytes runs past the end of the file ({file.size()} bytes)")
        if length > self._max_frame:
            _verify_in_chunks(file, last, length)
        return file.path, start, file.pread(last + length - start, start)

    def _file(self, log_id: int) -> File:
        file = self._files.get(log_id)
        if file is None:
            with self._lock:
                file = self._files.get(log_id)
                if file is None:
                    path = self._paths.get(log_id)
                    if path is None:
                        raise CorruptLogError(path=f"log-{log_id}", offset=0,
                                              reason="an event pointer names a log file that does not exist")
                    file = self._fs.open_read(path)
                    try:
                        self._openers[log_id] = self._opener(path, file.pread(fmt.SEGMENT_HEADER_SIZE, 0))
                    except BaseException:
                        file.close()
                        raise
                    self._files[log_id] = file
        return file

    def _opener(self, path: str, header: bytes) -> Opener | None:
        """The segment's opener (None: plain). A header that does not decode is damage: without
        it, an encrypted segment's frames cannot be told from plain ones."""
        try:
            fmt.decode_segment_header(header)
        except FrameError as err:
            raise CorruptLogError(path=path, offset=0, reason=str(err)) from None
        return self._keys.opener(path, header)

    def forget(self, log_id: int) -> None:
        """Close the cached descriptor of a deleted segment."""
        with self._lock:
            file = self._files.pop(log_id, None)
            self._openers.pop(log_id, None)
            self._frames.pop(log_id, None)
            for key in [key for key in self._plain if key[0] == log_id]:
                del self._plain[key]
        if file is not None:
            file.close()

    def close(self) -> None:
        with self._lock:
            files, self._files = list(self._files.values()), {}
            self._frames.clear()
            self._plain.clear()
        for file in files:
            file.close()


_CHUNK = 1 << 20
_INT64_END = 1 << 63  # the Arrow table's seq column is int64; a frame's seq field is u64


def _arrow_seqs(path: str, columns: EventColumns, pointers: list[int], i: int) -> EventColumns:
    """``columns`` (the events of ``pointers[i:]``, decoded exactly) when every seq fits the
    Arrow table's int64 column; else CorruptLogError naming the first frame whose does not.
    The channel assigns seqs from the clock in microseconds, so only a damaged or crafted
    frame (its CRC recomputed) holds one; the lists of ``take_columns`` keep it as it is."""
    if columns.seqs and max(columns.seqs) >= _INT64_END:
        k = next(k for k, seq in enumerate(columns.seqs) if seq >= _INT64_END)
        raise CorruptLogError(path=path, offset=fmt.pointer_offset(pointers[i + k]),
                              reason=f"PUT frame sequence number {columns.seqs[k]} does not fit the int64 seq "
                                     "column of an Arrow take")
    return columns


def _scan_frames(file: File, frames: _Frames, target: int) -> None:
    """Read the clear headers of the segment's top-level frames from ``frames.scanned`` on until
    past ``target``. Only committed events are read, and every frame before one was written
    before it: the scan never reads a frame being written. A header that is not a frame's
    (damage) stops it with CorruptLogError naming the frame before it when that one is damaged
    (its length led here), else the header, as when a take reads a damaged frame."""
    pos = block_at = frames.scanned
    block = b""
    while pos <= target:
        at = pos - block_at
        if at + _HEAD > len(block):
            block_at, block, at = pos, file.pread(_SCAN_BLOCK, pos), 0
        if len(block) - at >= _HEAD:
            magic, ftype, _flags, length, _txn, _seq = _unpack_header(block, at)
        if len(block) - at < _HEAD or magic != _MAGIC or ftype not in _TYPES or not _OVERHEAD <= length <= _MAX:
            if frames.starts:
                _check_top_frame(file, frames.starts[-1], frames.ends[-1] - frames.starts[-1])
            raise CorruptLogError(path=file.path, offset=pos, reason=f"no valid frame header where a frame must be "
                                                                     f"(before the event at offset {target})")
        frames.starts.append(pos)
        frames.ends.append(pos + length)
        frames.types.append(ftype)
        pos += length
        frames.scanned = pos


def _within_file(file: File, start: int, length: int) -> None:
    """A committed frame is whole in its file: a length claiming more is damage (and sizes nothing)."""
    if start + length > file.size():
        raise CorruptLogError(path=file.path, offset=start,
                              reason=f"frame of {length} bytes runs past the end of the file ({file.size()} bytes)")


def _check_top_frame(file: File, start: int, length: int) -> None:
    """Raise CorruptLogError when the frame at ``start`` fails its checks (CRC included)."""
    _within_file(file, start, length)
    if length > _CHUNK:
        _verify_in_chunks(file, start, length)
        return
    data = file.pread(length, start)
    try:
        fmt.check_frame(data, 0, len(data))
    except FrameError as err:
        raise CorruptLogError(path=file.path, offset=start, reason=str(err)) from None


def _verify_in_chunks(file: File, pos: int, length: int) -> None:
    """Check the CRC of the frame at ``pos`` reading at most ``_CHUNK`` bytes at a time."""
    end, crc, at = pos + length - 4, 0, pos
    while at < end:
        piece = file.pread(min(_CHUNK, end - at), at)
        if not piece:
            raise CorruptLogError(path=file.path, offset=pos, reason="frame runs past the end of the file")
        crc, at = crc32c(piece, crc), at + len(piece)
    if crc != int.from_bytes(file.pread(4, end), "little"):
        raise CorruptLogError(path=file.path, offset=pos, reason="checksum mismatch")


def _payload_at(buf: bytes, view: memoryview) -> Callable[[int], memoryview]:
    """The payload of the (valid) frame at a position of ``buf``."""
    return lambda pos: view[pos + _HEAD: pos + _unpack_header(buf, pos)[3] - 4]


def _decode_run(path: str, buf: bytes, start: int, pointers: list[int], i: int, j: int,
                out: EventColumns) -> None:
    """Validate and decode the frames of ``pointers[i:j]`` in ``buf`` (read from ``start``) and
    append their events to ``out``: the exact path, which names the first damaged frame (a
    damaged frame before an undecodable payload: frames are checked first, then decoded), else
    the first frame whose payload :func:`~.codec.decode_put` refuses. Events are what
    ``decode_put`` makes of each payload alone."""
    view, size = memoryview(buf), len(buf)
    split = SplitPayloads(_payload_at(buf, view))
    bodies, seqs, regions, at, frames = split.bodies, split.seqs, split.regions, split.at, split.frames
    add_body, add_seq = bodies.append, seqs.append
    for k in range(i, j):
        # Hot path, inlined: validate the frame (magic, type, length, CRC32C over the whole
        # frame) and slice the body straight out of the buffer when the payload starts with a
        # body field of a one- or two-byte length; the rest of the payload is its header region,
        # decoded with the whole run's. Any other payload goes to SplitPayloads.add, a frame that
        # fails a check to _checked_payload, which gives the exact error.
        pos = (pointers[k] & _MASK) - start
        if pos + _OVERHEAD <= size:
            magic, ftype, flags, length, _txn, seq = _unpack_header(buf, pos)
            end = pos + length - 4
            if (magic == _MAGIC and ftype == _PUT and not flags and length >= _OVERHEAD
                    and end + 4 <= size and crc32c(view[pos:end]) == _unpack_crc(buf, end)[0]):
                body = pos + _HEAD
                if end - body >= 2 and buf[body] == 0x0A:
                    m = buf[body + 1]
                    if m < 0x80:
                        first = body + 2
                    elif buf[body + 2] < 0x80:  # in the buffer: the frame's CRC follows
                        m = (m & 0x7F) | (buf[body + 2] << 7)
                        first = body + 3
                    else:
                        first = end + 1  # a longer length: split.add
                    stop = first + m
                    if stop == end:  # no headers
                        add_seq(seq)
                        add_body(buf[first:end])
                        continue
                    if stop < end:
                        add_seq(seq)
                        add_body(buf[first:stop])
                        at.append(len(seqs) - 1)
                        regions.append(view[stop:end])
                        frames.append(pos)
                        continue
                add_seq(seq)
                split.add(view[body:end], pos)
                continue
        payload, seq = _checked_payload(path, buf, view, pos, start)
        add_seq(seq)
        split.add(payload, pos)
    try:
        out.extend(split.finish())
    except DecodeError:
        _raise_undecodable(path, split.payloads(), [pos + start for pos in frames])
        raise


def _payload_run(path: str, buf: bytes, start: int, pointers: list[int], i: int, j: int,
                 payloads: list[bytes], seqs: list[int]) -> None:
    """Verify the frames of ``pointers[i:j]`` in ``buf`` (read from ``start``) and append their
    payloads and seqs: :func:`_decode_run`'s checks, without the decoding."""
    view, size = memoryview(buf), len(buf)
    add_payload, add_seq = payloads.append, seqs.append
    for k in range(i, j):
        pos = (pointers[k] & _MASK) - start
        if pos + _OVERHEAD <= size:  # hot path, inlined as in _decode_run
            magic, ftype, flags, length, _txn, seq = _unpack_header(buf, pos)
            end = pos + length - 4
            if (magic == _MAGIC and ftype == _PUT and not flags and length >= _OVERHEAD
                    and end + 4 <= size and crc32c(view[pos:end]) == _unpack_crc(buf, end)[0]):
                add_seq(seq)
                add_payload(buf[pos + _HEAD:end])
                continue
        payload, seq = _checked_payload(path, buf, view, pos, start)
        add_seq(seq)
        add_payload(bytes(payload))


def _decode_payloads(payloads: list[bytes], seqs: list[int], out: EventColumns) -> None:
    """Append the events of authentic plaintext PUT payloads to ``out``, as :func:`_decode_run`
    decodes them: what ``decode_put`` makes of each payload alone, or its DecodeError."""
    out.extend(decode_puts(payloads, seqs))


def _raise_undecodable(path: str, payloads: list[bytes | memoryview], offsets: list[int]) -> None:
    """Name the first PUT frame whose payload protobuf refuses (its CRC vouched for it)."""
    for payload, offset in zip(payloads, offsets, strict=True):
        try:
            decode_put(payload, 0)
        except DecodeError as err:
            raise CorruptLogError(path=path, offset=offset,
                                  reason=f"PUT payload is not a valid Put message ({err})") from None


def _checked_payload(path: str, buf: bytes, view: memoryview, pos: int, start: int) -> tuple[memoryview, int]:
    try:
        ftype, length, _txn, seq = fmt.check_frame(buf, pos, len(buf))
    except FrameError as err:
        raise CorruptLogError(path=path, offset=pos + start, reason=str(err)) from None
    if ftype != FrameType.PUT:
        raise CorruptLogError(path=path, offset=pos + start,
                              reason=f"event pointer names a {FrameType(ftype).name} frame")
    return view[pos + _HEAD : pos + length - 4], seq


def _run_end(pointers: list[int], i: int) -> int:
    """End (exclusive) of the run starting at ``i``: same log, increasing, within _RUN_LIMIT."""
    first = pointers[i]
    # Below the next log's first pointer and above the one before (>= first): in the same log.
    limit = min(first + _RUN_LIMIT, fmt.make_pointer(fmt.pointer_log_id(first) + 1, 0))
    return _increasing_below(pointers, i, len(pointers), limit)


def _increasing_below(pointers: list[int], i: int, n: int, limit: int) -> int:
    """End (exclusive, at most ``n``) of the pointers from ``i`` on that increase and stay below ``limit``."""
    prev, j = pointers[i], i + 1
    while j < n:
        p = pointers[j]
        if p <= prev or p >= limit:
            break
        prev = p
        j += 1
    return j
