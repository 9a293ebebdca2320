"""Every PUT decoder agrees with the reference decoder, ``codec.decode_put`` of each payload
alone (issue 28, item 5): the same events, or the same refusal.

The oracle is ``tests/fuzz/put_decoders.py``. Here: the crafted payloads of the issue and their
relatives, one by one and among canonical neighbours (a crafted field used to swallow the bytes
that separate payloads in the joined parse, or shape the next event), a property test over
protobuf-like payloads, and the same payloads in real channels (plain and encrypted), read by
``take``, ``take_columns`` and ``take_arrow`` on its exact path (short runs) and its vectorized
path (runs of ``columnar._MIN_RUN`` frames and more).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from ingest_toolkit.channel import EventColumns, FileChannel, columnar
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.codec import encode_put
from ingest_toolkit.errors import CorruptLogError
from tests.channel.encryption import with_encryption
from tests.channel.test_corruption import frames_of_type
from tests.channel.test_take_arrow import channel_settings, put_payloads
from tests.fuzz.put_decoders import BASE, Refused, check_agreement, encode_varint, frames, triples
from tests.fuzz.put_decoders import put_payloads as payload_lists


def entry(key: bytes, value: bytes, extra: bytes = b"") -> bytes:
    content = b"\x0a" + encode_varint(len(key)) + key + b"\x12" + encode_varint(len(value)) + value + extra
    return b"\x12" + encode_varint(len(content)) + content


# name -> (payload, what decode_put makes of it alone: (body, headers) or "refused")
CRAFTED: dict[str, tuple[bytes, tuple[bytes, dict[str, str]] | str]] = {
    "issue: a fixed64 cut short after an empty entry": (b"\x12\x00\x41\x01\x02\x03\x04", "refused"),
    "a fixed64 cut shorter": (b"\x12\x00\x41\x01\x02\x03", "refused"),
    "issue: an entry with field 3": (b"\x12\x05\x0a\x01a\x18\x01", (b"", {})),
    "an entry with field 3 after a body": (b"\x0a\x01x" + entry(b"k", b"v", b"\x18\x01"), (b"x", {})),
    "an entry with an unknown field 4": (b"\x0a\x01x" + entry(b"k", b"v", b"\x20\x01"), (b"x", {})),
    "an entry with an unknown bytes field": (b"\x0a\x01x" + entry(b"k", b"v", b"\x22\x00"), (b"x", {})),
    "an entry with a key of another wire type": (b"\x0a\x01x\x12\x05\x08\x01\x12\x01v", (b"x", {})),
    "an entry and one with an unknown field": (b"\x0a\x01x" + entry(b"a", b"1") + entry(b"k", b"v", b"\x18\x02"),
                                               (b"x", {"a": "1"})),
    "the body twice": (b"\x0a\x01a\x0a\x01b", (b"b", {})),
    "the body after the headers": (entry(b"k", b"v") + b"\x0a\x02hi", (b"hi", {"k": "v"})),
    "a key twice": (b"\x0a\x01x" + entry(b"k", b"v") + entry(b"k", b"w"), (b"x", {"k": "w"})),
    "a key twice, apart": (b"\x0a\x01x" + entry(b"k", b"v") + entry(b"j", b"u") + entry(b"k", b"w"),
                           (b"x", {"k": "w", "j": "u"})),
    "two empty entries": (b"\x0a\x01x\x12\x00\x12\x00", (b"x", {"": ""})),
    "a key field twice in an entry": (b"\x0a\x01x\x12\x09\x0a\x01a\x0a\x01b\x12\x01v", (b"x", {"b": "v"})),
    "a key alone, a value alone": (b"\x0a\x01x\x12\x03\x0a\x01k\x12\x03\x12\x01v", (b"x", {"k": "", "": "v"})),
    "an overlong body length": (b"\x0a\x81\x00a", (b"a", {})),
    "an overlong body length of 5 bytes": (b"\x0a\x81\x80\x80\x80\x00a", (b"a", {})),
    "an overlong entry length": (b"\x0a\x01x\x12\x86\x00\x0a\x01k\x12\x01v", (b"x", {"k": "v"})),
    "an overlong key length": (b"\x0a\x01x\x12\x07\x0a\x81\x00k\x12\x01v", (b"x", {"k": "v"})),
    "an entry running past the payload": (b"\x0a\x01a\x12\x04", "refused"),
    "a body running past the payload": (b"\x0a\x10a", "refused"),
    "a value running past its entry": (b"\x0a\x01x\x12\x04\x0a\x00\x12\x05v", "refused"),
    "a group left open": (b"\x0a\x01a\x0b", "refused"),
    "a group": (b"\x0a\x01a\x0b\x0c", (b"a", {})),
    "an end-of-event entry": (b"\x0a\x01a\x12\x02\x18\x01", (b"a", {})),
    "a body length of 3 bytes, overlong, on a 128-byte payload": (b"\x0a\x80\x80\x00\x0a\x7a" + bytes(122),
                                                                  (bytes(122), {})),
    "a key that is not UTF-8": (b"\x0a\x01x" + entry(b"\xff", b"v"), "refused"),
    "an unknown top-level field": (b"\x0a\x01a\x18\x05", (b"a", {})),
    "a body of another wire type": (b"\x08\x01", (b"", {})),
    "nothing": (b"", (b"", {})),
}
# Payloads that only mislead together: the first swallows the separator after it and the second
# supplies one of its own, so the joined parse came out with the right number of events.
SEQUENCES: dict[str, list[bytes]] = {
    "a swallowed separator, a forged one": [b"\x0a\x01a\x12\x04", b"\x0a\x01b\x12\x02\x18\x01"],
    "a fixed64 swallowing the separator": [b"\x12\x00\x41\x01\x02\x03\x04", encode_put(b"next", {"k": "v"})],
    "an entry swallowing the next event": [b"\x0a\x01a" + b"\x12\x0e", entry(b"k", b"v") + b"\x0a\x01b"],
}
NEIGHBOURS = [encode_put(b"n0", {"host": "h"}), encode_put(b"n1", {}), encode_put(b"", {"k": "v", "t": "1"})]


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_the_reference_is_what_this_file_says(name: str) -> None:
    payload, meaning = CRAFTED[name]
    expected = check_agreement([payload])
    assert expected == (Refused(0) if meaning == "refused" else [(*meaning, 1000)])


@pytest.mark.parametrize("name", sorted(CRAFTED))
@pytest.mark.parametrize("where", ["alone", "first", "middle", "last"])
def test_a_crafted_payload_among_canonical_ones(name: str, where: str) -> None:
    payload = CRAFTED[name][0]
    payloads = {"alone": [payload], "first": [payload, *NEIGHBOURS], "middle": [*NEIGHBOURS[:2], payload, *NEIGHBOURS],
                "last": [*NEIGHBOURS, payload]}[where]
    check_agreement(payloads)


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_crafted_payload_among_repeating_headers(name: str) -> None:
    """Repeating header regions are decoded once each: a crafted one among them too."""
    same = encode_put(b"same", {"host": "h", "source": "s"})
    check_agreement([same] * 40 + [CRAFTED[name][0]] * 3 + [same] * 40)


def test_long_headers_are_decoded_as_protobuf_does() -> None:
    headers = [{"k": "v" * size, "j": "w"} for size in (127, 128, 16_383, 16_384, 70_000)]
    expected = check_agreement([encode_put(b"b", h) for h in headers] * 20)
    assert [(body, h) for body, h, _seq in expected] == [(b"b", h) for h in headers] * 20  # type: ignore[union-attr]


@pytest.mark.parametrize(("keys", "vectorized"), [
    (["x-request-id", "x-request-ip"], True),  # same length, the first 8 bytes alike: distinct
    (["a" * 20 + "1", "a" * 20 + "2", "b"], True),
    (["x-request-id", "host", "x-request-id"], False),  # a key twice: protobuf keeps one
    (["k" * 130, "k" * 130], False),
    ([str(n) for n in range(9)] + ["0"], False),  # more headers than compared pairwise
    ([str(n) for n in range(12)], True),
])
def test_the_vectorized_decoder_declines_exactly_the_events_with_a_key_twice(keys: list[str],
                                                                              vectorized: bool) -> None:
    entries = b"".join(entry(key.encode(), b"v%d" % n) for n, key in enumerate(keys))
    payloads = [encode_put(b"x", {"h": "1"}), b"\x0a\x01y" + entries, encode_put(b"z", {})] * 30
    buf, pointers = frames(payloads, list(range(len(payloads))))
    try:
        columnar._decode(buf, np.array(pointers, np.int64) - fmt.make_pointer(1, BASE))
        accepted = True
    except columnar._Unusual:
        accepted = False
    assert accepted == vectorized
    check_agreement(payloads)


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_payloads_that_mislead_the_joined_parse_together(name: str) -> None:
    payloads = SEQUENCES[name]
    check_agreement(payloads)
    check_agreement([*NEIGHBOURS, *payloads, *NEIGHBOURS])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload_lists())
def test_every_decoder_agrees_with_the_reference(payloads: list[bytes]) -> None:
    check_agreement(payloads)


# -- the same payloads in a channel ---------------------------------------------------------------
def _take(channel: FileChannel, method: str, n: int) -> list[tuple[bytes, dict[str, str]]] | CorruptLogError:
    """The events a take returns (columns and Arrow: checked to hold no key twice), or its error."""
    try:
        with channel.transaction() as tx:
            taken = getattr(tx, method)(n)
            tx.rollback()
    except CorruptLogError as err:
        return err
    if isinstance(taken, list):
        return [(e.body, dict(e.headers)) for e in taken]
    columns = taken if isinstance(taken, EventColumns) else taken.to_columns()
    return [(body, headers) for body, headers, _seq in triples(columns)]


def _check_channel(root: Path, payloads: list[bytes]) -> None:
    """Every take method returns the reference's events of ``payloads``, or all raise the same
    CorruptLogError naming the frame of the first refused payload."""
    expected = check_agreement(payloads)
    with FileChannel(**with_encryption(channel_settings(root))) as channel:
        put_payloads(channel, payloads)
        outcomes = {method: _take(channel, method, len(payloads)) for method in ("take", "take_columns", "take_arrow")}
        assert len(channel) == len(payloads)  # a failed take puts every event back
    if isinstance(expected, Refused):
        errors = {(e.path, e.offset, e.reason) for e in outcomes.values() if isinstance(e, CorruptLogError)}
        assert len(errors) == 1 and all(isinstance(e, CorruptLogError) for e in outcomes.values()), outcomes
        [(path, offset, reason)] = errors
        assert "not a valid Put message" in reason
        puts = frames_of_type(Path(path), fmt.FrameType.PUT)
        if puts and expected.index is not None:  # plain: the refused payload's frame (encrypted: inside a run)
            assert offset == puts[expected.index].offset
        return
    want = [(body, headers) for body, headers, _seq in expected]
    for method, got in outcomes.items():
        assert got == want, f"{method}: {got!r}"


@pytest.mark.parametrize("run", ["short", "vectorized"])
@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_payloads_in_a_channel(tmp_path: Path, cipher: str, run: str, name: str) -> None:
    canonical = [encode_put(b"e%d" % i, {"k": str(i)} if i % 3 else {}) for i in range(columnar._MIN_RUN + 20)]
    if run == "short":
        canonical = canonical[:4]
    _check_channel(tmp_path, [*canonical[:2], CRAFTED[name][0], *canonical[2:]])


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_misleading_sequences_in_a_channel(tmp_path: Path, cipher: str, name: str) -> None:
    canonical = [encode_put(b"e%d" % i, {"k": str(i)}) for i in range(columnar._MIN_RUN + 20)]
    _check_channel(tmp_path, [*canonical[:50], *SEQUENCES[name], *canonical[50:]])
