"""Byte-level checks of the frame format, the fast Put codec and the generated protobuf code."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest_toolkit.channel import codec, transaction
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.codec import (
    Event,
    EventColumns,
    decode_put,
    decode_puts,
    decode_take,
    encode_put,
    encode_puts_columns,
    encode_take,
)
from ingest_toolkit.channel.proto import channel_pb2 as pb
from ingest_toolkit.channel.proto.generate import HERE, generate

bodies = st.binary(max_size=40_000)
headers = st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=4)


@given(bodies, headers)
def test_put_payload_matches_protobuf_and_round_trips(body: bytes, hdrs: dict[str, str]) -> None:
    payload = encode_put(body, hdrs)
    assert pb.Put.FromString(payload) == pb.Put(body=body, headers=hdrs)
    if not hdrs:
        assert payload == pb.Put(body=body).SerializeToString()
    event = decode_put(memoryview(payload), 42)
    assert (event.body, dict(event.headers), event.seq) == (body, hdrs, 42)


def test_decode_put_falls_back_for_foreign_encodings() -> None:
    # Unknown fields and field order other than ours must still decode through protobuf.
    payload = pb.Put(headers={"a": "b"}).SerializeToString() + pb.Put(body=b"x").SerializeToString()
    event = decode_put(payload, 1)
    assert event.body == b"x" and event.headers == {"a": "b"}


@pytest.mark.parametrize("hdrs", [
    {"timestamp": "1763900000123", "host": "10.0.0.12"},
    {"": "", "k": ""},                                    # empty strings are still entries
    {"long": "v" * 128, "short": "s"},                    # > 127 bytes: protobuf writes it
    {"k" * 200: "x"},
    {"ключ": "значение ✓"},                                 # multi-byte UTF-8
])
def test_put_with_headers_decodes_like_protobuf(hdrs: dict[str, str]) -> None:
    for body in (b"", b"b", b"x" * 300, b"y" * 20_000):
        payload = encode_put(body, hdrs)
        assert pb.Put.FromString(payload) == pb.Put(body=body, headers=hdrs)
        event = decode_put(memoryview(payload), 7)
        assert (event.body, dict(event.headers)) == (body, hdrs)


def test_put_with_invalid_headers_fails_as_protobuf_does() -> None:
    for bad in ({"k": 1}, {2: "v"}, {"k": "\ud800"}):
        with pytest.raises(Exception) as ours:
            encode_put(b"x", bad)  # type: ignore[arg-type]
        with pytest.raises(Exception) as theirs:
            pb.Put(body=b"x", headers=bad).SerializeToString()  # type: ignore[arg-type]
        assert type(ours.value) is type(theirs.value)


def _one_by_one(payloads: list[bytes], seqs: list[int]) -> list[tuple[bytes, dict[str, str], int]]:
    return [(e.body, dict(e.headers), e.seq) for e in (decode_put(p, s) for p, s in zip(payloads, seqs, strict=True))]


def _triples(columns: EventColumns) -> list[tuple[bytes, dict[str, str], int]]:
    return [(e.body, dict(e.headers), e.seq) for e in columns.events()]


long_headers = st.dictionaries(st.text(max_size=200), st.text(max_size=300), max_size=3)  # > 127 B: protobuf's bytes


@given(st.lists(st.tuples(st.binary(max_size=600), st.one_of(headers, long_headers)), max_size=60))
def test_decode_puts_equals_decoding_one_by_one(events: list[tuple[bytes, dict[str, str]]]) -> None:
    payloads = [encode_put(body, hdrs) for body, hdrs in events]
    seqs = list(range(100, 100 + len(events)))
    columns = decode_puts([memoryview(p) for p in payloads], seqs)
    expected = [(body, hdrs, seq) for (body, hdrs), seq in zip(events, seqs, strict=True)]
    assert _triples(columns) == _one_by_one(payloads, seqs) == expected
    assert len(columns.header_counts) == len(events) and sum(columns.header_counts) == len(columns.header_keys)
    assert columns.has_headers() == any(h for _, h in events)
    assert EventColumns.of(columns.events()) == columns


repeated_headers = st.dictionaries(st.sampled_from(["host", "source", "", "ключ", "k" * 130]),
                                   st.sampled_from(["web-1", "app", "", "значение ✓", "v" * 128]), max_size=3)


@given(st.lists(st.tuples(st.binary(max_size=300), st.one_of(headers, long_headers, repeated_headers)), max_size=40))
def test_batch_encoders_write_what_encode_put_writes_event_by_event(
        events: list[tuple[bytes, dict[str, str]]]) -> None:
    # The channel's put paths encode each distinct header once per batch: the same bytes as
    # encode_put per event, long headers (protobuf's bytes) mixed in anywhere.
    expected = [encode_put(body, hdrs) for body, hdrs in events]
    columns = EventColumns.of([Event(body, hdrs) for body, hdrs in events])
    assert encode_puts_columns(columns.bodies, columns.header_counts, columns.header_keys,
                               columns.header_values) == expected
    assert transaction._payloads([Event(body, hdrs) for body, hdrs in events]) == expected
    assert transaction._column_payloads(columns) == expected


def test_batch_encoders_fail_on_invalid_headers_as_protobuf_does() -> None:
    for bad in ({"k": 1}, {2: "v"}, {"k": "\ud800"}, {"k": ["unhashable"]}):
        with pytest.raises(Exception) as theirs:
            pb.Put(body=b"x", headers=bad).SerializeToString()  # type: ignore[arg-type]
        batch = [Event(b"a", {"host": "web-1"}), Event(b"x", bad)]  # type: ignore[arg-type]
        with pytest.raises(Exception) as ours:
            transaction._payloads(batch)
        assert type(ours.value) is type(theirs.value)
        columns = EventColumns.of(batch)
        with pytest.raises(Exception) as ours:
            transaction._column_payloads(columns)
        assert type(ours.value) is type(theirs.value)


def test_decode_puts_lines_up_foreign_payloads_by_decoding_them_one_by_one() -> None:
    payloads = [
        encode_put(b"a", {"k": "1"}),
        pb.Put(headers={"a": "b"}).SerializeToString() + pb.Put(body=b"x").SerializeToString(),  # body last
        pb.Put(body=b"y").SerializeToString() * 2,                                              # body twice
        b"",                                                                                    # empty event
        encode_put(b"", {"only": "headers"}),
    ]
    seqs = [1, 2, 3, 4, 5]
    assert _triples(decode_puts(payloads, seqs)) == _one_by_one(payloads, seqs)
    assert _triples(decode_puts(payloads[3:], seqs[3:])) == [(b"", {}, 4), (b"", {"only": "headers"}, 5)]


def test_decode_puts_decodes_our_own_payloads_in_one_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [(b"", {}), (b"", {"k": "v"}), (b"b", {}), (b"c" * 300, {"long": "v" * 200}), (b"d", {"": ""})]
    payloads = [encode_put(body, hdrs) for body, hdrs in events]

    def one_by_one(payload: bytes, seq: int) -> Event:
        raise AssertionError("decoded one by one")

    monkeypatch.setattr(codec, "decode_put", one_by_one)
    columns = decode_puts(payloads, [1, 2, 3, 4, 5])
    assert [(e.body, e.headers) for e in columns.events()] == events


def test_decode_puts_reports_a_bad_payload_as_decode_put_does() -> None:
    bad = b"\x12\x07\x0a\x01k\x12\x02\xff\xfe"  # a header value that is not UTF-8
    with pytest.raises(Exception) as one:
        decode_put(bad, 1)
    with pytest.raises(Exception) as many:
        decode_puts([encode_put(b"ok", {}), bad], [1, 2])
    assert type(many.value) is type(one.value)


def test_event_columns_round_trip_events() -> None:
    events = [Event(b"a", {"x": "1", "y": "2"}, 5), Event(b"", {}, 6), Event(b"c", {"x": "3"}, 7)]
    columns = EventColumns.of(events)
    assert columns == EventColumns([b"a", b"", b"c"], [5, 6, 7], [2, 0, 1], ["x", "y", "x"], ["1", "2", "3"])
    assert columns.events() == events and len(columns) == 3
    more = EventColumns.of(events[:1])
    more.extend(columns)
    assert more.events() == events[:1] + events


@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=300))
def test_take_pointers_round_trip(pointers: list[int]) -> None:
    assert decode_take(encode_take(pointers)) == pointers


@given(st.sampled_from(list(fmt.FrameType)), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
       st.binary(max_size=500))
def test_frame_round_trip_and_every_byte_flip_is_detected(
        ftype: fmt.FrameType, txn: int, seq: int, payload: bytes) -> None:
    frame = fmt.encode_frame(ftype, txn, seq, payload)
    assert fmt.check_frame(frame, 0, len(frame)) == (ftype, len(frame), txn, seq)
    for i in range(0, len(frame), 7):
        damaged = bytearray(frame)
        damaged[i] ^= 0x40
        with pytest.raises(fmt.FrameError):
            fmt.check_frame(bytes(damaged), 0, len(damaged))


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**63), st.lists(st.binary(max_size=300), max_size=20))
def test_encode_frames_is_encode_frame_of_each_payload(txn: int, first: int, payloads: list[bytes]) -> None:
    """The put hot path writes encode_frame out in a loop: the bytes must be the same."""
    frames = fmt.encode_frames(fmt.FrameType.PUT, txn, first, payloads)
    assert frames == [fmt.encode_frame(fmt.FrameType.PUT, txn, first + i, p) for i, p in enumerate(payloads)]
    assert [fmt.frame_type_and_seq(f) for f in frames] == [(fmt.FrameType.PUT, first + i) for i in range(len(payloads))]


@given(st.integers(0, fmt.MAX_LOG_ID), st.integers(0, fmt.MAX_SEGMENT_SIZE - 1))
def test_pointers_order_like_log_id_then_offset(log_id: int, offset: int) -> None:
    pointer = fmt.make_pointer(log_id, offset)
    assert (fmt.pointer_log_id(pointer), fmt.pointer_offset(pointer)) == (log_id, offset)
    assert fmt.make_pointer(log_id, fmt.MAX_SEGMENT_SIZE - 1) < fmt.make_pointer(log_id + 1, 0)


def test_truncated_frame_is_rejected_at_every_length() -> None:
    frame = fmt.encode_frame(fmt.FrameType.PUT, 1, 2, encode_put(b"x" * 100, {}))
    for cut in range(len(frame)):
        with pytest.raises(fmt.FrameError):
            fmt.check_frame(frame[:cut], 0, cut)


def test_segment_header_round_trip_and_validation() -> None:
    header = fmt.encode_segment_header(9, bytes(range(16)), 123)
    assert len(header) == fmt.SEGMENT_HEADER_SIZE
    assert fmt.decode_segment_header(header) == (9, bytes(range(16)), 123)
    assert fmt.segment_channel_id(header) == bytes(range(16))
    with pytest.raises(fmt.FrameError, match="checksum"):
        fmt.decode_segment_header(header[:20] + b"\xff" + header[21:])
    with pytest.raises(fmt.FrameError, match="not a log segment"):
        fmt.decode_segment_header(b"X" + header[1:])


def test_worked_example_in_the_spec_matches_the_code() -> None:
    spec = (Path(__file__).parents[2] / "docs" / "log-format.md").read_text()
    put = fmt.encode_frame(fmt.FrameType.PUT, 7, 1000, encode_put(b"hi", {}))
    assert put.hex(" ")[-11:] == "38 5d 01 33" and "38 5d 01 33 (crc32c)" in spec
    assert put[24:28].hex(" ") in spec


def test_checked_in_protobuf_code_is_current(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    generate(tmp_path)
    for name in ("channel_pb2.py", "channel_pb2.pyi"):
        assert filecmp.cmp(tmp_path / name, HERE / name, shallow=False), (
            f"{name} is stale: run `python -m ingest_toolkit.channel.proto.generate`")
