"""Throughput of the spool_dir and http sources against direct channel puts.

Run from the repository root with the project's virtualenv::

    python bench/collect_sources.py            # 200,000 lines of 100 bytes, batches of 1000
    python bench/collect_sources.py --lines 50000

Rows (every figure from the same run, fresh channels, ``durability="fsync"``):

* ``baseline``: read the same files, split lines, ``tx.put_many`` per batch: the channel alone.
* ``spool_dir``: the source's ``poll()``: pre-check, batch ids (commit tags), one durable
  position write per batch, ``.COMPLETED`` renames.
* ``http``: text/plain requests of one batch each over one keep-alive connection, with
  ``X-Batch-Id``; the client runs in this process too (it shares the CPU).
"""

from __future__ import annotations

import argparse
import http.client
import os
import tempfile
import time
from pathlib import Path

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.collect.pipeline import Pipeline
from ingest_toolkit.collect.selectors import ReplicatingSelector
from ingest_toolkit.collect.sources import HttpSettings, HttpSource, SpoolDirSettings, SpoolDirSource


def channel(root: Path) -> FileChannel:
    return FileChannel(checkpoint_dir=str(root / "cp"), data_dirs=[str(root / "data")], min_free_bytes=0,
                       checkpoint_interval=0, capacity=2_000_000)


def make_files(spool: Path, files: int, lines: int, size: int) -> None:
    spool.mkdir(parents=True)
    per_file = lines // files
    for f in range(files):
        body = b"".join(b"%08d " % i + b"x" * (size - 10) + b"\n" for i in range(per_file))
        (spool / f"f{f:03d}.log").write_bytes(body)


def baseline(root: Path, spool: Path, batch: int) -> tuple[int, float]:
    ch = channel(root)
    start, total = time.perf_counter(), 0
    for path in sorted(spool.iterdir()):
        lines = path.read_bytes().split(b"\n")[:-1]
        for i in range(0, len(lines), batch):
            with ch.transaction() as tx:
                tx.put_many([Event(line, {}) for line in lines[i:i + batch]])
            total += len(lines[i:i + batch])
    elapsed = time.perf_counter() - start
    ch.close()
    return total, elapsed


def spool(root: Path, spool_dir: Path, batch: int) -> tuple[int, float]:
    ch = channel(root)
    pipeline = Pipeline({"ch": ch}, selector=ReplicatingSelector(["ch"]), name="bench")
    source = SpoolDirSource("bench", SpoolDirSettings(type="spool_dir", dir=spool_dir, channels=["ch"],
                                                      batch_size=batch), pipeline, state_dir=root / "state")
    start = time.perf_counter()
    source.poll()
    elapsed = time.perf_counter() - start
    total = source.stats()["events"]
    ch.close()
    return total, elapsed


def http_source(root: Path, spool_dir: Path, batch: int) -> tuple[int, float]:
    ch = channel(root)
    pipeline = Pipeline({"ch": ch}, selector=ReplicatingSelector(["ch"]), name="bench")
    source = HttpSource("bench", HttpSettings(type="http", channels=["ch"]), pipeline, state_dir=root / "state")
    source.start()
    bodies = []
    for path in sorted(spool_dir.iterdir()):
        lines = path.read_bytes().split(b"\n")[:-1]
        bodies += [b"\n".join(lines[i:i + batch]) + b"\n" for i in range(0, len(lines), batch)]
    conn = http.client.HTTPConnection("127.0.0.1", source.port)
    start = time.perf_counter()
    for n, body in enumerate(bodies):
        conn.request("POST", "/events", body=body, headers={"Content-Type": "text/plain", "X-Batch-Id": f"b{n}"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
    elapsed = time.perf_counter() - start
    conn.close()
    total = source.stats()["events"]
    source.stop(5)
    ch.close()
    return total, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--line-size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        make_files(root / "in-a", args.files, args.lines, args.line_size)
        make_files(root / "in-b", args.files, args.lines, args.line_size)
        n, base = baseline(root / "base", root / "in-a", args.batch)
        print(f"baseline   {n:>9,} events  {base:6.2f} s  {n / base:>10,.0f} events/s")
        for name, run, directory in (("spool_dir", spool, root / "in-b"), ("http", http_source, root / "in-a")):
            n, secs = run(root / name, directory, args.batch)
            print(f"{name:<10} {n:>9,} events  {secs:6.2f} s  {n / secs:>10,.0f} events/s  "
                  f"ratio vs baseline {base / secs:.2f}")


if __name__ == "__main__":
    main()
