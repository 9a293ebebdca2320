"""Landing throughput into HDFS beside ``file://``, in one run on one machine.

Run from the repository root with the project's virtualenv (the Hadoop jars fetched once with
``ingest-toolkit hdfs fetch``)::

    python bench/landing_hdfs.py              # 500k events of 256 B, batches of 250k, 2 repeats
    python bench/landing_hdfs.py --quick      # 100k events, one repeat

It starts a local HDFS (``MiniHdfs``: one NameNode and one DataNode in a JVM of their own,
``dfs.replication=1``, ``dfs.datanode.synconclose=true``), then, per repeat and in alternating
order, fills a fresh durable channel and lands it with ``land_until_empty`` (the same Spark
session, ``local[2]``) into a local directory and into ``hdfs://127.0.0.1:<port>/bench``. Both
roots pay the full protocol: staging, footer check, manifest commit, moves; ``file://`` also
fsyncs every file and directory, HDFS closes every block on the DataNode's disk
(synconclose). Figures: events/s end to end (median over repeats) and HDFS / file.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from landing import _end_to_end, _fill  # noqa: E402

from ingest_toolkit.hdfs import MiniHdfs, fetch  # noqa: E402
from ingest_toolkit.land import LandingConfig, SparkSettings, spark_session  # noqa: E402


def _once(work: Path, root: str, args: argparse.Namespace, spark: Any, tag: str) -> dict[str, Any]:
    ch, _ = _fill(work / f"ch-{tag}", args.events, args.event_size, True, args.batch)
    try:
        config = LandingConfig.build(root=root, max_events=args.batch, spark=SparkSettings(master=args.master))
        return _end_to_end(ch, config, spark, overlap=True, take="arrow")
    finally:
        ch.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=250_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--quick", action="store_true", help="100k events, one repeat")
    parser.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.events, args.batch, args.repeats = 100_000, 50_000, 1
    fetch(("hdfs",))
    with tempfile.TemporaryDirectory(prefix="bench-hdfs-") as tmp, \
            MiniHdfs.start(Path(tmp) / "hdfs", conf={"dfs.replication": "1"}) as hdfs:
        work = Path(tmp)
        spark = spark_session(SparkSettings(master=args.master, conf={"spark.driver.memory": "3g"}))
        _once(work, (work / "warm").as_uri(), argparse.Namespace(**{**vars(args), "events": 20_000}), spark, "warm")
        rows: dict[str, list[dict[str, Any]]] = {"file": [], "hdfs": []}
        for i in range(args.repeats):
            order = ("file", "hdfs") if i % 2 == 0 else ("hdfs", "file")
            for kind in order:
                root = (work / f"landing-{i}").as_uri() if kind == "file" else f"{hdfs.uri}/bench/{i}"
                rows[kind].append(_once(work, root, args, spark, f"{kind}-{i}"))
                print(f"repeat {i + 1} {kind}: {rows[kind][-1]['events_per_s']:,.0f} events/s", flush=True)
        spark.stop()
    _report(args, rows)


def _report(args: argparse.Namespace, rows: dict[str, list[dict[str, Any]]]) -> None:
    median = {k: statistics.median(r["events_per_s"] for r in v) for k, v in rows.items()}
    print(f"\n{args.events:,} events of {args.event_size} B, batches of {args.batch:,}, {args.master}, "
          f"{args.repeats} repeat(s), {platform.machine()} {platform.python_version()}")
    print(f"file://  {median['file']:>12,.0f} events/s")
    print(f"hdfs://  {median['hdfs']:>12,.0f} events/s   hdfs/file = {median['hdfs'] / median['file']:.2f}x")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "rows": rows, "median": median,
                                                   "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                                  indent=1))


if __name__ == "__main__":
    main()
