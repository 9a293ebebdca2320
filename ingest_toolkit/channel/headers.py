"""The header regions of PUT payloads, decoded many at a time (``codec.decode_puts``).

A PUT payload as the channel's encoders write it is a body field (field 1) and then its header
region: one map entry (field 2) per header, each holding its key (field 1) and its value (field
2), every length in its minimal varint. :func:`body_span` finds the body;
:func:`decode_header_regions` decodes the regions of many payloads in three protobuf parses of
their join (views in ``channel.proto``), and declines (None)
unless those parses prove every region to be exactly such entries: then, and only then, each
region means what protobuf's parse of its payload alone makes of it, whatever the bytes around
it. The proof, step by step:

1. ``HeaderEntries`` (repeated ``HeaderEntry {optional key; optional value}``): the join, with
   unknown fields dropped, re-encodes to exactly its own size. No re-encoded field is longer than
   its input (a minimal length, one copy of a field given twice, a dropped unknown field), so
   equal sizes mean: every top-level field is an entry, every field in every entry is a key or a
   value, present at most once, and every length is minimal.
2. ``RawEntries``: the entries' contents. With minimal lengths, an entry of ``n`` content bytes
   takes ``1 + len(varint(n)) + n`` bytes, so where each entry ends is known; each region must
   end where an entry ends (a field of a region that ran past its end, swallowing the next
   region's bytes, fails here), which gives the number of entries of each region.
3. ``KeysValues``: the entries' contents, joined, hold as many keys and as many values as there
   are entries; with step 1 (at most one of each per entry), each entry holds exactly one key
   and one value, the i-th key and value being the i-th entry's (both UTF-8: protobuf checks).
4. No region holds a key twice (protobuf's map would keep one).

Regions that repeat (events with the same headers) are decoded once each.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, chain, count, pairwise, repeat
from operator import add, eq, sub
from typing import Final

from google.protobuf.message import DecodeError

from .proto import channel_pb2 as pb

__all__ = ["HeaderColumns", "body_span", "decode_header_regions"]


def _varint_bytes(n: int) -> int:
    return 1 if n < 0x80 else 2 if n < 0x4000 else 3


def body_span(data: bytes | memoryview, at: int, end: int) -> tuple[int, int]:
    """Where the body of the PUT payload ``data[at:end]`` lies when the payload starts with a
    body field (field 1, length-delimited) that fits in it: ``(start, stop)``; else ``(at, at)``,
    and the whole payload is its header region. What follows ``stop`` is the header region; the
    payload means this body and the headers of its region exactly when the region holds nothing
    but header entries (see :func:`decode_header_regions`, which proves it or declines)."""
    if at + 2 > end or data[at] != 0x0A:
        return at, at
    length, shift, pos = 0, 0, at + 1
    while pos < end and pos < at + 6:  # lengths in up to 5 bytes (protobuf's limit is 2 GiB)
        byte = data[pos]
        length |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return (pos, pos + length) if pos + length <= end else (at, at)
        shift += 7
    return at, at


_FIELD_BYTES: Final = tuple(1 + _varint_bytes(n) + n for n in range(1 << 14))  # a field of n bytes, minimal

#: ``(header counts, keys, values)`` of decoded regions, as :class:`EventColumns` holds them.
HeaderColumns = tuple[list[int], list[str], list[str]]


def decode_header_regions(regions: Sequence[bytes | memoryview]) -> HeaderColumns | None:
    """The headers of each header region (the bytes of a PUT payload after its body field, see
    :func:`body_span`), or None unless the parses prove every region to be header entries as the
    channel's encoders write them (module docstring). A region proven so means what protobuf
    makes of its payload alone; for anything else (an unknown field, a field that runs past its
    region, a body field, a key missing or twice) the caller asks ``codec.decode_put``, the
    reference, payload by payload."""
    if _repeating(regions):
        return _decode_distinct(regions)
    return _decode_regions(regions)


_SAMPLE: Final = 32  # regions looked at to guess whether they repeat


def _repeating(regions: Sequence[bytes | memoryview]) -> bool:
    """Whether a sample of the regions holds few distinct ones (then decoding each distinct
    region once pays off). Regions over writable memory are not hashable: never."""
    if len(regions) < 2 * _SAMPLE:
        return False
    try:
        return len(set(regions[:: len(regions) // _SAMPLE])) <= _SAMPLE // 4
    except TypeError:
        return False


def _decode_distinct(regions: Sequence[bytes | memoryview]) -> HeaderColumns | None:
    """:func:`_decode_regions` of each distinct region once, spread back over the events."""
    first: dict[bytes | memoryview, int] = {}
    firsts = list(map(first.setdefault, regions, count()))  # each region's first equal one
    decoded = _decode_regions([regions[at] for at in first.values()])
    if decoded is None:
        return None
    counts, keys, values = decoded
    rank = dict(zip(first.values(), count()))
    ranks = list(map(rank.__getitem__, firsts))
    bounds = list(accumulate(counts, initial=0))
    keys_of = [keys[a:b] for a, b in pairwise(bounds)]
    values_of = [values[a:b] for a, b in pairwise(bounds)]
    return (list(map(counts.__getitem__, ranks)), list(chain.from_iterable(map(keys_of.__getitem__, ranks))),
            list(chain.from_iterable(map(values_of.__getitem__, ranks))))


def _decode_regions(regions: Sequence[bytes | memoryview]) -> HeaderColumns | None:
    """:func:`decode_header_regions`, every region decoded."""
    if not regions:
        return [], [], []
    joined = b"".join(regions)
    try:
        if not _minimal_entries(joined):
            return None
        raw = list(pb.RawEntries.FromString(joined).entries)
        counts = _counts(raw, list(map(len, regions)))
        if counts is None:
            return None
        pairs = pb.KeysValues.FromString(b"".join(raw))
    except DecodeError:  # a key or value that is not UTF-8
        return None
    keys, values = list(pairs.keys), list(pairs.values)
    if not len(keys) == len(values) == len(raw) or not _distinct_keys(keys, counts):
        return None  # an entry without key or value: protobuf decides
    return counts, keys, values


def _minimal_entries(joined: bytes) -> bool:
    """Whether ``joined`` is header entries only, every field of each present once in its minimal
    encoding, nothing unknown: its parse re-encodes to exactly its size. Each re-encoded field is
    at most as long as its input (minimal lengths, one copy of a field repeated, unknown fields
    dropped), so equal sizes leave no field that differs."""
    entries = pb.HeaderEntries.FromString(joined)
    entries.DiscardUnknownFields()
    return entries.ByteSize() == len(joined)


def _counts(raw: list[bytes], sizes: list[int]) -> list[int] | None:
    """The number of entries of each region (of ``sizes`` bytes), the entries' contents being
    ``raw``; None when a region does not end where an entry ends (a field ran past it). Every
    entry ends where its minimal length says (:func:`_minimal_entries`), so its bytes are known."""
    try:
        spans = list(map(_FIELD_BYTES.__getitem__, map(len, raw)))
    except IndexError:  # an entry of 16 KiB or more: one by one
        return None
    per, rest = divmod(len(raw), len(sizes))
    if not rest:  # the usual case: as many headers in every event
        if per == 1:
            sums = spans
        elif per == 2:
            sums = list(map(add, spans[0::2], spans[1::2]))
        else:
            sums = list(map(sum, zip(*[iter(spans)] * per, strict=True))) if per else [0] * len(sizes)
        if sums == sizes:
            return [per] * len(sizes)
    stops = dict(zip(accumulate(spans, initial=0), count()))  # bytes before an entry -> its index
    bounds = list(map(stops.get, accumulate(sizes)))
    if None in bounds:
        return None
    return list(map(sub, bounds, [0, *bounds[:-1]]))


def _distinct_keys(keys: list[str], counts: list[int]) -> bool:
    """Whether no region holds a key twice (protobuf's map would keep one)."""
    per = counts[0] if counts and counts.count(counts[0]) == len(counts) else -1
    if 0 <= per <= 1:
        return True
    if 0 <= per <= 6:  # the usual few headers per event: compare the k-th key of every event with its l-th
        return not any(any(map(eq, keys[a::per], keys[b::per])) for a in range(per) for b in range(a + 1, per))
    owners = chain.from_iterable(map(repeat, range(len(counts)), counts))
    return len(set(zip(owners, keys, strict=True))) == len(keys)
