"""Landing into plain Parquet, Delta Lake and Iceberg tables, in one run, local and on HDFS.

Run from the repository root with the project's virtualenv (``[tables]`` and ``[spark]`` extras;
the Hadoop jars fetched once with ``ingest-toolkit hdfs fetch`` for the HDFS part)::

    python bench/table_formats.py                # 1M events of 256 B, batches of 250k, 2 repeats, local + HDFS
    python bench/table_formats.py --quick        # 100k events, batches of 50k, one repeat, local only
    python bench/table_formats.py --no-hdfs      # local only

Per repeat, per root (a local directory, then ``hdfs://127.0.0.1:<port>/bench`` of a local HDFS
started here, as ``bench/landing_hdfs.py`` does) and per format (the order rotates between
repeats, so no format always runs first):

* **landing**: ``--events`` events put into a fresh durable channel (not timed), then
  ``land_until_empty`` (what ``ingest-toolkit land --drain`` runs: batches of ``--batch`` events,
  two in flight) into the format; events/s end to end. Parquet is written by Spark (``local[2]``,
  one session for the whole run, warmed up first); Delta by delta-rs, Iceberg by PyIceberg (SQLite
  catalog), neither starting Spark. Ratios to Parquet are printed (the issue's goal: >= 0.8x).
* **reading one hour back** (the busiest hour of the table): with the format's own library
  (Parquet: ``pyarrow.dataset`` over the hour's directory; Delta: ``scan`` with a partition
  predicate; Iceberg: ``scan`` with a row filter; all columns into Arrow), and with Spark over the
  table's current file list of that hour (``spark.read.parquet(*files).toArrow()``).
* **compaction**: a second table of ``--compaction-events`` landed in batches of
  ``--compaction-batch`` (many small files per partition, as late events and small batches make),
  then ``maintain_table(compact only)``: files per partition before and after, and its duration.
  Plain Parquet has no compaction (it shows its files per partition only).
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from landing import _events  # noqa: E402

from ingest_toolkit.channel import FileChannel  # noqa: E402
from ingest_toolkit.land import InProcessSource, LandingConfig, SparkSettings, land_until_empty  # noqa: E402
from ingest_toolkit.land.tables.maintain import maintain_table  # noqa: E402
from ingest_toolkit.land.tables.reading import TableReader, files_per_partition, open_reader  # noqa: E402

FORMATS = ("parquet", "delta", "iceberg")


def _fill(directory: Path, events: int, size: int, batch: int) -> FileChannel:
    """A fresh durable channel holding ``events`` events (bodies of ``size`` random bytes, the
    timestamp header spreading them over two hours, as bench/landing.py puts them)."""
    shutil.rmtree(directory, ignore_errors=True)
    ch = FileChannel(checkpoint_dir=str(directory / "cp"), data_dirs=[str(directory / "data")],
                     capacity=events + 1000, transaction_capacity=batch, min_free_bytes=0,
                     checkpoint_interval=0.0, durability="fsync")
    step = min(10_000, batch)
    for at in range(0, events, step):
        with ch.transaction() as tx:
            tx.put_many(_events(min(step, events - at), size, True, at))
    return ch


def _config(root: str, table_format: str, batch: int, catalog: Path, master: str) -> LandingConfig:
    return LandingConfig.build(root=root, format=table_format, max_events=batch,
                               iceberg_catalog=f"sqlite:///{catalog}", spark=SparkSettings(master=master))


def _land(work: Path, config: LandingConfig, args: argparse.Namespace, events: int, batch: int, spark: Any,
          tag: str) -> dict[str, Any]:
    ch = _fill(work / f"ch-{tag}", events, args.event_size, batch)
    try:
        started = time.perf_counter()
        runs = land_until_empty(InProcessSource(ch, "events"), config, spark if config.format == "parquet" else None)
        seconds = time.perf_counter() - started
    finally:
        ch.close()
        shutil.rmtree(work / f"ch-{tag}", ignore_errors=True)
    landed = sum(r.events for r in runs)
    assert landed == events, f"{config.format}: landed {landed} of {events}"
    return {"events": landed, "seconds": seconds, "events_per_s": landed / seconds, "batches": len(runs)}


def _read_hour(reader: TableReader, spark: Any) -> dict[str, Any]:
    """The busiest hour read back with the format's library, then with Spark over its files."""
    files = reader.files()
    counts = files_per_partition(files)
    hour = max(counts, key=lambda p: counts[p])
    started = time.perf_counter()
    rows = reader.read(partition=hour).num_rows
    library = time.perf_counter() - started
    uris = [_spark_uri(f.uri) for f in files if f.partition == hour]
    started = time.perf_counter()
    spark_rows = spark.read.parquet(*uris).toArrow().num_rows
    with_spark = time.perf_counter() - started
    assert spark_rows == rows, f"{reader.format}: Spark read {spark_rows} rows of {hour}, the library {rows}"
    return {"hour": hour, "rows": rows, "library_s": library, "spark_s": with_spark,
            "files_per_partition": max(counts.values()), "partitions": len(counts), "files": len(files)}


def _spark_uri(uri: str) -> str:
    return f"file://{uri}" if uri.startswith("/") else uri


def _compaction(work: Path, root: str, table_format: str, args: argparse.Namespace, spark: Any,
                tag: str) -> dict[str, Any]:
    config = _config(f"{root}/compaction-{tag}", table_format, args.compaction_batch, work / f"cat-c-{tag}.db",
                     args.master)
    _land(work, config, args, args.compaction_events, args.compaction_batch, spark, f"c-{tag}")
    reader = open_reader(config, "events", spark)
    before = max(files_per_partition(reader.files()).values())
    if table_format == "parquet":
        return {"before": before, "after": None, "seconds": None}
    started = time.perf_counter()
    done = maintain_table(config, "events", retain=False)
    return {"before": before, "after": done.max_files_per_partition_after, "seconds": time.perf_counter() - started,
            "rows_rewritten": done.rows_rewritten}


def _once(work: Path, root: str, table_format: str, args: argparse.Namespace, spark: Any, tag: str) -> dict[str, Any]:
    config = _config(f"{root}/{tag}", table_format, args.batch, work / f"cat-{tag}.db", args.master)
    row = {"format": table_format, "landing": _land(work, config, args, args.events, args.batch, spark, tag)}
    row["read"] = _read_hour(open_reader(config, "events", spark), spark)
    row["compaction"] = _compaction(work, root, table_format, args, spark, tag)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=250_000)
    parser.add_argument("--compaction-events", type=int, default=200_000)
    parser.add_argument("--compaction-batch", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-hdfs", action="store_true", help="local root only")
    parser.add_argument("--quick", action="store_true", help="100k events, batches of 50k, one repeat, local only")
    parser.add_argument("--dir", help="parent of the temporary working directory")
    parser.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.events, args.batch, args.repeats, args.no_hdfs = 100_000, 50_000, 1, True
        args.compaction_events, args.compaction_batch = 20_000, 1_000
    rows = _run(args)
    _report(args, rows)


def _run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from contextlib import ExitStack

    from ingest_toolkit.land import spark_session

    with tempfile.TemporaryDirectory(prefix="bench-formats-", dir=args.dir) as tmp, ExitStack() as stack:
        work = Path(tmp)
        roots = {"file": (work / "landing").as_uri()}
        if not args.no_hdfs:
            from ingest_toolkit.hdfs import MiniHdfs, fetch

            fetch(("hdfs",))
            hdfs = stack.enter_context(MiniHdfs.start(work / "hdfs", conf={"dfs.replication": "1"}))
            roots["hdfs"] = f"{hdfs.uri}/bench"
        spark = spark_session(SparkSettings(master=args.master, conf={"spark.driver.memory": "3g"}))
        stack.callback(spark.stop)
        warm = argparse.Namespace(**{**vars(args), "events": 20_000, "batch": 10_000, "compaction_events": 2_000,
                                     "compaction_batch": 1_000})
        for table_format in FORMATS:  # JVM start, JIT, imports, catalog creation: in no figure
            _once(work, roots["file"], table_format, warm, spark, f"warm-{table_format}")
        rows = []
        for i in range(args.repeats):
            order = FORMATS[i % 3:] + FORMATS[:i % 3]
            for where, root in roots.items():
                for table_format in order:
                    row = {"repeat": i + 1, "root": where, **_once(work, root, table_format, args, spark,
                                                                   f"r{i}-{where}-{table_format}")}
                    row["load_average"] = os.getloadavg()[0]
                    rows.append(row)
                    _print_row(row)
    return rows


def _print_row(row: dict[str, Any]) -> None:
    land, read, comp = row["landing"], row["read"], row["compaction"]
    compacted = f"{comp['before']} -> {comp['after']} files/partition in {comp['seconds']:.2f} s" \
        if comp["after"] is not None else f"{comp['before']} files/partition (no compaction)"
    print(f"repeat {row['repeat']} {row['root']:<4} {row['format']:<8} {land['events_per_s']:>9,.0f} events/s "
          f"({land['seconds']:.2f} s, {land['batches']} batches, {read['files_per_partition']} files/partition); "
          f"hour read back: library {read['library_s']:.2f} s, Spark {read['spark_s']:.2f} s ({read['rows']:,} rows); "
          f"compaction: {compacted}; load {row['load_average']:.1f}", flush=True)


def _median(rows: list[dict[str, Any]], root: str, table_format: str, *path: str) -> float | None:
    values = []
    for row in rows:
        if row["root"] != root or row["format"] != table_format:
            continue
        value: Any = row
        for key in path:
            value = value[key]
        if value is not None:
            values.append(value)
    return statistics.median(values) if values else None


def _report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    print(f"\n{args.events:,} events of {args.event_size} B, batches of {args.batch:,}, {args.master}, "
          f"{args.repeats} repeat(s), {platform.machine()} {platform.python_version()}; medians")
    print(f"{'root':<5}{'format':<9}{'events/s':>10}{'x parquet':>11}{'files/part':>11}{'read lib s':>11}"
          f"{'read Spark s':>13}{'compaction':>22}")
    for root in dict.fromkeys(r["root"] for r in rows):
        base = _median(rows, root, "parquet", "landing", "events_per_s")
        for table_format in FORMATS:
            rate = _median(rows, root, table_format, "landing", "events_per_s")
            if rate is None or base is None:
                continue
            before = _median(rows, root, table_format, "compaction", "before")
            after = _median(rows, root, table_format, "compaction", "after")
            seconds = _median(rows, root, table_format, "compaction", "seconds")
            compaction = (f"{before:.0f} -> {after:.0f} in {seconds:.2f} s"
                          if after is not None and seconds is not None else f"{before:.0f} (none)")
            print(f"{root:<5}{table_format:<9}{rate:>10,.0f}{rate / base:>10.2f}x"
                  f"{_median(rows, root, table_format, 'read', 'files_per_partition'):>11.0f}"
                  f"{_median(rows, root, table_format, 'read', 'library_s'):>11.2f}"
                  f"{_median(rows, root, table_format, 'read', 'spark_s'):>13.2f}{compaction:>22}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "rows": rows,
                                                   "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                                  indent=1))


if __name__ == "__main__":
    main()
