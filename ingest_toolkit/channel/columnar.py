"""Vectorized take: the PUT frames of a read run straight into Arrow columns.

``EventReader.read_arrow`` hands each run (one ``pread`` of neighbouring frames) to
:meth:`ArrowBuilder.add_run`, which does with numpy, over all frames of the run at once, what the
exact path (``reader._decode_run``) does frame by frame: gather the frame headers, check magic,
type, flags and length, verify every CRC32C (one ``crc32c`` call per frame, the only per-frame
Python step), then parse the ``Put`` payloads one field at a time across every event (the body,
then the first header entry of every event that has one, then the second, ...: as many steps as
the most headers of one event). Bodies, header keys and values become Arrow arrays from
``(start, end)`` slices of the read buffer (see :func:`_slices`), with no Python object per event.

Whatever the vectorized path does not accept exactly, it does not decode: a frame that fails a
check, a payload in a shape other than ``[body] entry*`` with entries ``[key] [value]`` (fields
in another order, a field twice, unknown fields, varints over 5 bytes), keys or values that are
not UTF-8, an event with a key twice (protobuf's map keeps one). :meth:`ArrowBuilder.add_run`
then returns False and the reader decodes the run on the exact path, from the same bytes: a
damaged frame raises the same ``CorruptLogError``, an unusual payload decodes to the same event.
Every field is bounded by the payload (or entry) holding it, so each payload is decoded as if
alone, as ``codec.decode_put`` decodes it: for every run it accepts, the result equals the exact
path's (``tests/channel/test_take_arrow.py`` compares them) and the reference's
(``tests/channel/test_put_decoders.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from . import format as fmt
from .codec import Event, EventColumns

__all__ = ["ArrowBuilder", "ArrowColumns", "TAKEN_SCHEMA", "runs"]

TAKEN_SCHEMA: Final = pa.schema([
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("headers", pa.map_(pa.string(), pa.string()), nullable=False),
])

_Ints = np.ndarray[Any, np.dtype[np.int64]]

_HEAD: Final = 24  # frame header; the payload follows, the CRC32C ends the frame
_OVERHEAD: Final = 28
_PUT_WORD: Final = 0xC7 | 0x1F << 8 | 1 << 16  # magic c7 1f, type 1 (PUT), flags 0 as one little-endian u32
_TAG_BODY: Final = 0x0A  # Put.body: field 1, length-delimited
_TAG_ENTRY: Final = 0x12  # Put.headers: field 2, one map entry each
_TAG_KEY: Final = 0x0A  # entry key: field 1
_TAG_VALUE: Final = 0x12  # entry value: field 2
_VARINT: Final = np.arange(5)  # lengths of up to 5 varint bytes (35 bits) are read here
_SHIFTS: Final = 7 * _VARINT
_CRC_RESIDUE: Final = 0x48674BC7  # CRC32C of any bytes followed by their own CRC32C (little-endian)
# Shorter runs take the exact path: a vectorized run costs ~0.1 ms more, which pays off from 64-96 events.
_MIN_RUN: Final = 80
_CHUNK_BYTES: Final = 4 << 20  # shorter runs are merged into chunks of at least this size (all below 2 GiB)


@dataclass(frozen=True, slots=True)
class ArrowColumns:
    """Taken events as an Arrow table (:data:`TAKEN_SCHEMA`: ``seq``, ``body``, ``headers`` as
    ``map<string, string>``, an empty map for an event without headers), oldest first. The
    same events as :class:`~ingest_toolkit.channel.EventColumns`, with headers in payload
    order. The columns are in chunks of whole runs (one ``pread`` each, 8 MiB and more), so
    bodies are copied once, from the read buffer into their chunk."""

    table: pa.Table

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @property
    def seqs(self) -> pa.ChunkedArray:
        return self.table.column("seq")

    @property
    def bodies(self) -> pa.ChunkedArray:
        return self.table.column("body")

    @property
    def headers(self) -> pa.ChunkedArray:
        return self.table.column("headers")

    def has_headers(self) -> bool:
        return any(chunk.offsets[-1].as_py() > chunk.offsets[0].as_py() for chunk in self.headers.chunks)

    def to_columns(self) -> EventColumns:
        """The same events as :class:`EventColumns` (Python objects: for tests and small takes)."""
        rows: list[list[tuple[str, str]]] = self.headers.to_pylist()
        return EventColumns(self.bodies.to_pylist(), self.seqs.to_pylist(), [len(row) for row in rows],
                            [key for row in rows for key, _ in row], [value for row in rows for _, value in row])

    def events(self) -> list[Event]:
        return self.to_columns().events()


@dataclass(frozen=True, slots=True)
class _Part:
    """The events of one or more runs: numpy seqs and header counts, Arrow bodies, keys, values."""

    seqs: _Ints
    counts: _Ints
    bodies: pa.Array
    keys: pa.Array
    values: pa.Array

    @property
    def nbytes(self) -> int:
        return int(self.bodies.nbytes + self.keys.nbytes + self.values.nbytes)


class _Unusual(Exception):  # noqa: N818 - internal signal, never leaves this module
    """The run is not decoded here; the exact path decodes it (and raises its errors)."""


class ArrowBuilder:
    """Collects the runs of one take and builds :class:`ArrowColumns` at the end."""

    def __init__(self) -> None:
        self._parts: list[_Part] = []
        self._exact = EventColumns()  # runs decoded on the exact path since the last vectorized run
        self._exact_bytes = 0

    def add_run(self, buf: bytes, pointers: _Ints, start: int) -> bool:
        """Decode the PUT frames at ``pointers`` (a run: increasing, one segment, all in ``buf``,
        read from offset ``start``); False, with nothing added, if the exact path must do it."""
        if len(pointers) < _MIN_RUN:
            return False
        positions = (pointers & fmt.POINTER_OFFSET_MASK) - start
        try:
            part = _decode(buf, positions)
        except _Unusual:
            return False
        self._flush_exact()
        self._parts.append(part)
        return True

    def add_columns(self, columns: EventColumns) -> None:
        """Append a run the exact path decoded."""
        self._exact.extend(columns)
        self._exact_bytes += sum(map(len, columns.bodies))
        if self._exact_bytes >= _CHUNK_BYTES:
            self._flush_exact()

    def finish(self) -> ArrowColumns:
        self._flush_exact()
        batches = [_batch(group) for group in _groups(self._parts)]
        return ArrowColumns(pa.Table.from_batches(batches, schema=TAKEN_SCHEMA))

    def _flush_exact(self) -> None:
        columns, self._exact, self._exact_bytes = self._exact, EventColumns(), 0
        if len(columns):
            self._parts.append(_Part(np.array(columns.seqs, np.int64), np.array(columns.header_counts, np.int64),
                                     pa.array(columns.bodies, pa.binary()),
                                     pa.array(columns.header_keys, pa.string()),
                                     pa.array(columns.header_values, pa.string())))


def runs(pointers: _Ints, limit: int) -> list[tuple[int, int]]:
    """``(i, j)`` of each read run of ``pointers``: the runs ``reader._run_end`` makes (same log,
    increasing, below the first pointer + ``limit``), found with numpy."""
    n = len(pointers)
    if n == 0:
        return []
    shift = fmt.POINTER_SHIFT  # pointer_log_id over the array
    cuts = np.flatnonzero(((pointers[1:] >> shift) != (pointers[:-1] >> shift)) | (pointers[1:] <= pointers[:-1])) + 1
    bounds = [0, *cuts.tolist(), n]
    out: list[tuple[int, int]] = []
    for low, high in itertools.pairwise(bounds):
        i = low
        while i < high:  # increasing within [low, high): the first pointer past the limit ends the run
            j = i + int(np.searchsorted(pointers[i:high], pointers[i] + limit))
            out.append((i, j))
            i = j
    return out


def _groups(parts: list[_Part]) -> list[list[_Part]]:
    """Consecutive parts, merged until a group holds _CHUNK_BYTES: a run of the usual size is a
    chunk of its own (no copy), short runs do not make a table of tiny chunks."""
    groups: list[list[_Part]] = []
    size = _CHUNK_BYTES
    for part in parts:
        if size >= _CHUNK_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(part)
        size += part.nbytes
    return groups


def _batch(parts: list[_Part]) -> pa.RecordBatch:
    counts = parts[0].counts if len(parts) == 1 else np.concatenate([p.counts for p in parts])
    offsets = np.zeros(len(counts) + 1, np.int32)
    offsets[1:] = np.cumsum(counts)
    keys, values, bodies = ([getattr(p, name) for p in parts] for name in ("keys", "values", "bodies"))
    headers = pa.MapArray.from_arrays(pa.array(offsets), _concat(keys), _concat(values))
    seqs = pa.array(parts[0].seqs if len(parts) == 1 else np.concatenate([p.seqs for p in parts]), pa.int64())
    return pa.RecordBatch.from_arrays([seqs, _concat(bodies), headers], schema=TAKEN_SCHEMA)


def _concat(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


# -- one run, vectorized ------------------------------------------------------------------
def _require(ok: bool | np.bool_) -> None:
    if not ok:
        raise _Unusual


def _decode(buf: bytes, positions: _Ints) -> _Part:
    data = np.frombuffer(buf, np.uint8)
    seqs, ends = _check_frames(buf, data, positions)
    starts = positions + _HEAD
    body_start, body_end = _field(data, starts, ends, _TAG_BODY)
    owner, key_start, key_end, value_start, value_end = _entries(data, body_end.copy(), ends)
    counts = np.bincount(owner, minlength=len(positions)).astype(np.int64)
    try:
        keys = _slices(buf, key_start, key_end).cast(pa.string())  # checks UTF-8, as protobuf does
        values = _slices(buf, value_start, value_end).cast(pa.string())
    except pa.ArrowInvalid:
        raise _Unusual from None
    _require(_distinct_keys(keys, counts))
    return _Part(seqs, counts, _slices(buf, body_start, body_end), keys, values)


_PAIRWISE: Final = 8  # events of at most this many headers: keys compared pairwise, else sorted
_LOW_BYTES: Final = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], np.uint64)  # k low bytes


def _distinct_keys(keys: pa.Array, counts: _Ints) -> bool:
    """Whether no event holds a key twice. Protobuf's map keeps one entry per key (the last
    value, at the first's place), so such an event is left to the exact path. The k-th and l-th
    keys of all events are compared at once, by length first (keys of the same length are rare
    in one event), then by bytes."""
    most = int(counts.max()) if counts.size else 0
    if most < 2:
        return True
    if most > _PAIRWISE:
        return _distinct_sorted(keys, counts)
    offsets = np.frombuffer(keys.buffers()[1], np.int32)[keys.offset: keys.offset + len(keys) + 1].astype(np.int64)
    lengths, words = offsets[1:] - offsets[:-1], None
    for first, second in _key_pairs(counts, most):
        same = np.flatnonzero(lengths[first] == lengths[second])
        if same.size:
            words = _key_words(keys) if words is None else words
            if _any_equal(words, offsets[first][same], offsets[second][same], lengths[first][same]):
                return False
    return True


def _key_pairs(counts: _Ints, most: int) -> Iterator[tuple[Any, Any]]:
    """For each k < l: the entry indices of the k-th and of the l-th key of every event that has
    an l-th (slices when every event has ``most`` headers, the usual case)."""
    if int(counts.min()) == most:
        size = int(counts.size) * most
        for later in range(1, most):
            for earlier in range(later):
                yield slice(earlier, size, most), slice(later, size, most)
        return
    starts = np.cumsum(counts) - counts  # the entries of an event are consecutive (payload order)
    for later in range(1, most):
        events = starts[counts > later]
        for earlier in range(later):
            yield events + earlier, events + later


def _key_words(keys: pa.Array) -> np.ndarray[Any, Any]:
    """A view of the keys' data buffer whose element ``k`` is the little-endian u64 at byte
    ``k`` (the offsets index it), padded with zeros so that a word can be read at any key."""
    raw = keys.buffers()[2]
    return _unaligned((raw.to_pybytes() if raw is not None else b"") + bytes(8), "<u8")


def _any_equal(words: np.ndarray[Any, Any], first: _Ints, second: _Ints, lengths: _Ints) -> bool:
    """Whether any key at ``first`` equals the one at ``second`` (pairs of the same length),
    compared eight bytes at a time while pairs are still equal."""
    equal = np.ones(lengths.size, bool)
    for at in range(0, int(lengths.max()), 8):
        low = _LOW_BYTES[np.clip(lengths - at, 0, 8)]
        equal &= ((words[first + at] ^ words[second + at]) & low) == 0
        if not equal.any():
            return False
    return bool(equal.any())


def _distinct_sorted(keys: pa.Array, counts: _Ints) -> bool:
    """:func:`_distinct_keys` for events with many headers: (event, key code) pairs sorted."""
    codes = keys.dictionary_encode().indices.to_numpy(zero_copy_only=False).astype(np.int64)
    owners = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    pairs = owners * (int(codes.max()) + 1) + codes
    return bool(np.unique(pairs).size == pairs.size)


def _check_frames(buf: bytes, data: np.ndarray[Any, np.dtype[np.uint8]], positions: _Ints) -> tuple[_Ints, _Ints]:
    """Seqs and payload ends of the frames at ``positions``, every check of the exact path passed."""
    size = len(buf)
    _require(positions[-1] + _OVERHEAD <= size and bool((positions[1:] > positions[:-1]).all()))
    words = _unaligned(buf, "<u4")  # words[k]: the little-endian u32 at byte k
    lengths = words[positions + 4].astype(np.int64)
    ends = positions + lengths - 4
    _require((words[positions] == _PUT_WORD).all() and (lengths >= _OVERHEAD).all() and (ends + 4 <= size).all())
    seqs = _unaligned(buf, "<u8")[positions + 16]
    _require((seqs < 1 << 63).all())  # int64 in Arrow; the exact path keeps Python ints
    # The CRC32C of a frame *with* its stored checksum is a constant exactly when the checksum
    # is right; one call per frame (bytes slices are the cheapest way to call it from Python).
    crcs = [crc32c(buf[a:b]) for a, b in zip(positions.tolist(), (ends + 4).tolist(), strict=True)]
    _require(crcs.count(_CRC_RESIDUE) == len(crcs))
    return seqs.astype(np.int64), ends


def _unaligned(buf: bytes, dtype: str) -> np.ndarray[Any, Any]:
    """A read-only view of ``buf`` whose element ``k`` is the ``dtype`` value at byte ``k``."""
    width = np.dtype(dtype).itemsize
    return np.ndarray((len(buf) - width + 1,), dtype, buf, 0, (1,))


def _entries(data: np.ndarray[Any, np.dtype[np.uint8]], cursor: _Ints,
             ends: _Ints) -> tuple[_Ints, _Ints, _Ints, _Ints, _Ints]:
    """The header entries after the bodies: ``(event index, key start, key end, value start,
    value end)`` per entry, in payload order. Step ``s`` parses entry ``s`` of every event."""
    steps: list[tuple[_Ints, ...]] = []
    active = np.flatnonzero(cursor < ends)
    while active.size:
        at, limit = cursor[active], ends[active]
        _require((data[at] == _TAG_ENTRY).all())
        entry_start, entry_end = _delimited(data, at, limit)
        key_start, key_end = _field(data, entry_start, entry_end, _TAG_KEY)
        value_start, value_end = _field(data, key_end, entry_end, _TAG_VALUE)
        _require((value_end == entry_end).all())  # nothing else in an entry
        steps.append((active, key_start, key_end, value_start, value_end))
        cursor[active] = entry_end
        active = active[entry_end < limit]
    if not steps:
        empty = np.empty(0, np.int64)
        return empty, empty, empty, empty, empty
    columns = [np.concatenate(c) for c in zip(*steps, strict=True)]
    if len(steps) > 1:  # step-major -> payload order: key starts rise through the buffer
        order = np.argsort(columns[1], kind="stable")
        columns = [c[order] for c in columns]
    return columns[0], columns[1], columns[2], columns[3], columns[4]


def _field(data: np.ndarray[Any, np.dtype[np.uint8]], at: _Ints, limit: _Ints, tag: int) -> tuple[_Ints, _Ints]:
    """Where the optional length-delimited field ``tag`` at ``at`` (before ``limit``) holds its
    bytes: ``(start, end)``; ``(at, at)`` where the field is absent (the next one starts there)."""
    present = (at < limit) & (data[at] == tag)  # at <= limit <= a payload end: inside the buffer
    if present.all():
        return _delimited(data, at, limit)
    start, end = at.copy(), at.copy()
    where = np.flatnonzero(present)
    if where.size:
        start[where], end[where] = _delimited(data, at[where], limit[where])
    return start, end


def _delimited(data: np.ndarray[Any, np.dtype[np.uint8]], at: _Ints, limit: _Ints) -> tuple[_Ints, _Ints]:
    """``(start, end)`` of the bytes of the length-delimited fields whose tags are at ``at``."""
    length, width = _varints(data, at + 1)
    start = at + 1 + width
    end = start + length
    _require((end <= limit).all())
    return start, end


def _varints(data: np.ndarray[Any, np.dtype[np.uint8]], at: _Ints) -> tuple[_Ints, _Ints]:
    """``(value, width in bytes)`` of the varints at ``at`` (up to 5 bytes; more is unusual)."""
    # Bytes past the buffer read as its last byte: such a varint overruns its field, which
    # the caller's bound check catches.
    first = data[at].astype(np.int64)
    short = first < 0x80
    if short.all():
        return first, np.ones_like(first)
    second = data[np.minimum(at + 1, len(data) - 1)].astype(np.int64)
    if (short | (second < 0x80)).all():  # lengths below 16384: one or two bytes
        return np.where(short, first, (first & 0x7F) | (second << 7)), 2 - short
    raw = data[np.minimum(at[:, None] + _VARINT, len(data) - 1)].astype(np.int64)
    last = raw < 0x80
    _require(last.any(axis=1).all())
    width = last.argmax(axis=1) + 1
    used = _VARINT < width[:, None]
    return (((raw & 0x7F) << _SHIFTS) * used).sum(axis=1), width


def _slices(buf: bytes, start: _Ints, end: _Ints) -> pa.Array:
    """A binary array of ``buf[start[i]:end[i]]``; the slices are disjoint and in buffer order.

    Arrow's binary layout is offsets into one data buffer, so the read buffer itself, with
    offsets ``start0, end0, start1, end1, ...``, is an array of the slices *and* the gaps
    between them; taking every other element copies the slices into a compact array in C++.
    """
    n = len(start)
    if n == 0:
        return pa.array([], pa.binary())
    offsets = np.empty(2 * n, np.int32)  # a run is at most 8 MiB + one frame of at most 1 GiB
    offsets[0::2] = start
    offsets[1::2] = end
    _require(bool((offsets[1:] >= offsets[:-1]).all()))
    gapped = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(offsets), pa.py_buffer(buf)])
    return gapped.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
