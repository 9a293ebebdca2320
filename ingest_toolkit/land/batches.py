"""Taken events -> one Arrow table in the landed schema, column by column.

An in-process take hands out :class:`~ingest_toolkit.channel.columnar.ArrowColumns`
(``take_arrow``: Arrow arrays decoded from the log without a Python object per event), a remote
take :class:`~ingest_toolkit.channel.EventColumns` (bodies, seqs and headers as flat lists,
which become Arrow arrays here). Either way the event id, event time (the first ``timestamp``
header of each map) and partition columns are computed over whole columns: nothing is done per
event in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..channel import Event, EventColumns
from ..channel.columnar import ArrowColumns

__all__ = ["LANDED_SCHEMA", "PARTITION_COLUMNS", "TIMESTAMP_HEADER", "build_table", "event_id",
           "event_ids", "first_values", "landed_mask", "seq_array", "seq_ranges"]

TIMESTAMP_HEADER = "timestamp"  # epoch milliseconds, as Flume's timestamp interceptor writes it
PARTITION_COLUMNS = ("event_date", "event_hour")
_SEQ_DIGITS = 20  # int64 fits in 19 digits: fixed width keeps ids of one channel sortable as strings
_MAX_MILLIS_DIGITS = 15  # up to year ~33658; longer digit strings are not timestamps
_TS = pa.timestamp("us", tz="UTC")

LANDED_SCHEMA = pa.schema([
    ("event_id", pa.string()),
    ("batch_id", pa.string()),
    ("event_time", _TS),
    ("ingest_time", _TS),
    ("headers", pa.map_(pa.string(), pa.string())),
    ("body", pa.binary()),
    ("seq", pa.int64()),
    ("event_date", pa.string()),
    ("event_hour", pa.string()),
])


def event_id(channel_id: bytes, seq: int) -> str:
    """Stable id of one event: ``<channel id as 32 hex digits>-<seq as 20 decimal digits>``.

    The channel id is the channel's 16-byte identity (``FileChannel.channel_id``), ``seq`` the
    sequence number its put received; together they never repeat.
    """
    if len(channel_id) != 16:
        raise ValueError("channel_id must be 16 bytes")
    return f"{channel_id.hex()}-{seq:0{_SEQ_DIGITS}d}"


def event_ids(channel_id: bytes, seqs: pa.Array) -> pa.Array:
    """:func:`event_id` over a whole int64 column."""
    digits = pc.utf8_lpad(pc.cast(seqs, pa.string()), width=_SEQ_DIGITS, padding="0")
    return pc.binary_join_element_wise(f"{channel_id.hex()}-", digits, "")


def seq_ranges(seqs: pa.Array) -> list[tuple[int, int]]:
    """The distinct values of ``seqs`` as sorted, disjoint, inclusive ``(first, last)`` ranges.

    A take is usually one run of consecutive seqs; concurrent put transactions and rolled-back
    puts make gaps, so the general form is a list.
    """
    if len(seqs) == 0:
        return []
    unique = pc.unique(seqs)
    ordered = pc.take(unique, pc.array_sort_indices(unique))
    if len(ordered) == 1:
        value = ordered[0].as_py()
        return [(value, value)]
    steps = pc.subtract(ordered[1:], ordered[:-1])
    breaks = pc.indices_nonzero(pc.not_equal(steps, 1)).to_pylist()
    starts = [ordered[0].as_py(), *(ordered[b + 1].as_py() for b in breaks)]
    ends = [*(ordered[b].as_py() for b in breaks), ordered[-1].as_py()]
    return list(zip(starts, ends, strict=True))


def landed_mask(seqs: pa.Array, ranges: Sequence[tuple[int, int]]) -> pa.Array:
    """Boolean column: True where the seq falls in one of ``ranges`` (already landed)."""
    mask = pa.repeat(pa.scalar(False), len(seqs))
    for first, last in ranges:
        inside = pc.and_(pc.greater_equal(seqs, first), pc.less_equal(seqs, last))
        mask = pc.or_(mask, inside)
    return mask


def build_table(events: ArrowColumns | EventColumns | Sequence[Event], *, channel_id: bytes, batch_id: str,
                ingest_time_us: int) -> pa.Table:
    """The landed rows of ``events`` (oldest first), with the partition columns last.

    ``event_time`` is the ``timestamp`` header (epoch millis) when it is a plain number of at
    most 15 digits, else ``ingest_time``: an event is never dropped for a bad header.
    """
    if isinstance(events, ArrowColumns):  # a take_arrow: the columns are Arrow already
        seqs, headers, bodies = seq_array(events), _single(events.headers), events.bodies
        has_headers = events.has_headers()
    else:
        columns = events if isinstance(events, EventColumns) else EventColumns.of(events)
        seqs, headers = seq_array(columns), _header_map(columns)
        bodies, has_headers = pa.array(columns.bodies, pa.binary()), columns.has_headers()
    n = len(seqs)
    ingest = pa.scalar(ingest_time_us, pa.int64())
    event_us = _event_micros(headers, ingest) if has_headers else pa.repeat(ingest, n)
    event_time = pc.cast(event_us, _TS)
    arrays = [
        event_ids(channel_id, seqs),
        pa.repeat(pa.scalar(batch_id, pa.string()), n),
        event_time,
        pa.repeat(pa.scalar(ingest_time_us, _TS), n),
        headers,
        bodies,
        seqs,
        *_partition_columns(event_time),
    ]
    return pa.Table.from_arrays(arrays, schema=LANDED_SCHEMA)


def seq_array(columns: ArrowColumns | EventColumns) -> pa.Array:
    """The seqs of a take as one int64 array (``pa.array`` over a chunked column would convert
    it element by element)."""
    if isinstance(columns, ArrowColumns):
        return _single(columns.seqs)
    return pa.array(columns.seqs, pa.int64())


def _single(column: pa.ChunkedArray) -> pa.Array:
    """One array (bodies, the large column, may stay in chunks; seqs and headers are small)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _partition_columns(event_time: pa.Array) -> tuple[pa.Array, pa.Array]:
    """``event_date`` and ``event_hour`` (UTC) of every row. A batch spans few distinct hours:
    format each distinct hour once and spread the strings by index (``strftime`` over every row
    costs about 10x more)."""
    hours = pc.dictionary_encode(pc.floor_temporal(event_time, unit="hour"))
    return (pc.take(pc.strftime(hours.dictionary, format="%Y-%m-%d"), hours.indices),
            pc.take(pc.strftime(hours.dictionary, format="%H"), hours.indices))


def _event_micros(headers: pa.MapArray, ingest_us: pa.Scalar) -> pa.Array:
    raw = first_values(headers, TIMESTAMP_HEADER)
    plausible = pc.and_(pc.utf8_is_digit(raw), pc.less_equal(pc.utf8_length(raw), _MAX_MILLIS_DIGITS))
    millis = pc.cast(pc.if_else(plausible, raw, pa.scalar(None, pa.string())), pa.int64())
    return pc.fill_null(pc.multiply(millis, 1000), ingest_us)


def first_values(headers: pa.MapArray, key: str) -> pa.Array:
    """``pc.map_lookup(headers, key, "first")``: each row's value of its first ``key`` entry, null
    where it has none; as whole-column operations (``map_lookup`` is about 5x slower here)."""
    offsets = headers.offsets.to_numpy()  # into the whole keys/items children, also for a slice
    start, end = int(offsets[0]), int(offsets[-1])
    hits = pc.indices_nonzero(pc.equal(headers.keys.slice(start, end - start), key)).to_numpy().astype(np.int64)
    hits += start
    rows = np.searchsorted(offsets, hits, side="right") - 1  # the row of each matching entry
    first = np.ones(len(rows), bool)
    first[1:] = rows[1:] != rows[:-1]  # hits ascend, so a row's first hit comes first
    index = np.full(len(headers), -1, np.int64)
    index[rows[first]] = hits[first]
    return headers.items.take(pa.array(index, mask=index < 0))


def _header_map(columns: EventColumns) -> pa.MapArray:
    """A ``map<string,string>`` column; events without headers get an empty (not null) map."""
    offsets = pa.array(list(accumulate(columns.header_counts, initial=0)), pa.int32())
    return pa.MapArray.from_arrays(offsets, pa.array(columns.header_keys, pa.string()),
                                   pa.array(columns.header_values, pa.string()))
