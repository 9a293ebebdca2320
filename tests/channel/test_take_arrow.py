"""``Transaction.take_arrow`` (the vectorized take) against ``take_columns`` and ``take``.

The Arrow take must return exactly the events of the exact path, in the same order and with the
same header order, for payloads of every shape (channel encoder, protobuf's own encoder, unusual
shapes the vectorized decoder leaves to the exact path), and must raise the same error for a
damaged frame. Runs shorter than ``columnar._MIN_RUN`` always take the exact path, so most tests
run twice: with the default and with every run vectorized (``min_run=1``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ingest_toolkit.channel import Event, EventColumns, FileChannel, columnar, reader, transaction
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.codec import encode_put
from ingest_toolkit.channel.proto import channel_pb2 as pb
from ingest_toolkit.errors import CorruptLogError, TransactionCapacityError, TransactionError
from tests.channel.conformance import Worker
from tests.channel.test_corruption import flip, frames_of_type, segment
from tests.soak import soak

# -- helpers ------------------------------------------------------------------------------
SEGMENT_BYTES = 128 * 1024
DEFAULT_MIN_RUN = columnar._MIN_RUN


def channel_settings(root: Path, **overrides: Any) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "checkpoint"), "data_dirs": [str(root / "data")],
            "max_file_size": SEGMENT_BYTES, "max_event_size": 32_000, "min_free_bytes": 0,
            "preallocate_bytes": 8192, "keep_alive": 0.0, "capacity": 100_000,
            "transaction_capacity": 20_000, **overrides}


@pytest.fixture(params=[DEFAULT_MIN_RUN, 1], ids=["default-runs", "all-vectorized"])
def min_run(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(columnar, "_MIN_RUN", request.param)
    return int(request.param)


@contextmanager
def raw_payloads(payloads: Sequence[bytes]) -> Iterator[list[Event]]:
    """Put ``payloads`` as they are (not through ``encode_put``): yields placeholder events."""
    original = transaction._payloads
    transaction._payloads = lambda batch: list(payloads)  # type: ignore[assignment]
    try:
        yield [Event(b"") for _ in payloads]
    finally:
        transaction._payloads = original  # type: ignore[assignment]


def put_payloads(channel: FileChannel, payloads: Sequence[bytes]) -> None:
    with raw_payloads(payloads) as placeholders, channel.transaction() as tx:
        tx.put_many(placeholders)


def both_takes(channel: FileChannel, n: int) -> tuple[EventColumns, columnar.ArrowColumns]:
    """``take_columns(n)`` and ``take_arrow(n)`` of the same head (each rolled back)."""
    with channel.transaction() as tx:
        expected = tx.take_columns(n)
        tx.rollback()
    with channel.transaction() as tx:
        got = tx.take_arrow(n)
        tx.rollback()
    return expected, got


def assert_same(expected: EventColumns, got: columnar.ArrowColumns) -> None:
    assert got.table.schema == columnar.TAKEN_SCHEMA
    assert len(got) == len(expected)
    assert got.to_columns() == expected
    assert got.has_headers() == expected.has_headers()
    assert got.events() == expected.events()


def protobuf_put(body: bytes, headers: dict[str, str]) -> bytes:
    """protobuf's own encoding, headers inserted in reverse (its map order is its own)."""
    message = pb.Put(body=body)
    for key in reversed(list(headers)):
        message.headers[key] = headers[key]
    return message.SerializeToString()


# Payloads in shapes the channel never writes. Each is valid protobuf for ``Put``; the
# vectorized decoder leaves most of them to the exact path, which must still give protobuf's event.
ENTRY_KV = b"\x12\x06\x0a\x01k\x12\x01v"
UNUSUAL = [
    b"",  # no body, no headers
    ENTRY_KV,  # headers, no body
    ENTRY_KV + b"\x0a\x02hi",  # body after the headers
    b"\x0a\x01a\x0a\x01b",  # body twice: the last wins
    b"\x0a\x01a\x12\x06\x12\x01v\x0a\x01k",  # value before key
    b"\x0a\x01a\x12\x03\x0a\x01k\x12\x03\x12\x01v\x12\x00",  # key only, value only, empty entry
    b"\x0a\x01a\x18\x05",  # an unknown field
    b"\x0a\x01a" + ENTRY_KV + b"\x12\x06\x0a\x01k\x12\x01w",  # the same key twice
    b"\x0a\x81\x00a",  # a length in a non-minimal varint (2 bytes)
    b"\x0a\x81\x80\x80\x80\x00a",  # ... in 5 bytes
    b"\x0a\x81\x80\x80\x80\x80\x00a",  # ... in 6 bytes (beyond the vectorized decoder)
    b"\x0a\x01a\x12\x09\x0a\x04k\xc3\xa9y\x12\x01v",  # a non-ASCII key
    b"\x0a\x01a\x12\x08\x0a\x01k\x12\x01v\x18\x01",  # an unknown field inside an entry (protobuf drops it)
    b"\x0a\x01a\x12\x08\x0a\x01k\x12\x01v\x22\x00",  # ... of another wire type
]


def decoded(payload: bytes) -> tuple[bytes, dict[str, str]]:
    message = pb.Put.FromString(payload)
    return message.body, dict(message.headers)


# -- equality on random channels ----------------------------------------------------------
Batch = list[tuple[str, bytes, dict[str, str]]]
EDGE_SIZES = [0, 1, 127, 128, 129, 16383, 16384, 16385]  # varint edges of the body length
ALPHABET = "ak_0 é€\U0001d11e"  # 1- to 4-byte UTF-8


def random_text(rnd: random.Random, longest: int) -> str:
    return "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, longest)))


def random_item(rnd: random.Random, unusual_share: float) -> tuple[str, bytes, dict[str, str]]:
    if rnd.random() < unusual_share:
        return "raw", rnd.choice(UNUSUAL), {}
    size = rnd.choice(EDGE_SIZES) if rnd.random() < 0.1 else rnd.randint(0, 1500)
    headers = {random_text(rnd, 6): random_text(rnd, rnd.choice([12, 12, 160]))
               for _ in range(rnd.choice([0, 0, 1, 1, 2, 5]))}
    return rnd.choice(["event", "event", "protobuf"]), rnd.randbytes(size), headers


@st.composite
def batches(draw: st.DrawFn) -> list[Batch]:
    """Put batches: sizes from 1 to 300 events, most batches ordinary, some with a share of
    unusual payloads; several segments (128 KiB) in most examples."""
    rnd = random.Random(draw(st.integers(0, 2**64)))  # the bulk from a seed: st.randoms() draws per call
    shape = draw(st.lists(st.tuples(st.sampled_from([1, 5, 40, 120, 300]), st.sampled_from([0.0, 0.0, 0.05, 0.5])),
                          min_size=1, max_size=10))
    return [[random_item(rnd, share) for _ in range(size)] for size, share in shape]




def put_batch(channel: FileChannel, batch: Batch) -> None:
    if all(kind == "event" for kind, _, _ in batch):
        with channel.transaction() as tx:
            tx.put_many([Event(body, headers) for _, body, headers in batch])
        return
    put_payloads(channel, [encode_put(body, headers) if kind == "event" else
                           protobuf_put(body, headers) if kind == "protobuf" else body
                           for kind, body, headers in batch])


def check_random_channel(root: Path, monkeypatch: pytest.MonkeyPatch, vectorize_all: bool, batches: list[Batch],
                         take_sizes: list[int]) -> None:
    monkeypatch.setattr(columnar, "_MIN_RUN", 1 if vectorize_all else DEFAULT_MIN_RUN)
    outcomes = count_decodes(monkeypatch)
    with FileChannel(**channel_settings(root)) as channel:
        for batch in batches:
            put_batch(channel, batch)
        segments = len(list((root / "data").glob("log-*[0-9]")))
        event(f"segments: {min(segments, 4)}{'+' if segments > 4 else ''}")
        for n in take_sizes:  # consecutive takes, each committed after the comparison
            expected, got = both_takes(channel, n)
            assert_same(expected, got)
            with channel.transaction() as tx:
                assert tx.take_arrow(n).events() == expected.events()
    if vectorize_all and all(kind != "raw" for batch in batches for kind, _, _ in batch):
        assert all(outcomes), "a run of ordinary payloads fell back to the exact path"
    event(f"vectorized runs: {sum(outcomes)}/{len(outcomes)}" if len(outcomes) < 3 else "vectorized runs: 3+")


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, per run the vectorized decoder sees, whether it decoded it (False: exact path)."""
    outcomes: list[bool] = []
    original = columnar._decode

    def counting(buf: bytes, positions: Any) -> Any:
        try:
            part = original(buf, positions)
        except columnar._Unusual:
            outcomes.append(False)
            raise
        outcomes.append(True)
        return part

    monkeypatch.setattr(columnar, "_decode", counting)
    return outcomes


@pytest.mark.parametrize("vectorize_all", [False, True], ids=["default-runs", "all-vectorized"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(batches=batches(), take_sizes=st.lists(st.integers(1, 1500), min_size=1, max_size=4))
def test_arrow_take_equals_columns_take(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                                        vectorize_all: bool, batches: list[Batch], take_sizes: list[int]) -> None:
    check_random_channel(tmp_path_factory.mktemp("channel"), monkeypatch, vectorize_all, batches, take_sizes)


@pytest.mark.slow
@pytest.mark.parametrize("vectorize_all", [False, True], ids=["default-runs", "all-vectorized"])
@settings(max_examples=soak(250), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(batches=batches(), take_sizes=st.lists(st.integers(1, 1500), min_size=1, max_size=4))
def test_arrow_take_equals_columns_take_long(tmp_path_factory: pytest.TempPathFactory,
                                             monkeypatch: pytest.MonkeyPatch, vectorize_all: bool,
                                             batches: list[Batch], take_sizes: list[int]) -> None:
    check_random_channel(tmp_path_factory.mktemp("channel"), monkeypatch, vectorize_all, batches, take_sizes)


def test_unusual_payloads_decode_as_protobuf_does(tmp_path: Path, min_run: int) -> None:
    payloads = UNUSUAL * 5  # one run of 65 frames
    with FileChannel(**channel_settings(tmp_path)) as channel:
        put_payloads(channel, payloads)
        expected, got = both_takes(channel, len(payloads))
        assert_same(expected, got)
        assert [(e.body, dict(e.headers)) for e in got.events()] == [decoded(p) for p in payloads]


def test_usual_runs_are_vectorized(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the Arrow take: runs of ordinary events do not fall back to the exact path."""
    outcomes = count_decodes(monkeypatch)
    with FileChannel(**channel_settings(tmp_path, max_file_size=32 << 20)) as channel:
        events = [Event(bytes(300) * (i % 40), {"timestamp": str(i), "é": "ü" * (i % 3)} if i % 4 else {})
                  for i in range(3000)]  # about 18 MiB in one segment: three runs (8 MiB limit)
        with channel.transaction() as tx:
            tx.put_many(events)
        expected, got = both_takes(channel, len(events))
        assert_same(expected, got)
    assert outcomes == [True, True, True]


def test_takes_across_segments_spills_and_out_of_order_pointers(tmp_path: Path, min_run: int) -> None:
    """Several segments, and a queue whose pointers go backwards: a put transaction that spilled
    its frames early but committed last."""
    worker = Worker()  # a thread holds one transaction at a time
    with FileChannel(**channel_settings(tmp_path, spill_bytes=4096)) as channel:
        early = worker.run(channel.transaction)
        worker.run(lambda: early.put_many([Event(b"early-%d" % i + bytes(200), {"n": str(i)}) for i in range(80)]))
        with channel.transaction() as tx:  # committed first, written after early's spilled frames
            tx.put_many([Event(b"late-%d" % i, {} if i % 2 else {"n": str(i)}) for i in range(80)])
        worker.run(early.commit)
        for i in range(5):
            with channel.transaction() as tx:
                tx.put_many([Event(random.Random(i).randbytes(700), {"i": str(i)}) for _ in range(100)])
        assert len(list((tmp_path / "data").glob("log-*[0-9]"))) > 3  # the take spans several segments
        expected, got = both_takes(channel, len(channel))
        assert_same(expected, got)
        events = got.events()
        assert events[0].body.startswith(b"late-") and events[80].body.startswith(b"early-")
    worker.close()


@given(st.lists(st.tuples(st.integers(1, 3), st.integers(64, 9 << 20)), max_size=300))
@settings(max_examples=200, deadline=None)
def test_runs_are_those_of_the_exact_reader(pointers: list[tuple[int, int]]) -> None:
    flat = [(log << 32) | offset for log, offset in pointers]
    expected, i = [], 0
    while i < len(flat):
        j = reader._run_end(flat, i)
        expected.append((i, j))
        i = j
    assert columnar.runs(np.array(flat, np.int64), reader._RUN_LIMIT) == expected


# -- transaction semantics ----------------------------------------------------------------
def test_take_arrow_is_a_take(tmp_path: Path) -> None:
    with FileChannel(**channel_settings(tmp_path, transaction_capacity=50)) as channel:
        for start in (0, 30):
            with channel.transaction() as tx:
                tx.put_many([Event(b"%d" % i, {"i": str(i)}) for i in range(start, start + 30)])
        with channel.transaction() as tx:
            first = tx.take_arrow(10)
            assert len(channel) == 50  # in flight: not queued
            tx.rollback()  # back at the head, in order
        with channel.transaction() as tx:
            assert tx.take_arrow(10).events() == first.events()
            assert tx.take_arrow(5).to_columns().bodies == [b"%d" % i for i in range(10, 15)]
            with pytest.raises(TransactionCapacityError):
                tx.take_arrow(40)
            with pytest.raises(TransactionError):
                tx.put(Event(b"x"))
        assert len(channel) == 45
        empty = channel.transaction()
        with pytest.raises(ValueError):
            empty.take_arrow(-1)
        empty.rollback()
    with FileChannel(**channel_settings(tmp_path, transaction_capacity=50)) as channel:  # the TAKE frames
        assert len(channel) == 45
        with channel.transaction() as tx:
            assert tx.take_arrow(1).to_columns().bodies == [b"15"]


def test_empty_take(tmp_path: Path) -> None:
    with FileChannel(**channel_settings(tmp_path)) as channel, channel.transaction() as tx:
        got = tx.take_arrow(10)
    assert len(got) == 0 and not got.has_headers()
    assert got.table.schema == columnar.TAKEN_SCHEMA and got.to_columns() == EventColumns()


def test_arrow_columns_types(tmp_path: Path) -> None:
    with FileChannel(**channel_settings(tmp_path)) as channel:
        with channel.transaction() as tx:
            tx.put_many([Event(b"a", {"k": "v", "é": ""}), Event(b"", {})] * 20)
        with channel.transaction() as tx:
            got = tx.take_arrow(40)
    assert got.bodies.type == pa.binary() and got.seqs.type == pa.int64()
    assert got.headers.type == pa.map_(pa.string(), pa.string())
    assert got.headers.to_pylist()[:2] == [[("k", "v"), ("é", "")], []]  # empty map, not null
    assert got.headers.null_count == 0


# -- damage: the same error as take ----------------------------------------------------------
@pytest.fixture
def damaged_root(tmp_path: Path) -> Path:
    """Two segments of events with and without headers, closed with a checkpoint (so that open
    does not read the frames: the take finds the damage)."""
    with FileChannel(**channel_settings(tmp_path)) as channel:
        for i in range(5):
            with channel.transaction() as tx:
                tx.put_many([Event(random.Random(i * 100 + k).randbytes(500 + k), {"t": str(k)} if k % 3 else {})
                             for k in range(60)])
    assert segment(tmp_path, 2).exists()
    return tmp_path


def take_failure(root: Path, method: str) -> Exception:
    with FileChannel(**channel_settings(root)) as channel:
        assert channel.replay_stats.frames == 0  # restarted from the checkpoint
        queued = len(channel)
        with pytest.raises(Exception) as info, channel.transaction() as tx:
            getattr(tx, method)(queued)
        assert len(channel) == queued  # nothing was taken
    return info.value


def assert_same_failure(root: Path) -> Exception:
    exact = take_failure(root, "take")
    arrow = take_failure(root, "take_arrow")
    assert type(arrow) is type(exact) and str(arrow) == str(exact)
    if isinstance(exact, CorruptLogError):
        assert isinstance(arrow, CorruptLogError)
        assert (arrow.path, arrow.offset, arrow.reason) == (exact.path, exact.offset, exact.reason)
    return arrow


def all_events(root: Path) -> list[Event]:
    with FileChannel(**channel_settings(root)) as channel, channel.transaction() as tx:
        events = tx.take_arrow(len(channel)).events()
        tx.rollback()
    return events


FLIPS = [0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 23, 24, 25, 26, 40, -5, -4, -2, -1]  # header, payload, CRC


@pytest.mark.parametrize("position", FLIPS)
@pytest.mark.parametrize("which", [(1, 5), (1, -1), (2, 0), (2, 30)], ids=["mid", "run-end", "seg2-first", "seg2"])
def test_byte_flip_raises_the_same_error(damaged_root: Path, min_run: int, which: tuple[int, int],
                                         position: int) -> None:
    intact = all_events(damaged_root)
    log_id, index = which
    path = segment(damaged_root, log_id)
    frame = frames_of_type(path, fmt.FrameType.PUT)[index]
    flip(path, frame.offset + position % frame.length)
    err = assert_same_failure(damaged_root)
    assert isinstance(err, CorruptLogError)
    assert (err.path, err.offset) == (str(path), frame.offset)
    flip(path, frame.offset + position % frame.length)
    assert all_events(damaged_root) == intact  # the failed takes put every event back, in order


def test_random_damage_raises_the_same_error(damaged_root: Path) -> None:
    intact = all_events(damaged_root)
    rng = random.Random(7)
    for _ in range(12):
        path = segment(damaged_root, rng.choice([1, 2]))
        frame = rng.choice(frames_of_type(path, fmt.FrameType.PUT))
        at = frame.offset + rng.randrange(frame.length)
        flip(path, at)
        assert_same_failure(damaged_root)
        flip(path, at)  # repaired for the next round
    assert all_events(damaged_root) == intact


@pytest.mark.parametrize("payload", [
    b"\x0a\x01x\x12\x05\x0a\x01k",  # an entry longer than the payload
    b"\x0a\x01x\x12\x03\x0a\x01\xff",  # a key that is not UTF-8
    b"\x0a\x01x\x12\x04\x0a\x00\x12\x01",  # a value longer than its entry
    b"\x0a" + b"\x80" * 10 + b"\x01",  # a varint of 11 bytes
    b"\x0a\x05ab",  # a body longer than the payload
], ids=["entry", "utf8", "value", "varint", "body"])
def test_invalid_protobuf_with_a_valid_checksum_raises_the_same_error(tmp_path: Path, min_run: int,
                                                                      payload: bytes) -> None:
    with FileChannel(**channel_settings(tmp_path)) as channel:
        put_payloads(channel, [encode_put(b"%d" % i, {"k": "v"}) for i in range(40)] + [payload])
        errors = []
        for method in ("take_columns", "take_arrow"):  # the project's error, not protobuf's DecodeError
            with pytest.raises(CorruptLogError) as info, channel.transaction() as tx:
                getattr(tx, method)(41)
            errors.append((str(info.value), info.value.offset))
            assert len(channel) == 41
            assert "not a valid Put message" in info.value.reason
        assert errors[0] == errors[1]


def test_a_sequence_number_beyond_int64_is_refused_by_the_arrow_take_only(damaged_root: Path, min_run: int) -> None:
    """A CRC-valid PUT frame whose u64 seq does not fit the int64 seq column (the channel never
    writes one: seqs come from the clock in microseconds). take_columns returns it as it is;
    take_arrow raised OverflowError (found by the long fuzz run), now CorruptLogError naming
    the frame, and the events stay queued."""
    path = segment(damaged_root, 1)
    frame = frames_of_type(path, fmt.FrameType.PUT)[7]
    data = bytearray(path.read_bytes())
    data[frame.offset + 16: frame.offset + 24] = (2**63 + 5).to_bytes(8, "little")
    end = frame.offset + frame.length - 4
    data[end: end + 4] = crc32c(bytes(data[frame.offset: end])).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with FileChannel(**channel_settings(damaged_root)) as channel:
        queued = len(channel)
        with channel.transaction() as tx:
            assert tx.take_columns(queued).seqs[7] == 2**63 + 5
            tx.rollback()
        with pytest.raises(CorruptLogError) as info, channel.transaction() as tx:
            tx.take_arrow(queued)
        assert (info.value.path, info.value.offset) == (str(path), frame.offset)
        assert "does not fit the int64 seq column" in info.value.reason
        assert len(channel) == queued
