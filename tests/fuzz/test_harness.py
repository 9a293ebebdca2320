"""The oracle itself: it must catch each defect class it promises to catch."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given

from ingest_toolkit.errors import CorruptLogError

from .harness import FUZZ_SETTINGS, OracleFailure, bit_flips, check_call, mutated


def test_a_foreign_exception_fails_the_oracle() -> None:
    with pytest.raises(OracleFailure, match="struct.error"):
        check_call(lambda: struct.unpack_from(">q", b"\0"))


def test_the_projects_error_is_an_accepted_outcome() -> None:
    def reader() -> None:
        raise CorruptLogError(path="log-1", offset=64, reason="bad crc")

    outcome = check_call(reader)
    assert isinstance(outcome.error, CorruptLogError)


def test_a_hang_fails_the_oracle() -> None:
    def spin() -> None:
        while True:
            pass

    with pytest.raises(OracleFailure, match="longer than 0.2 s"):
        check_call(spin, max_seconds=0.2)


def test_an_allocation_driven_by_a_length_fails_the_oracle() -> None:
    claimed = 200 << 20
    with pytest.raises(OracleFailure, match="allocated"):
        check_call(lambda: bytearray(claimed), max_alloc_bytes=64 << 20)


def test_bit_flips_cover_every_bit_once() -> None:
    flips = list(bit_flips(b"\x00\xff"))
    assert len(flips) == 16
    low = {bytes([1 << i, 0xFF]) for i in range(8)}
    high = {bytes([0, 0xFF ^ (1 << i)]) for i in range(8)}
    assert {f for _, f in flips} == low | high


@FUZZ_SETTINGS
@given(mutated([b"abcdefgh" * 8]))
def test_mutations_stay_small_and_vary(data: bytes) -> None:
    assert len(data) <= 64 * 2 + 4 * 64 + 4 * 32
