"""Events and the protobuf payloads of PUT, TAKE, COMMIT and ROLLBACK frames.

``encode_put`` writes the protobuf wire format of ``Put`` directly: field 1 (the body) and
field 2 (one length-delimited map entry per header, key as its field 1, value as its field 2),
2-3x faster than building the message. Header-less payloads are byte-identical to what the
generated class produces; with headers the bytes are a valid encoding that protobuf decodes to
the same message (both checked in ``tests/channel/test_codec.py``). Headers longer than 127
bytes, non-strings and unencodable strings go through protobuf, so errors are protobuf's own.
``decode_put`` reads header-less payloads directly and everything else with protobuf (upb is
faster there than Python byte parsing): it is the reference, what a PUT payload means.
``decode_puts`` decodes many payloads at once into :class:`EventColumns`, with the same result
on every input: bodies sliced out, the headers of all payloads in three protobuf parses of
their joined header regions (:func:`decode_header_regions`, views in ``channel.proto``) instead
of one parse, one dict and one ``Event`` per event (``headers.py``). The joined parse only
stands for the payloads when it proves them canonical (every field where the channel's encoder
puts it, in its minimal encoding, nothing else); otherwise the payloads are decoded one by one.
A crafted payload whose field runs past its end would otherwise swallow the bytes that separate
it from the next one, or shape the next event.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Final

from .headers import body_span, decode_header_regions
from .proto import channel_pb2 as pb
from .tags import TagRecord

__all__ = ["Event", "EventColumns", "SMALL_VARINTS", "varint", "decode_put", "decode_puts", "decode_one_by_one",
           "SplitPayloads", "encode_put", "encode_put_pairs", "encode_puts_columns", "header_entries", "header_entry",
           "encode_take", "decode_take", "encode_commit", "decode_commit", "encode_rollback", "TXN_PUT", "TXN_TAKE"]

TXN_PUT: Final = pb.TXN_KIND_PUT
TXN_TAKE: Final = pb.TXN_KIND_TAKE

_EMPTY: Final[Mapping[str, str]] = {}


@dataclass(slots=True)
class Event:
    """One event: an opaque body plus string headers.

    ``seq`` is assigned by the channel when the event is put (0 before that) and is unique and
    increasing within a channel; with the channel id it forms the event's stable id.
    """

    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    seq: int = 0


@dataclass(slots=True)
class EventColumns:
    """Events as parallel columns, oldest first: what a take hands to code that works on whole
    batches (the landing builds Arrow arrays from these lists without an object per event).

    ``header_counts[i]`` headers of event ``i`` are the next entries of ``header_keys`` and
    ``header_values``, which hold every event's headers back to back.
    """

    bodies: list[bytes] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    header_counts: list[int] = field(default_factory=list)
    header_keys: list[str] = field(default_factory=list)
    header_values: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.bodies)

    def has_headers(self) -> bool:
        return bool(self.header_keys)

    def events(self) -> list[Event]:
        """The same events as :class:`Event` objects (a fresh dict of headers each)."""
        if not self.header_keys:
            return list(map(Event, self.bodies, [{} for _ in self.bodies], self.seqs))
        keys, values, events, at = self.header_keys, self.header_values, [], 0
        for body, seq, size in zip(self.bodies, self.seqs, self.header_counts, strict=True):
            end = at + size
            events.append(Event(body, dict(zip(keys[at:end], values[at:end], strict=True)), seq))
            at = end
        return events

    def extend(self, other: EventColumns) -> None:
        self.bodies += other.bodies
        self.seqs += other.seqs
        self.header_counts += other.header_counts
        self.header_keys += other.header_keys
        self.header_values += other.header_values

    @classmethod
    def of(cls, events: Iterable[Event]) -> EventColumns:
        events = events if isinstance(events, Sequence) else list(events)
        return cls([e.body for e in events], [e.seq for e in events], [len(e.headers) for e in events],
                   [k for e in events for k in e.headers], [v for e in events for v in e.headers.values()])


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


SMALL_VARINTS: Final = tuple(varint(n) for n in range(1 << 14))  # precomputed length prefixes


def encode_put(body: bytes, headers: Mapping[str, str]) -> bytes:
    n = len(body)
    if not headers:
        return b"\x0a" + (SMALL_VARINTS[n] if n < 16384 else varint(n)) + body if n else b""
    return _encode_with_headers(body, headers.items())


def encode_put_pairs(body: bytes, keys: Sequence[str], values: Sequence[str]) -> bytes:
    """:func:`encode_put` for headers given as parallel key and value lists (columns)."""
    if not keys:
        return encode_put(body, _EMPTY)
    return _encode_with_headers(body, list(zip(keys, values, strict=True)))


def encode_puts_columns(bodies: Sequence[bytes], counts: Sequence[int], keys: Sequence[str],
                        values: Sequence[str]) -> list[bytes]:
    """:func:`encode_put_pairs` of every event given as columns (``counts[i]`` headers of event
    ``i`` are the next ``keys``/``values``), the same bytes. Each distinct header (key, value) is
    encoded once per batch: headers repeat across a batch (host, source, type), so a batch costs
    one dict lookup per header instead of two ``str.encode`` and eight list items."""
    entries = _header_entries(keys, values)
    out: list[bytes] = []
    append, join, at = out.append, b"".join, 0
    if entries is None:  # a long, non-string or unencodable header: event by event, protobuf's errors
        for body, count in zip(bodies, counts, strict=True):
            append(encode_put_pairs(body, keys[at:at + count], values[at:at + count]))
            at += count
        return out
    for body, count in zip(bodies, counts, strict=True):
        n = len(body)
        head = b"\x0a" + (SMALL_VARINTS[n] if n < 16384 else varint(n)) + body if n else b""
        if count:
            append(join([head, *entries[at:at + count]]))
            at += count
        else:
            append(head)
    return out


def header_entry(key: str, value: str) -> bytes | None:
    """The encoded map entry of one header (field 2 of ``Put``), or None when longer than 127
    bytes (protobuf writes it); AttributeError or UnicodeEncodeError when not an encodable str."""
    k, v = key.encode(), value.encode()
    nk, nv = len(k), len(v)
    if nk > 127 or nv > 127:
        return None
    return b"".join((b"\x12", SMALL_VARINTS[nk + nv + 4], b"\x0a", SMALL_VARINTS[nk], k, b"\x12", SMALL_VARINTS[nv], v))


def header_entries(pairs: Iterable[tuple[str, str]], cache: dict[tuple[str, str], bytes]) -> list[bytes] | None:
    """The encoded map entry of each (key, value) of ``pairs``, each distinct one encoded once
    (``cache``, shared across a batch); None when one needs protobuf (longer than 127 bytes, not a
    str, not encodable)."""
    entries: list[bytes] = []
    append = entries.append
    try:
        for pair in pairs:
            entry = cache.get(pair)
            if entry is None:
                entry = header_entry(*pair)
                if entry is None:
                    return None
                cache[pair] = entry
            append(entry)
    except (AttributeError, TypeError, UnicodeEncodeError):  # TypeError: unhashable
        return None
    return entries


def _header_entries(keys: Sequence[str], values: Sequence[str]) -> list[bytes] | None:
    """:func:`header_entries` of header columns; None also when the columns disagree."""
    if len(keys) != len(values):
        return None  # the event-by-event path reports the mismatch (zip strict)
    return header_entries(zip(keys, values, strict=True), {})


def _encode_with_headers(body: bytes, pairs: Collection[tuple[str, str]]) -> bytes:
    """The wire format written by hand; headers longer than 127 bytes, non-strings and
    unencodable strings go through protobuf (so ``pairs`` is iterated twice then)."""
    n = len(body)
    parts = [b"\x0a", SMALL_VARINTS[n] if n < 16384 else varint(n), body] if n else []
    try:
        for key, value in pairs:
            k, v = key.encode(), value.encode()
            nk, nv = len(k), len(v)
            if nk > 127 or nv > 127:
                return pb.Put(body=body, headers=dict(pairs)).SerializeToString()
            parts += (b"\x12", SMALL_VARINTS[nk + nv + 4], b"\x0a", SMALL_VARINTS[nk], k, b"\x12",
                      SMALL_VARINTS[nv], v)
    except (AttributeError, UnicodeEncodeError):  # not a str, or a lone surrogate: protobuf's error
        return pb.Put(body=body, headers=dict(pairs)).SerializeToString()
    return b"".join(parts)


def decode_put(payload: bytes | memoryview, seq: int) -> Event:
    """Decode a PUT payload; ``payload`` is a slice of the frame."""
    # Fast path: exactly one field-1 value whose length fills the rest of the payload.
    size = len(payload)
    if size >= 2 and payload[0] == 0x0A:
        n = payload[1]
        if n < 0x80 and n + 2 == size:
            return Event(bytes(payload[2:]), {}, seq)
        if n >= 0x80 and size >= 3 and payload[2] < 0x80:
            n = (n & 0x7F) | (payload[2] << 7)
            if n + 3 == size:
                return Event(bytes(payload[3:]), {}, seq)
    msg = pb.Put.FromString(bytes(payload))
    headers = msg.headers  # dict(headers) would go through the slow generic Mapping methods
    return Event(msg.body, {key: headers[key] for key in headers}, seq)


class SplitPayloads:
    """PUT payloads being decoded together: each body sliced out of its payload, and the header
    regions (what follows the body field) of those that have one, to decode in one go with
    :func:`decode_header_regions`. ``payload(frame)`` gives back the whole payload of a region
    (``frame``: where the caller found it) when that declines the regions and the reference
    decodes them one by one: rare, so the payload is not kept. The take's hot loop inlines
    :meth:`add` for the usual payload and appends to the lists itself."""

    __slots__ = ("at", "bodies", "frames", "payload", "regions", "seqs")

    def __init__(self, payload: Callable[[int], bytes | memoryview]) -> None:
        self.payload = payload
        self.bodies: list[bytes] = []
        self.seqs: list[int] = []  # filled by the caller, one per body
        self.regions: list[bytes | memoryview] = []  # the non-empty header regions, in event order
        self.at: list[int] = []  # the event of each region
        self.frames: list[int] = []  # the frame of each region, as ``payload`` takes it

    def add(self, payload: bytes | memoryview, frame: int) -> None:
        """Split one payload (its seq is the caller's to append)."""
        size = len(payload)
        first, stop = body_span(payload, 0, size)
        self.bodies.append(bytes(payload[first:stop]))
        if stop < size:
            self.at.append(len(self.bodies) - 1)
            self.regions.append(payload[stop:])
            self.frames.append(frame)

    def payloads(self) -> list[bytes | memoryview]:
        """The whole payload of each region."""
        return list(map(self.payload, self.frames))

    def finish(self) -> EventColumns:
        """The events, as :func:`decode_put` makes them of each payload alone; its DecodeError for
        the first payload with a region that it refuses."""
        bodies, at = self.bodies, self.at
        if not at:
            return EventColumns(bodies, self.seqs, [0] * len(bodies))
        decoded = decode_header_regions(self.regions)
        if decoded is None:  # a payload the channel's encoders never write: the reference decodes them
            exact = decode_one_by_one(self.payloads(), [self.seqs[k] for k in at])
            for k, body in zip(at, exact.bodies, strict=True):
                bodies[k] = body
            decoded = exact.header_counts, exact.header_keys, exact.header_values
        counts, keys, values = decoded
        if len(at) < len(bodies):
            every = [0] * len(bodies)
            for k, n in zip(at, counts, strict=True):
                every[k] = n
            counts = every
        return EventColumns(bodies, self.seqs, counts, keys, values)


def decode_puts(payloads: Sequence[bytes | memoryview], seqs: list[int]) -> EventColumns:
    """Decode many PUT payloads (each a frame's slice) into columns: the same events as
    :func:`decode_put` of each payload alone, or its DecodeError for the first payload it
    refuses. Bodies are sliced out, headers decoded by :func:`decode_header_regions`; when that
    declines (a payload in a shape the channel never writes), the payloads are decoded one by one."""
    split = SplitPayloads(payloads.__getitem__)
    bodies, regions, at, frames = split.bodies, split.regions, split.at, split.frames
    add_body = bodies.append
    for k, payload in enumerate(payloads):
        size = len(payload)  # inlined: a body field with a length of one or two bytes
        if size >= 2 and payload[0] == 0x0A:
            m = payload[1]
            if m < 0x80:
                first = 2
            elif size >= 3 and payload[2] < 0x80:
                m = (m & 0x7F) | (payload[2] << 7)
                first = 3
            else:
                first = size + 1
            stop = first + m
            if stop <= size:
                add_body(payload[first:stop])  # type: ignore[arg-type]  # made bytes below
                if stop < size:
                    at.append(k)
                    regions.append(payload[stop:])
                    frames.append(k)
                continue
        split.add(payload, k)
    if not all(map(isinstance, payloads, repeat(bytes))):
        bodies[:] = map(bytes, bodies)  # slices of memoryviews
    split.seqs = seqs
    return split.finish()


def decode_one_by_one(payloads: Iterable[bytes | memoryview], seqs: Iterable[int]) -> EventColumns:
    """:func:`decode_put` of each payload: the reference, for payloads the fast paths decline."""
    return EventColumns.of(list(map(decode_put, payloads, seqs)))


def encode_take(pointers: array[int] | list[int]) -> bytes:
    return pb.Take(pointers=pointers).SerializeToString()


def decode_take(payload: bytes | memoryview) -> list[int]:
    return list(pb.Take.FromString(bytes(payload)).pointers)


def encode_commit(kind: int, count: int, tag: TagRecord | None = None) -> bytes:
    """A COMMIT payload; with ``tag``, the tag, first seq and commit time are recorded too."""
    if tag is None:
        return pb.Commit(kind=kind, count=count).SerializeToString()  # type: ignore[arg-type]  # int is a valid enum value
    return pb.Commit(kind=kind, count=count, tag=tag.tag, first_seq=tag.first_seq,  # type: ignore[arg-type]
                     commit_unix_ns=tag.commit_unix_ns).SerializeToString()


def decode_commit(payload: bytes | memoryview) -> tuple[int, int, TagRecord | None]:
    """``(kind, count, tag record or None)`` of a COMMIT payload."""
    msg = pb.Commit.FromString(bytes(payload))
    if not msg.tag:
        return int(msg.kind), int(msg.count), None
    return int(msg.kind), int(msg.count), TagRecord(msg.tag, msg.first_seq, msg.count, msg.commit_unix_ns)


def encode_rollback(kind: int) -> bytes:
    return pb.Rollback(kind=kind).SerializeToString()  # type: ignore[arg-type]
