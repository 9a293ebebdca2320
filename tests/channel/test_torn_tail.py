"""Recovery of a torn tail is linear in the bytes it scans, whatever the event bodies hold.

Bodies are stored verbatim, so a client can fill them with COMMIT frame headers. The tail search
must neither checksum a claimed length per candidate (quadratic: the issue measured 6 s for a
1 MiB tail) nor miss a real COMMIT frame after damage.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.codec import TXN_PUT, TXN_TAKE, encode_commit
from ingest_toolkit.channel.tags import TagRecord
from ingest_toolkit.channel.tail import MAX_COMMIT_FRAME, TailStats, find_commit_frame
from ingest_toolkit.errors import CorruptLogError
from tests.fuzz.harness import check_call

HEADER = fmt.SEGMENT_HEADER_SIZE


def commit_headers(claimed: int) -> bytes:
    """A COMMIT frame header every 8 bytes, each claiming ``claimed`` bytes (the issue's attack)."""
    return b"\xc7\x1f\x03\x00" + struct.pack("<I", claimed)


def commit_signatures() -> bytes:
    """Two overlapping candidates every 38 bytes with everything a COMMIT frame's header and
    payload start can show but a valid checksum: the worst case for the linear search."""
    sig = b"\xc7\x1f\x03\x00" + bytes([MAX_COMMIT_FRAME, 0, 0, 0])
    return sig + b"\0\0" + sig + bytes(6) + b"\x08\x01" + bytes(8) + b"\x08\x01"


ATTACKS = {"headers claiming 512 KiB": commit_headers(512 << 10), "headers claiming 60 bytes": commit_headers(60),
           "full signatures": commit_signatures()}


def settings(root: Path) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "data")], "max_file_size": 8 << 20,
            "max_event_size": 1 << 20, "min_free_bytes": 0, "preallocate_bytes": 8192, "keep_alive": 0.0,
            "checkpoint_interval": 0}


def torn_segment(root: Path, unit: bytes, tail: int) -> Path:
    """A crashed channel whose newest segment is ``tail`` bytes of adversarial event bodies
    after a torn first frame, with no COMMIT frame in it."""
    with FileChannel(**settings(root)) as channel:
        with channel.transaction() as tx:
            tx.put(Event(b"kept"))
        body = (unit * (64 * 1024 // len(unit) + 1))[: 64 * 1024]
        with channel.transaction() as tx:
            tx.put_many([Event(body) for _ in range(tail // len(body))])
        start = channel.stats()["log_files"][channel.stats()["writing"]]["path"]
    path = Path(start)
    path.with_name(path.name + ".meta").unlink()  # unsealed: as a crash leaves it
    (root / "cp" / "checkpoint.meta").unlink()
    data = bytearray(path.read_bytes())
    frames, pos = [], HEADER
    while pos < len(data):
        ftype, length, _txn, _seq = fmt.check_frame(data, pos, len(data))
        frames.append((pos, ftype, length))
        pos += length
    last_commit = frames[-1]
    assert last_commit[1] == fmt.FrameType.COMMIT
    del data[last_commit[0]:]  # the second transaction never committed
    sector = -(-(frames[2][0] + 30) // 512) * 512
    data[sector: sector + 512] = bytes(512)  # a page of its first frame never reached the disk: the tail
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_adversarial_torn_tail_recovers_in_linear_work(tmp_path: Path, attack: str) -> None:
    path = torn_segment(tmp_path, ATTACKS[attack], 1 << 20)
    data = path.read_bytes()
    kept = fmt.encode_frame(1, 0, 0, b"\x0a\x04kept") + fmt.encode_frame(3, 0, 0, encode_commit(TXN_PUT, 1))
    tail_start = HEADER + len(kept)
    stats = TailStats()
    assert find_commit_frame(data, tail_start + 1, stats) is None
    tail = len(data) - tail_start
    assert stats.crc_bytes <= 16 * tail, stats  # each byte checksummed a bounded number of times
    assert stats.candidates <= tail // 8

    def recover() -> list[bytes]:
        with FileChannel(**settings(tmp_path)) as channel, channel.transaction() as tx:
            return [e.body for e in tx.take(10)]

    if stats.candidates:  # the linear search's own worst case: its work is bounded above
        assert recover() == [b"kept"]
    else:  # the attack costs the search nothing now; the quadratic search took minutes
        assert check_call(recover, max_seconds=2.0).value == [b"kept"]


U64 = 2**64 - 1
PAYLOADS = [encode_commit(TXN_PUT, 1), encode_commit(TXN_TAKE, 65536),
            encode_commit(TXN_PUT, U64, TagRecord("t" * 128, U64, U64, U64))]


@pytest.mark.parametrize("payload", PAYLOADS, ids=["smallest", "take", "largest tagged"])
def test_every_commit_frame_the_writer_makes_is_found_after_damage(payload: bytes) -> None:
    frame = fmt.encode_frame(fmt.FrameType.COMMIT, 2**63 + 5, 0, payload)
    assert len(frame) <= MAX_COMMIT_FRAME
    noise = commit_signatures() * 50
    data = noise + frame + noise
    assert find_commit_frame(data, 1) == len(noise)
    assert find_commit_frame(noise[:10] + frame, 0) == 10  # overlapping a false candidate


def test_a_real_commit_after_damage_in_the_newest_segment_is_still_damage(tmp_path: Path) -> None:
    with FileChannel(**settings(tmp_path)) as channel:
        for body in (b"a", b"b", b"c"):
            with channel.transaction() as tx:
                tx.put(Event(body * 100))
    path = tmp_path / "data" / "log-1"
    path.with_name("log-1.meta").unlink()
    (tmp_path / "cp" / "checkpoint.meta").unlink()
    data = bytearray(path.read_bytes())
    data[HEADER + 40] ^= 0xFF  # the first PUT frame; two committed transactions follow
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="a complete COMMIT frame follows"):
        FileChannel(**settings(tmp_path))
