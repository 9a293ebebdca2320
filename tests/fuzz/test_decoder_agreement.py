"""Fuzz targets of the PUT decoders (issue 28, item 5): every fast decoder agrees with the
reference, ``codec.decode_put`` of each payload alone (the oracle: ``put_decoders.py``).

Three targets, each under the oracle of ``harness.py`` (the decoders return or raise their own
refusal - protobuf's ``DecodeError`` from the codec, ``CorruptLogError`` from a reader - within
2 s and 64 MiB) and then compared with the reference:

* crafted payloads: canonical ones, protobuf-like tokens of every wire type with right and wrong
  lengths, damaged canonical ones, sometimes repeated to a vectorized run's size;
* damaged real payloads: what the channel's encoders and protobuf's own write, mutated;
* the take paths over a segment file: ``EventReader.read``, ``read_columns`` and ``read_arrow``
  (vectorized when the run is long enough) against the reference, error offsets included.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Sequence
from pathlib import Path

from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.codec import encode_put
from ingest_toolkit.channel.fs import OsFileSystem
from ingest_toolkit.channel.proto import channel_pb2 as pb
from ingest_toolkit.channel.reader import EventReader
from ingest_toolkit.errors import CorruptLogError

from .harness import FUZZ_SETTINGS, check_call, mutated
from .put_decoders import BASE, Refused, assert_agreement, frames, outcomes, put_payloads, reference

SEQS = range(5000, 5200)
_HEADERS = [{}, {"k": "v"}, {"timestamp": "1763900000123", "host": "web-1"}, {"": "", "é": "✓"}, {"long": "v" * 130}]
PAYLOAD_SEEDS = [encode_put(body, headers) for body in (b"", b"b", bytes(200)) for headers in _HEADERS] + [
    pb.Put(body=b"x", headers={"a": "b", "c": "d"}).SerializeToString(),  # protobuf's own encoder
    pb.Put(headers={"only": "headers"}).SerializeToString(),
]


@functools.cache
def _warm() -> None:
    """Run every decoder once outside a timed call: the first Arrow cast and dictionary encoding
    load their kernels (seconds on a loaded machine), which is not the input's doing."""
    payloads = [encode_put(b"b", {"k": "v", "j": "w"})] * 2
    outcomes(payloads, [1, 2])
    _take_paths(payloads)


def _agree(payloads: Sequence[bytes]) -> None:
    _warm()
    seqs = list(SEQS[: len(payloads)])
    expected = check_call(lambda: reference(payloads, seqs)).value
    got = check_call(lambda: outcomes(payloads, seqs)).value
    assert_agreement(payloads, expected, got)


@FUZZ_SETTINGS
@given(put_payloads())
def test_decoders_agree_on_crafted_payloads(payloads: list[bytes]) -> None:
    _agree(payloads)


@FUZZ_SETTINGS
@given(st.lists(st.one_of(st.sampled_from(PAYLOAD_SEEDS), mutated(PAYLOAD_SEEDS)), min_size=1, max_size=12))
def test_decoders_agree_on_damaged_payloads(payloads: list[bytes]) -> None:
    _agree(payloads)


def _read(reader: EventReader, method: str, pointers: list[int]) -> list[tuple[bytes, dict[str, str]]] | int:
    """The events a reader method returns, or the offset of the frame its CorruptLogError names."""
    try:
        taken = getattr(reader, method)(pointers)
    except CorruptLogError as err:
        assert "not a valid Put message" in err.reason, err
        return err.offset
    events = taken if isinstance(taken, list) else taken.events()
    return [(e.body, dict(e.headers)) for e in events]


def _take_paths(payloads: list[bytes]) -> dict[str, list[tuple[bytes, dict[str, str]]] | int]:
    buf, pointers = frames(payloads, list(SEQS[: len(payloads)]))
    with tempfile.TemporaryDirectory(prefix="fuzz-decoders-") as directory:
        path = Path(directory) / "log-1"
        path.write_bytes(fmt.encode_segment_header(1, bytes(16), 0) + buf)
        reader = EventReader(OsFileSystem(), {1: str(path)})
        try:
            return {method: _read(reader, method, pointers) for method in ("read", "read_columns", "read_arrow")}
        finally:
            reader.close()


@FUZZ_SETTINGS
@given(put_payloads(max_size=4))
def test_take_paths_agree_with_the_reference(payloads: list[bytes]) -> None:
    _warm()
    expected = check_call(lambda: reference(payloads, list(SEQS[: len(payloads)]))).value
    got = check_call(lambda: _take_paths(payloads)).value
    if isinstance(expected, Refused):
        assert expected.index is not None
        offset = BASE + sum(len(p) + fmt.FRAME_OVERHEAD for p in payloads[: expected.index])
        assert got == dict.fromkeys(got, offset), (payloads, expected, got)
        return
    want = [(body, headers) for body, headers, _seq in expected]
    assert got == dict.fromkeys(got, want), (payloads, got)


def test_the_seeds_decode() -> None:
    for payload in PAYLOAD_SEEDS:
        try:
            pb.Put.FromString(payload)
        except DecodeError:  # pragma: no cover - a seed must be valid
            raise AssertionError(payload) from None
