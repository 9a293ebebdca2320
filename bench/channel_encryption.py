"""Encrypted against unencrypted put and take throughput of the durable file channel.

Run from the repository root with the project's virtualenv::

    python bench/channel_encryption.py            # default parameters, about a minute on 2 CPUs
    python bench/channel_encryption.py --quick    # smoke run
    python bench/channel_encryption.py --run-sizes   # only: the cost of sealing by run size

``--run-sizes`` times the write side alone (framing 1000 payloads of ``--event-size`` bytes and
joining them as the log writer does, plain and sealed in runs of several sizes): process CPU time
and minor page faults per 1000 events, the best of 5 rounds of 300 batches. It is how the run size
(``crypto.RUN_BYTES``) was chosen: buffers of 128 KiB and more are mapped afresh by malloc, and
their page faults cost more than the AES-GCM calls that larger runs save.

Both variants make the measurement of ``bench/channel_throughput.py`` section 1 (its settings and
events: ``tx.put_many`` of ``--batch-size`` events of ``--event-size`` bytes per transaction,
``durability="fsync"``, one fdatasync per commit, then takes of ``--batch-size`` until empty) and
also record the process CPU time of each phase; the encrypted variant adds a key file (mode 0600)
and ``encryption_key_id``. The two variants alternate within each repeat, so
a change in disk speed or load hits both alike; each figure is the median of ``--repeats`` runs and
the ratios are medians of the per-repeat ratios. The 1-minute load average is printed at the start
and the end (the machine may be shared).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import channel_throughput as throughput  # noqa: E402  (bench/ is this script's directory)

from ingest_toolkit.channel import FileChannel

TARGET = 0.7  # encrypted / unencrypted, put and take


def key_file(directory: str) -> str:
    path = os.path.join(directory, "bench.keys")
    with open(path, "w", encoding="ascii") as f:
        f.write(f"1:{os.urandom(32).hex()}\n")
    os.chmod(path, 0o600)
    return path


def run_variant(root: str, keys: str | None, args: argparse.Namespace) -> dict[str, float]:
    """``bench_put_take`` of bench/channel_throughput.py (put, then take everything back), with the
    process CPU time of each phase beside its wall time: on a shared machine the wall clock also
    counts time other processes had the CPU, the CPU time only what this process did."""
    settings = throughput.channel_settings(root, capacity=args.events + args.batch_size,
                                           transaction_capacity=max(args.batch_size, 10_000))
    if keys is not None:
        settings.update(encryption_key_file=keys, encryption_key_id=1)
    pool = throughput.make_events(args.batch_size, args.event_size, None)
    batches = args.events // args.batch_size
    with FileChannel(**settings) as channel:
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(batches):
            with channel.transaction() as tx:
                tx.put_many(pool)
        put_wall, put_cpu = time.perf_counter() - wall, time.process_time() - cpu
        stats = channel.stats()
        taken, first = 0, None
        wall, cpu = time.perf_counter(), time.process_time()
        while True:
            with channel.transaction() as tx:
                got = tx.take(args.batch_size)
            if not got:
                break
            first = first or got[0]
            taken += len(got)
        take_wall, take_cpu = time.perf_counter() - wall, time.process_time() - cpu
        fsyncs, commits = channel.stats()["fsyncs"], channel.stats()["commits"]
    shutil.rmtree(root, ignore_errors=True)
    n = batches * args.batch_size
    if taken != n or first is None or first.body != pool[0].body:
        raise SystemExit(f"take returned {taken} events (expected {n}) or wrong contents")
    return {"put": n / put_wall, "take": n / take_wall, "put_cpu_us": put_cpu / n * 1e6,
            "take_cpu_us": take_cpu / n * 1e6, "put_fsyncs": stats["fsyncs"], "put_commits": stats["commits"],
            "take_fsyncs": fsyncs - stats["fsyncs"], "take_commits": commits - stats["commits"]}


def _runs(sealer: Any, payloads: list[bytes], kib: int) -> tuple[list[bytes], int, int, int]:
    """The arguments of ``Sealer.seal_chunk`` for ``payloads`` framed in open runs of ``kib``: a
    put call's framing and its sealing at its place (log 1, offset 64), as a commit does both."""
    runs, _placements = sealer.put_runs(1, 1, payloads, kib << 10)
    return runs, len(runs), 1, 64


def run_sizes(args: argparse.Namespace) -> None:
    """Print the write side's cost per 1000 events, plain and sealed in runs of several sizes."""
    import resource

    from ingest_toolkit.channel import format as fmt
    from ingest_toolkit.channel.crypto import KeyRing, Sealer

    payloads = [b"\x0a" + bytes([args.event_size & 0x7F | 0x80, args.event_size >> 7]) + os.urandom(args.event_size)
                for _ in range(1000)]
    sealer = Sealer(KeyRing({1: os.urandom(32)}, 1, "bench"), os.urandom(16))
    cases = {"plain PUT frames": lambda: b"".join(fmt.encode_frames(1, 1, 1, payloads))}
    for kib in (16, 32, 64, 128, 256):
        cases[f"sealed runs of {kib} KiB"] = lambda kib=kib: sealer.seal_chunk(*_runs(sealer, payloads, kib))
    for name, case in cases.items():
        best, faults = float("inf"), 0.0
        for _round in range(5):
            before, cpu = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
            for _ in range(300):
                case()
            best = min(best, (time.process_time() - cpu) / 300)
            faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 300
        print(f"{name:24} {best * 1e6:7.0f} us CPU per 1000 events, {faults:5.0f} page faults")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", help="parent of the scratch directory (default: the system temp dir)")
    parser.add_argument("--quick", action="store_true", help="20,000 events, 2 repeats")
    parser.add_argument("--run-sizes", action="store_true", help="only the cost of sealing, by run size")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.repeats = 20_000, 2
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.run_sizes:
        run_sizes(args)
        return 0
    load_start = os.getloadavg()
    rows: dict[str, list[dict[str, float]]] = {"plain": [], "encrypted": []}
    with tempfile.TemporaryDirectory(prefix="bench-encryption-", dir=args.dir) as scratch:
        keys = key_file(scratch)
        for repeat in range(args.repeats):
            order = ("plain", "encrypted") if repeat % 2 == 0 else ("encrypted", "plain")
            for name in order:
                root = os.path.join(scratch, f"{name}-{repeat}")
                rows[name].append(run_variant(root, keys if name == "encrypted" else None, args))
    load_end = os.getloadavg()
    print(f"{args.events} events of {args.event_size} B, put_many batches of {args.batch_size}, fsync per commit, "
          f"{args.repeats} repeats; fs {throughput.filesystem_type(args.dir or tempfile.gettempdir())}")
    print(f"load average (1/5/15 min): start {' '.join(f'{x:.2f}' for x in load_start)}, "
          f"end {' '.join(f'{x:.2f}' for x in load_end)}")
    ok = True
    for op in ("put", "take"):
        plain = [r[op] for r in rows["plain"]]
        enc = [r[op] for r in rows["encrypted"]]
        ratios = [e / p for e, p in zip(enc, plain, strict=True)]
        ratio = statistics.median(ratios)
        ok = ok and ratio >= TARGET
        cpu_plain = statistics.median(r[f"{op}_cpu_us"] for r in rows["plain"])
        cpu_enc = statistics.median(r[f"{op}_cpu_us"] for r in rows["encrypted"])
        print(f"{op:5} plain {throughput.fmt_rate(statistics.median(plain))} ev/s   "
              f"encrypted {throughput.fmt_rate(statistics.median(enc))} ev/s   "
              f"ratio {ratio:.2f}x (per repeat {', '.join(f'{r:.2f}' for r in ratios)})   "
              f"target >= {TARGET}x: {'met' if ratio >= TARGET else 'NOT met'}")
        print(f"      CPU time per event: plain {cpu_plain:.2f} us, encrypted {cpu_enc:.2f} us "
              f"(CPU-time ratio {cpu_plain / cpu_enc:.2f}x)")
    commits = rows["encrypted"][0]
    print(f"encrypted run: put fsyncs/commits {commits['put_fsyncs']}/{commits['put_commits']}, "
          f"take fsyncs/commits {commits['take_fsyncs']}/{commits['take_commits']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
