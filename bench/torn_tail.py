"""Recovery time of a torn tail made of adversarial event bodies.

Run from the repository root with the project's virtualenv::

    python bench/torn_tail.py                  # a full 256 MiB segment (max_file_size default)
    python bench/torn_tail.py --size 64MiB     # a smaller one

Event bodies are stored verbatim, so a client can fill them with bytes that look like COMMIT
frames. When the newest segment of a crashed channel has a torn tail, recovery searches the
tail for a complete COMMIT frame (log-format.md, section 5); that search must stay linear.

The segment is written with the log format's own encoders (segment header, PUT frames of one
transaction that never committed, 64 KiB bodies) up to ``--size`` bytes, exactly as the channel
writes it, and its first frame is torn, so the whole segment after its header is the tail. No
``.meta`` and no checkpoint: the open is a full replay of a crashed channel. Two bodies:

* ``headers``: a COMMIT frame header every 8 bytes, each claiming 1 MiB (the issue's attack:
  the quadratic search checksummed each claimed megabyte);
* ``signatures``: two overlapping candidates every 38 bytes with everything a COMMIT frame's
  header and payload start can show but a valid checksum (the linear search's own worst case).

Reported per body: seconds of ``FileChannel(...)`` (the recovery, median of ``--repeats``), the
tail bytes, candidates checksummed and bytes checksummed by the search (``tail.TailStats``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import tempfile
import time
import uuid
from pathlib import Path

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.codec import encode_put
from ingest_toolkit.channel.tail import MAX_COMMIT_FRAME, TailStats, find_commit_frame

BODY = 64 * 1024


def parse_size(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
    for suffix, factor in units.items():
        if text.lower().endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


def unit(kind: str) -> bytes:
    if kind == "headers":
        return b"\xc7\x1f\x03\x00" + struct.pack("<I", 1 << 20)
    sig = b"\xc7\x1f\x03\x00" + bytes([MAX_COMMIT_FRAME, 0, 0, 0])
    return sig + b"\0\0" + sig + bytes(6) + b"\x08\x01" + bytes(8) + b"\x08\x01"


def build(root: Path, kind: str, size: int) -> tuple[Path, int]:
    """A crashed channel's only segment: ``size`` bytes, torn at its first frame."""
    data_dir = root / "data"
    data_dir.mkdir(parents=True)
    (root / "cp").mkdir()
    pattern = unit(kind)
    body = (pattern * (BODY // len(pattern) + 1))[:BODY]
    payload = encode_put(body, {})
    parts = [fmt.encode_segment_header(1, uuid.uuid4().bytes, time.time_ns())]
    written, seq, txn = fmt.SEGMENT_HEADER_SIZE, 1, 7
    frame_size = len(payload) + fmt.FRAME_OVERHEAD
    while written + frame_size <= size:
        frame = fmt.encode_frame(fmt.FrameType.PUT, txn, seq, payload)
        parts.append(frame)
        written += len(frame)
        seq += 1
    image = bytearray(b"".join(parts))
    image[fmt.SEGMENT_HEADER_SIZE + 30] ^= 0xFF  # the first frame is torn
    path = data_dir / "log-1"
    path.write_bytes(bytes(image))
    return path, len(image) - fmt.SEGMENT_HEADER_SIZE


def measure(kind: str, size: int, repeats: int, base: str | None) -> dict[str, float | int]:
    seconds = []
    stats = TailStats()
    tail = 0
    for _ in range(repeats):
        root = Path(tempfile.mkdtemp(prefix="torn-tail-", dir=base))
        try:
            path, tail = build(root, kind, size)
            stats = TailStats()
            data = path.read_bytes()
            assert find_commit_frame(data, fmt.SEGMENT_HEADER_SIZE + 1, stats) is None
            del data
            start = time.perf_counter()
            channel = FileChannel(checkpoint_dir=str(root / "cp"), data_dirs=[str(root / "data")],
                                  max_file_size=max(size, 64 * 1024), min_free_bytes=0, checkpoint_interval=0)
            seconds.append(time.perf_counter() - start)
            assert channel.replay_stats.torn_bytes == tail and len(channel) == 0
            channel.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return {"seconds": statistics.median(seconds), "tail_bytes": tail, "candidates": stats.candidates,
            "crc_bytes": stats.crc_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=256 << 20, help="segment size (default 256MiB)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write the segment (default: the temp dir)")
    args = parser.parse_args()
    print(f"segment of {args.size / 2**20:.0f} MiB, torn at its first frame; cpus: {os.cpu_count()}")
    print(f"{'bodies':<12} {'recovery s':>11} {'tail MiB':>9} {'MiB/s':>7} {'candidates':>11} {'crc bytes':>13}")
    for kind in ("headers", "signatures"):
        r = measure(kind, args.size, args.repeats, args.dir)
        mib = r["tail_bytes"] / 2**20
        print(f"{kind:<12} {r['seconds']:>11.2f} {mib:>9.1f} {mib / r['seconds']:>7.0f} {r['candidates']:>11,} "
              f"{r['crc_bytes']:>13,}")


if __name__ == "__main__":
    main()
