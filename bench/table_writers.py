"""Which writer for Delta and Iceberg: Spark with the connectors against the Arrow-native writers.

The connectors lag PySpark (delta-spark's Spark 4.1 build, the Iceberg Spark runtime for 4.1),
while the project resolves PySpark 4.3; the Arrow-native writers (delta-rs, PyIceberg) need no JVM.
This compares them in one run, on the same rows. The Spark side runs in a separate virtualenv with
PySpark 4.1 (outside the repository; nothing of it is installed into the project)::

    python3 -m venv var/spark41 && var/spark41/bin/pip install 'pyspark==4.1.4' 'delta-spark==4.4.0' \\
        'pyarrow==26.0.1'
    python bench/table_writers.py --spark41 var/spark41/bin/python          # 1M events of 256 B
    python bench/table_writers.py --spark41 var/spark41/bin/python --quick  # 100k events

The connector jars come from Maven Central through the machine's ``mvn`` (as
``ingest_toolkit.hdfs.jars`` fetches Hadoop's), never from Spark at run time:
``io.delta:delta-spark_4.1_2.13:4.4.0`` + ``delta-storage``, ``org.apache.iceberg:
iceberg-spark-runtime-4.1_2.13:1.12.0``, ``org.xerial:sqlite-jdbc`` (Spark's JDBC catalog on the
same SQLite file PyIceberg uses) and, for ``s3a://``, ``org.apache.hadoop:hadoop-aws:3.4.2`` (the
Hadoop of PySpark 4.1) with the AWS SDK bundle ``ingest-toolkit hdfs fetch --s3`` cached.

Every writer runs in a child process (its peak RSS, JVM included, is sampled from outside):

1. **throughput and memory**, local disk: ``--events`` rows (built once with the landing's
   ``build_table`` and stored as Parquet, read by each child before its clock starts) committed in
   batches of ``--batch``, each with its exactly-once marker: Arrow-native = the table layer's
   ``commit`` (delta-rs with the app transaction, PyIceberg with the batch property in the same
   commit; each preceded by the redelivery check); Spark = ``df.write.format("delta")`` with
   ``txnAppId``/``txnVersion``, ``df.writeTo(...).append()`` with a snapshot property after reading
   the snapshot summaries (Spark cannot set the batch property in the append's commit); two
   baselines: Spark 4.1's plain partitioned Parquet write (the connectors' own Spark) and the
   project's Spark 4.3 Parquet write (``write_parquet``, the plain landing's write without its
   manifest). Every Spark session: ``local[2]``, 3 GB driver, 8 shuffle partitions, Delta's
   snapshot rebuilt with 2 tasks instead of 50;
2. **where it works**: one small batch per writer and format to ``hdfs://`` (a local HDFS started
   here) and ``s3a://`` (moto in its own process);
3. **what readers get**: the Arrow-written tables (after a compaction, so replaced files are on
   disk) read by Spark 4.3 without connectors (a directory scan; the table layer's file list) and
   by Spark 4.1 with them (``format("delta")``, the Iceberg JDBC catalog; time travel), and the
   Spark-written tables read by delta-rs and PyIceberg.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
BATCH_APP = "ingest-toolkit/" + "ab" * 16


def child_main(argv: list[str]) -> None:
    """A writer or reader in this process (``--child``); prints one JSON line."""
    parser = argparse.ArgumentParser()
    for name in ("--child", "--format", "--input", "--root", "--catalog", "--jars", "--s3"):
        parser.add_argument(name)
    parser.add_argument("--batch", type=int)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    import table_writers_sides as sides

    s3 = json.loads(args.s3) if args.s3 else {}
    run = {"arrow": sides.arrow_write, "spark": sides.spark_write, "spark43": sides.spark43_write,
           "read43": sides.spark43_read,
           "read41": sides.spark41_read, "read_arrow": sides.arrow_read}[args.child]
    print("RESULT " + json.dumps(run(args, s3)), flush=True)


def _measure(command: list[str], env: dict[str, str] | None = None, timeout: float = 1800) -> dict[str, Any]:
    """Run a child, sampling the RSS of it and its descendants (the JVM) every 50 ms."""
    import psutil

    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, **(env or {})})
    peak = 0
    proc = psutil.Process(child.pid)
    while child.poll() is None and time.perf_counter() - started < timeout:
        try:
            peak = max(peak, sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]))
        except psutil.Error:
            pass
        time.sleep(0.05)
    out, err = child.communicate(timeout=60)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    result: dict[str, Any] = json.loads(lines[-1][7:]) if lines else {"error": _last_line(err)}
    result.update(peak_rss_mb=round(peak / 2**20), wall_s=round(time.perf_counter() - started, 2),
                  returncode=child.returncode)
    return result


def _last_line(err: str) -> str:
    lines = [line for line in err.splitlines() if "Error" in line or "Exception" in line]
    return (lines[-1] if lines else err.strip().splitlines()[-1] if err.strip() else "no output")[:300]


def _input(work: Path, events: int, size: int) -> Path:
    """The rows every writer commits, in the landed schema (bench/landing.py's events)."""
    import pyarrow.parquet as pq

    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE.parents[1]))
    from landing import _events

    from ingest_toolkit.land import build_table

    taken = _events(events, size, True)
    for seq, event in enumerate(taken, 1):
        event.seq = seq
    table = build_table(taken, channel_id=bytes.fromhex("ab" * 16), batch_id="input",
                        ingest_time_us=time.time_ns() // 1000)
    work.mkdir(parents=True, exist_ok=True)
    path = work / "input.parquet"
    pq.write_table(table, path)
    return path


def main() -> None:
    if "--child" in sys.argv:
        child_main(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spark41", required=True, help="python of a virtualenv with pyspark 4.1 + delta-spark")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=250_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="100k events, batches of 50k, one repeat")
    parser.add_argument("--no-remote", action="store_true", help="skip HDFS and S3")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    if args.quick:
        args.events, args.batch, args.repeats = 100_000, 50_000, 1
    sys.path.insert(0, str(HERE.parent))
    from table_writers_run import run

    report = run(args, HERE, _measure, _input)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
