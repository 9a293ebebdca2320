"""End-to-end landing benchmark: file channel -> Spark -> partitioned Parquet, exactly once.

Run from the repository root with the project's virtualenv::

    python bench/landing.py                 # 1M events of 256 B, local[2], about 2 minutes here
    python bench/landing.py --quick         # 100k events, smoke run
    python bench/landing.py --help          # sizes, batch, repeats, --no-headers, --take, --dir, --json
    python bench/landing.py --take alternate   # A/B: Arrow take and list take, alternately

Per repeat (figures are medians over ``--repeats``):

* **end to end**: ``--events`` events of ``--event-size`` bytes are put into a fresh durable
  channel (not timed), then ``land_once`` runs until the channel is empty, ``--batch`` events per
  take transaction: take, Arrow columns, recognition of redelivered seqs, Spark write to staging,
  manifest, moves into the partitions, take commit. Batches run through ``land_until_empty``: the
  next batch's take overlaps the current Spark write (``--sequential``: one after another).
* **baseline**: Spark writing the same rows (the landed schema, built beforehand from the same
  events) from one in-memory Arrow table, ``createDataFrame`` + partitioned Parquet write with the
  same options: the cost of Spark alone, with no channel and no protocol.

``--take`` selects how the in-process source takes: ``arrow`` (``tx.take_arrow``, what the landing
does) or ``columns`` (``tx.take_columns``, lists: the take before the vectorized one, and what a
remote take hands out); ``alternate`` runs both in every repeat, in alternating order, so that
both see the same conditions on a shared machine.

The ratio end-to-end/baseline is what the protocol and the channel cost. Targets: >= 0.5x the
baseline and >= 100k events/s end to end. A warm-up landing and write run first, so that JVM
start and code generation are in neither figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ingest_toolkit.channel import Event, FileChannel  # noqa: E402
from ingest_toolkit.land import (  # noqa: E402
    InProcessSource,
    LandingConfig,
    SparkSettings,
    build_table,
    land_until_empty,
)
from ingest_toolkit.land.source import InProcessTake  # noqa: E402
from ingest_toolkit.land.spark import write_parquet  # noqa: E402
from ingest_toolkit.land.storage import LocalStorage  # noqa: E402

BASE_MILLIS = 1_763_798_400_000


def _events(n: int, size: int, headers: bool, start: int = 0) -> list[Event]:
    """Distinct random bodies (so Parquet cannot dictionary-encode them away); the timestamp header
    spreads the events over two hours, as the timestamp interceptor would stamp them."""
    blob = os.urandom(size * n)
    bodies = [blob[i * size:(i + 1) * size] for i in range(n)]
    if not headers:
        return [Event(body, {}) for body in bodies]
    return [Event(body, {"timestamp": str(BASE_MILLIS + (i % 7200) * 1000)}) for i, body in enumerate(bodies, start)]


def _fill(directory: Path, events: int, size: int, headers: bool, batch: int) -> tuple[FileChannel, float]:
    shutil.rmtree(directory, ignore_errors=True)
    ch = FileChannel(checkpoint_dir=str(directory / "cp"), data_dirs=[str(directory / "data")],
                     capacity=max(events, batch) + 1000, transaction_capacity=batch, min_free_bytes=0,
                     checkpoint_interval=0.0, durability="fsync")
    started = time.perf_counter()
    for at in range(0, events, 10_000):
        with ch.transaction() as tx:
            tx.put_many(_events(min(10_000, events - at), size, headers, at))
    return ch, time.perf_counter() - started


class _ListSource(InProcessSource):
    """Takes with ``tx.take_columns`` (lists), for A/B runs against the Arrow take."""

    def open_take(self, max_events: int) -> InProcessTake:
        tx = self.channel.transaction()
        try:
            columns = tx.take_columns(min(max_events, self.channel.config.transaction_capacity))
        except BaseException:
            tx.rollback()
            raise
        return InProcessTake(self.channel.channel_id, tx, columns)  # type: ignore[arg-type]


_SYNC_SECONDS = [0.0]
_untimed_sync = LocalStorage.sync


def _timed_sync(self: LocalStorage, files: list[str], *, contents: bool = True) -> None:
    """LocalStorage.sync, timed: what making a batch durable (fsync of its files and directories
    before the take commit) costs; the benchmark's only change to the landing is this timer."""
    started = time.perf_counter()
    try:
        _untimed_sync(self, files, contents=contents)
    finally:
        _SYNC_SECONDS[0] += time.perf_counter() - started


LocalStorage.sync = _timed_sync  # type: ignore[method-assign]


def _end_to_end(ch: FileChannel, config: LandingConfig, spark: Any, overlap: bool, take: str) -> dict[str, Any]:
    source = InProcessSource(ch, "events") if take == "arrow" else _ListSource(ch, "events")
    synced_before = _SYNC_SECONDS[0]
    started = time.perf_counter()
    runs = land_until_empty(source, config, spark, overlap=overlap)
    seconds = time.perf_counter() - started
    landed = sum(r.events for r in runs)
    return {"events": landed, "seconds": seconds, "events_per_s": landed / seconds, "runs": len(runs),
            "files": sum(r.files for r in runs), "bytes": sum(r.bytes for r in runs),
            "run_seconds": [r.duration_s for r in runs], "sync_seconds": _SYNC_SECONDS[0] - synced_before}


def _baseline(events: int, size: int, headers: bool, config: LandingConfig, spark: Any, out: str) -> dict[str, Any]:
    taken = _events(events, size, headers)
    for seq, event in enumerate(taken, 1_000_000):
        event.seq = seq
    table = build_table(taken, channel_id=bytes(16), batch_id="baseline", ingest_time_us=time.time_ns() // 1000)
    del taken
    started = time.perf_counter()
    write_parquet(spark, table, out, config)
    seconds = time.perf_counter() - started
    return {"events": table.num_rows, "seconds": seconds, "events_per_s": table.num_rows / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=250_000, help="events per take transaction")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--sequential", action="store_true", help="one batch at a time (no overlap)")
    parser.add_argument("--no-headers", action="store_true", help="events without a timestamp header")
    parser.add_argument("--take", choices=["arrow", "columns", "alternate"], default="arrow",
                        help="how the source takes (alternate: both in every repeat)")
    parser.add_argument("--quick", action="store_true", help="100k events, batches of 50k, one repeat")
    parser.add_argument("--dir", help="parent of the temporary working directory")
    parser.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.events, args.batch, args.repeats = 100_000, 50_000, 1
    headers = not args.no_headers

    from ingest_toolkit.land import spark_session

    work = Path(tempfile.mkdtemp(prefix="land-bench-", dir=args.dir))
    spark = spark_session(SparkSettings(master=args.master, conf={"spark.driver.memory": "4g"}))
    try:
        config = LandingConfig.build(root=str(work / "landing"), max_events=args.batch)
        takes = ["arrow", "columns"] if args.take == "alternate" else [args.take]
        for i in range(2):  # warm-up: JVM start, class loading, JIT, code generation
            for take in takes:
                ch, _ = _fill(work / "warm", args.batch, args.event_size, headers, args.batch)
                _end_to_end(ch, config, spark, not args.sequential, take)
                ch.close()
            _baseline(args.batch, args.event_size, headers, config, spark, (work / f"warm-base{i}").as_uri())
        rows: list[dict[str, Any]] = []
        for i in range(args.repeats):
            for take in takes if i % 2 == 0 else takes[::-1]:
                rows.append(_repeat(args, work / f"r{i}-{take}", config, spark, take))
                e2e, base = rows[-1]["end_to_end"], rows[-1]["baseline"]
                print(f"repeat {i + 1} ({take} take): end to end {e2e['events_per_s']:,.0f} events/s "
                      f"({e2e['seconds']:.2f} s, {e2e['runs']} runs, {e2e['files']} files, "
                      f"{e2e['bytes'] / 1e6:,.1f} MB, fsync {e2e['sync_seconds']:.2f} s); "
                      f"baseline {base['events_per_s']:,.0f} events/s "
                      f"({base['seconds']:.2f} s); ratio {rows[-1]['ratio']:.2f}; load {os.getloadavg()[0]:.1f}",
                      flush=True)
        for take in takes:
            _report(args, [r for r in rows if r["take"] == take], take)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _repeat(args: argparse.Namespace, work: Path, config: LandingConfig, spark: Any, take: str) -> dict[str, Any]:
    headers = not args.no_headers
    ch, put_s = _fill(work / "ch", args.events, args.event_size, headers, args.batch)
    e2e = _end_to_end(ch, config, spark, not args.sequential, take)
    ch.close()
    base = _baseline(args.events, args.event_size, headers, config, spark, (work / "base").as_uri())
    shutil.rmtree(work, ignore_errors=True)
    return {"take": take, "put_seconds": put_s, "end_to_end": e2e, "baseline": base,
            "ratio": e2e["events_per_s"] / base["events_per_s"], "load_average": os.getloadavg()}


def _report(args: argparse.Namespace, rows: list[dict[str, Any]], take: str) -> None:
    e2e = statistics.median(r["end_to_end"]["events_per_s"] for r in rows)
    base = statistics.median(r["baseline"]["events_per_s"] for r in rows)
    ratio = statistics.median(r["ratio"] for r in rows)
    kind = "no headers" if args.no_headers else "timestamp header"
    print(f"\n{args.events:,} events of {args.event_size} B ({kind}), {take} take, batches of {args.batch:,}, "
          f"{args.master}, Python {platform.python_version()}, {os.cpu_count()} CPUs")
    print(f"end to end (channel -> Parquet, exactly once): {e2e:>12,.0f} events/s   target >= 100,000: "
          f"{'met' if e2e >= 100_000 else 'NOT met'}")
    print(f"baseline (Spark from an Arrow table):         {base:>12,.0f} events/s")
    print(f"ratio end to end / baseline:                  {ratio:>12.2f}     target >= 0.5: "
          f"{'met' if ratio >= 0.5 else 'NOT met'}")
    if args.json_out:
        figures = {"args": vars(args), "take": take, "repeats": rows, "end_to_end_events_per_s": e2e,
                   "baseline_events_per_s": base, "ratio": ratio}
        Path(args.json_out).with_suffix(f".{take}.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
