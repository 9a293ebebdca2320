"""The PUT decoders against their reference (issue 28, item 5).

What a PUT payload means is what ``codec.decode_put`` makes of it alone: one ``Put`` message
(protobuf's parse, or its own fast path for a header-less payload). The decoders that read many
payloads at once must agree with it on every input, whatever the bytes:

* ``decode_puts``: the codec's many-payload decoder (takes, the remote take's payloads);
* ``exact run``: ``reader._decode_run``, the take's exact path over a buffer of PUT frames (also
  the path of an encrypted segment's sealed runs, over their plaintext);
* ``plaintext payloads``: ``reader._decode_payloads``, the take path of encrypted segments of
  version 2 after ``Opener.open_frames``;
* ``vectorized run``: ``columnar._decode``, the Arrow take's numpy decoder, which may decline a
  run (the exact path then decodes it) but must never return other events.

Agreement means: the same events (body, headers as a mapping, seq; an event never holds a key
twice), or, when the reference refuses a payload, the same refusal: a ``DecodeError`` from the
codec's decoders, ``CorruptLogError`` naming the first refused frame's offset from the exact
path, a declined run from the vectorized one. Header order is not part of an event: protobuf's
map keeps its own order, the fast decoders keep the payload's.

:func:`put_payloads` draws protobuf-like payloads (canonical ones, and tokens of every wire type
with right and wrong lengths, overlong varints, unknown fields in and out of map entries,
duplicate keys, invalid UTF-8), and :func:`check_agreement` is the oracle the regression tests,
the property test and the fuzz target share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError
from hypothesis import strategies as st

from ingest_toolkit.channel import columnar, reader
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.codec import EventColumns, decode_put, decode_puts, encode_put
from ingest_toolkit.errors import CorruptLogError

__all__ = ["DECODERS", "Refused", "Triple", "assert_agreement", "check_agreement", "encode_varint", "frames",
           "outcomes", "put_payloads", "reference", "triples"]

Triple = tuple[bytes, dict[str, str], int]
PATH = "log-1"
BASE = fmt.SEGMENT_HEADER_SIZE  # file offset of the first frame of a decoded buffer


@dataclass(frozen=True)
class Refused:
    """A decoder's refusal: ``index`` of the payload it names (None: it names none)."""

    index: int | None = None


class Declined:
    """The vectorized decoder left the run to the exact path."""


Outcome = list[Triple] | Refused | Declined


def reference(payloads: Sequence[bytes], seqs: Sequence[int]) -> list[Triple] | Refused:
    """``decode_put`` of each payload alone: the events, or the first payload it refuses."""
    events: list[Triple] = []
    for index, (payload, seq) in enumerate(zip(payloads, seqs, strict=True)):
        try:
            event = decode_put(payload, seq)
        except DecodeError:
            return Refused(index)
        events.append((event.body, dict(event.headers), event.seq))
    return events


def triples(columns: EventColumns) -> list[Triple]:
    """The events of ``columns``; AssertionError when one holds a key twice (no Put message can)."""
    assert len(columns.seqs) == len(columns.bodies) == len(columns.header_counts)
    assert len(columns.header_keys) == len(columns.header_values) == sum(columns.header_counts)
    out: list[Triple] = []
    at = 0
    for body, seq, count in zip(columns.bodies, columns.seqs, columns.header_counts, strict=True):
        keys, values = columns.header_keys[at:at + count], columns.header_values[at:at + count]
        assert len(set(keys)) == count, f"event {seq} holds a header key twice: {keys}"
        out.append((bytes(body), dict(zip(keys, values, strict=True)), seq))
        at += count
    return out


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def frames(payloads: Sequence[bytes], seqs: Sequence[int]) -> tuple[bytes, list[int]]:
    """The PUT frames of ``payloads`` back to back, as a take reads them from offset ``BASE`` of
    log 1: ``(buffer, pointers)``."""
    parts = [fmt.encode_frame(fmt.FrameType.PUT, 7, seq, payload) for payload, seq in zip(payloads, seqs, strict=True)]
    pointers, at = [], BASE
    for part in parts:
        pointers.append(fmt.make_pointer(1, at))
        at += len(part)
    return b"".join(parts), pointers


# -- the decoders, each as payloads -> outcome ------------------------------------------------
def _decode_puts(payloads: Sequence[bytes], seqs: Sequence[int]) -> Outcome:
    try:
        return triples(decode_puts([memoryview(p) for p in payloads], list(seqs)))
    except DecodeError:
        return Refused()


def _exact_run(payloads: Sequence[bytes], seqs: Sequence[int]) -> Outcome:
    buf, pointers = frames(payloads, seqs)
    out = EventColumns()
    try:
        reader._decode_run(PATH, buf, BASE, pointers, 0, len(pointers), out)
    except CorruptLogError as err:
        assert err.path == PATH and "not a valid Put message" in err.reason, err
        return Refused(pointers.index(fmt.make_pointer(1, err.offset)))
    return triples(out)


def _plaintext_payloads(payloads: Sequence[bytes], seqs: Sequence[int]) -> Outcome:
    out = EventColumns()
    try:
        reader._decode_payloads([bytes(p) for p in payloads], list(seqs), out)
    except DecodeError:
        return Refused()
    return triples(out)


def _vectorized_run(payloads: Sequence[bytes], seqs: Sequence[int]) -> Outcome:
    if not payloads:
        return Declined()
    buf, pointers = frames(payloads, seqs)
    try:
        part = columnar._decode(buf, np.array(pointers, np.int64) - fmt.make_pointer(1, BASE))
    except columnar._Unusual:
        return Declined()
    counts = part.counts.tolist()
    return triples(EventColumns(part.bodies.to_pylist(), part.seqs.tolist(), counts, part.keys.to_pylist(),
                                part.values.to_pylist()))


DECODERS: dict[str, Callable[[Sequence[bytes], Sequence[int]], Outcome]] = {
    "decode_puts": _decode_puts,
    "exact run": _exact_run,
    "plaintext payloads": _plaintext_payloads,
    "vectorized run": _vectorized_run,
}


def _agrees(expected: list[Triple] | Refused, got: Outcome) -> bool:
    if isinstance(got, Declined):
        return True  # the exact path decodes what the vectorized one declines (checked apart)
    if isinstance(expected, Refused):
        return isinstance(got, Refused) and got.index in (None, expected.index)
    return got == expected


def outcomes(payloads: Sequence[bytes], seqs: Sequence[int]) -> dict[str, Outcome]:
    """What every decoder makes of ``payloads``: events, a refusal, or (vectorized) declined.
    AssertionError naming the decoder when one returns an event with a key twice."""
    got: dict[str, Outcome] = {}
    for name, decode in DECODERS.items():
        try:
            got[name] = decode(payloads, seqs)
        except AssertionError as err:
            raise AssertionError(f"{name} on {_shown(payloads)}: {err}") from None
    return got


def assert_agreement(payloads: Sequence[bytes], expected: list[Triple] | Refused, got: dict[str, Outcome]) -> None:
    """AssertionError naming the first decoder whose outcome is not the reference's."""
    for name, outcome in got.items():
        assert _agrees(expected, outcome), (f"{name} disagrees with decode_put on {_shown(payloads)}:\n"
                                            f"  reference: {_shown(expected)}\n  {name}: {_shown(outcome)}")


def check_agreement(payloads: Sequence[bytes], seqs: Sequence[int] | None = None) -> list[Triple] | Refused:
    """AssertionError unless every decoder agrees with :func:`reference` on ``payloads``; the
    reference's outcome otherwise."""
    seqs = list(range(1000, 1000 + len(payloads))) if seqs is None else seqs
    expected = reference(payloads, seqs)
    assert_agreement(payloads, expected, outcomes(payloads, seqs))
    return expected


def _shown(value: object, limit: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# -- inputs -------------------------------------------------------------------------------------
_TEXT = st.sampled_from(["", "k", "host", "é", "ключ", "✓" * 3, "k" * 130])
_NOT_UTF8 = st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc0\x80"])  # a stray byte, a surrogate, an overlong NUL
_BYTES = st.one_of(_TEXT.map(str.encode), st.binary(max_size=12), _NOT_UTF8)


@st.composite
def _varint(draw: st.DrawFn, value: int) -> bytes:
    """``value`` as a varint, sometimes overlong (padded) or cut short."""
    shape = draw(st.sampled_from(["minimal"] * 6 + ["overlong", "overlong", "truncated"]))
    encoded = encode_varint(value)
    if shape == "overlong":
        pad = draw(st.integers(1, 6))
        return encoded[:-1] + bytes([encoded[-1] | 0x80]) + b"\x80" * (pad - 1) + b"\x00"
    if shape == "truncated":
        return encoded[:-1] + bytes([encoded[-1] | 0x80])
    return encoded


@st.composite
def _delimited(draw: st.DrawFn, tag: int, content: bytes) -> bytes:
    """A length-delimited field; its length sometimes wrong (the field runs into what follows)."""
    length = len(content) + draw(st.sampled_from([0] * 8 + [-2, -1, 1, 2, 5]))
    return encode_varint(tag) + draw(_varint(max(length, 0))) + content


@st.composite
def _unknown_field(draw: st.DrawFn, numbers: Sequence[int]) -> bytes:
    """A field of any wire type, of a number ``numbers`` offers (unknown, or known with another wire type)."""
    number = draw(st.sampled_from(list(numbers)))
    wire = draw(st.sampled_from([0, 1, 2, 3, 4, 5]))
    tag = encode_varint(number << 3 | wire)
    if wire == 0:
        return tag + draw(_varint(draw(st.integers(0, 2**64 - 1))))
    if wire == 1:
        return tag + draw(st.binary(min_size=0, max_size=8))  # 8 bytes, or fewer: cut short
    if wire == 5:
        return tag + draw(st.binary(min_size=0, max_size=4))
    if wire == 2:
        return draw(_delimited(number << 3 | 2, draw(st.binary(max_size=6))))
    return tag  # a group start or end, alone


@st.composite
def _entry(draw: st.DrawFn) -> bytes:
    """A map entry (field 2): key and value in any order, missing or twice, unknown fields."""
    parts = draw(st.lists(st.one_of(
        _BYTES.flatmap(lambda b: _delimited(0x0A, b)),
        _BYTES.flatmap(lambda b: _delimited(0x12, b)),
        _unknown_field([1, 2, 3, 4, 15]),
    ), max_size=3))
    return draw(_delimited(0x12, b"".join(parts)))


@st.composite
def _crafted(draw: st.DrawFn) -> bytes:
    tokens = draw(st.lists(st.one_of(
        st.binary(max_size=20).flatmap(lambda b: _delimited(0x0A, b)),  # a body
        _entry(),
        _unknown_field([1, 2, 3, 5, 16, 2047]),
        st.binary(min_size=1, max_size=4),  # stray bytes
    ), max_size=5))
    return b"".join(tokens)


@st.composite
def _canonical(draw: st.DrawFn) -> bytes:
    body = draw(st.sampled_from([b"", b"b", b"\x12\x02\x18\x01", bytes(130)]) | st.binary(max_size=40))
    keys = draw(st.lists(_TEXT, max_size=3, unique=True))
    return encode_put(body, {key: draw(_TEXT) for key in keys})


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(_canonical()))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["set", "insert", "delete", "cut"]))
        if kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "cut":
            del data[at:]
        elif at < len(data):
            if kind == "set":
                data[at] = draw(st.integers(0, 255))
            else:
                del data[at]
    return bytes(data)


@st.composite
def _repeated(draw: st.DrawFn, payloads: list[bytes]) -> list[bytes]:
    """``payloads`` repeated up to 80 or more (the decoders decode repeating header regions once
    each), in their order or shuffled."""
    many = (payloads * (80 // len(payloads) + 1))[:draw(st.integers(64, 100))]
    return draw(st.permutations(many)) if draw(st.booleans()) else many


def put_payloads(max_size: int = 8) -> st.SearchStrategy[list[bytes]]:
    """Lists of PUT payloads: canonical ones (as the channel writes them), crafted token by
    token, and canonical ones damaged; sometimes repeated to 64 events and more."""
    few = st.lists(st.one_of(_canonical(), _crafted(), _mutated()), min_size=1, max_size=max_size)
    return st.one_of(few, few, few, few.flatmap(_repeated))
