"""The driver of bench/table_writers.py: the connector jars (Maven), the input rows, the phases,
the report. Every writer and reader is a child process (:mod:`table_writers_sides`)."""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

CONNECTORS = [("io.delta", "delta-spark_4.1_2.13", "4.4.0"), ("io.delta", "delta-storage", "4.4.0"),
              ("org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", "1.12.0"),
              ("org.xerial", "sqlite-jdbc", "3.50.3.0"), ("org.apache.hadoop", "hadoop-aws", "3.4.2")]
FORMATS = ("delta", "iceberg")
SIDES = ("arrow", "spark")
# (writer, format) measured for throughput: the two contenders per format, and two baselines of plain
# Parquet written by Spark: 4.1 (the connectors' Spark) and 4.3 (the project's landing writer)
WRITERS = [("arrow", "delta"), ("spark", "delta"), ("arrow", "iceberg"), ("spark", "iceberg"),
           ("spark", "parquet"), ("spark43", "parquet")]


def connector_jars() -> list[str]:
    """The connector jars, each resolved by Maven (offline first) without its dependencies (Spark
    4.1 brings Hadoop, Parquet, Jackson and Scala), plus the AWS SDK bundle of the S3 jars."""
    repo = Path(os.environ.get("MAVEN_REPO", Path.home() / ".m2" / "repository"))
    jars = []
    for group, artifact, version in CONNECTORS:
        jar = repo / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar"
        if not jar.exists():
            for offline in (["-o"], []):
                done = subprocess.run(["mvn", "-B", "-q", *offline,
                                       "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:get",
                                       f"-Dartifact={group}:{artifact}:{version}", "-Dtransitive=false"],
                                      capture_output=True, text=True, check=False)
                if done.returncode == 0:
                    break
        assert jar.exists(), f"Maven could not fetch {group}:{artifact}:{version}"
        jars.append(str(jar))
    from ingest_toolkit.hdfs import classpath, fetch

    fetch(("s3",))
    jars += [j for j in classpath("s3") if "/software/amazon/awssdk/bundle/" in j]
    return jars


def _moto(stack: ExitStack) -> dict[str, str]:
    """moto's S3 server in a process of its own, a bucket, and the S3A settings for it."""
    import boto3

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stack.callback(server.terminate)
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="k",
                          aws_secret_access_key="k", region_name="us-east-1")
    for _ in range(150):
        try:
            client.create_bucket(Bucket="bench")
            break
        except Exception:
            time.sleep(0.2)
    prefix = "spark.hadoop.fs.s3a."
    return {f"{prefix}endpoint": f"127.0.0.1:{port}", f"{prefix}connection.ssl.enabled": "false",
            f"{prefix}path.style.access": "true", f"{prefix}access.key": "k", f"{prefix}secret.key": "k",
            f"{prefix}endpoint.region": "us-east-1",
            f"{prefix}aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}


def run(args: argparse.Namespace, script: Path, measure: Callable[..., dict[str, Any]],
        make_input: Callable[[Path, int, int], Path]) -> dict[str, Any]:
    import json

    jars = ",".join(connector_jars())
    report: dict[str, Any] = {"args": vars(args), "throughput": [], "storage": {}, "readers": {}}
    with tempfile.TemporaryDirectory(prefix="bench-writers-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        rows = make_input(work, args.events, args.event_size)
        small = make_input(work / "small", 20_000, args.event_size) if not args.no_remote else rows

        def child(side: str, kind: str, table_format: str, root: str, catalog: Path, source: Path, batch: int,
                  s3: dict[str, str] | None = None) -> dict[str, Any]:
            python = args.spark41 if side in ("spark", "read41") else sys.executable  # spark43: the project's
            return measure([python, str(script), "--child", kind, "--format", table_format, "--input", str(source),
                            "--root", root, "--catalog", str(catalog), "--jars", jars, "--batch", str(batch),
                            "--s3", json.dumps(s3 or {})])

        for i in range(args.repeats):  # throughput and memory, local disk, alternating order
            for side, table_format in WRITERS if i % 2 == 0 else WRITERS[::-1]:
                tag = f"{side}-{table_format}-{i}"
                result = child(side, side, table_format, (work / tag).as_uri(), work / f"{tag}.db", rows, args.batch)
                report["throughput"].append({"side": side, "format": table_format, "repeat": i + 1, **result})
                print(f"repeat {i + 1} {side:<5} {table_format:<7} {result.get('events_per_s', 0):>9,} events/s "
                      f"peak RSS {result['peak_rss_mb']:,} MB {result.get('error', '')}", flush=True)
        if not args.no_remote:
            report["storage"] = _storage(args, work, stack, small, child)
        report["readers"] = _readers(work, child, rows, args.batch)
    _print(report)
    return report


def _storage(args: argparse.Namespace, work: Path, stack: ExitStack, small: Path,
             child: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    from ingest_toolkit.hdfs import MiniHdfs, fetch

    fetch(("hdfs",))
    hdfs = stack.enter_context(MiniHdfs.start(work / "hdfs", conf={"dfs.replication": "1"}))
    s3 = _moto(stack)
    roots = {"hdfs": (f"{hdfs.uri}/w", {}), "s3": ("s3a://bench/w", s3)}
    found = {}
    for where, (root, conf) in roots.items():
        for table_format in FORMATS:
            for side in SIDES:
                tag = f"{where}-{side}-{table_format}"
                result = child(side, "arrow" if side == "arrow" else "spark", table_format, f"{root}/{tag}",
                               work / f"{tag}.db", small, 10_000, conf)
                found[tag] = result
                print(f"{where:<4} {side:<5} {table_format:<7} "
                      f"{'ok ' + format(result['events_per_s'], ',') + ' events/s' if 'rows' in result else 'FAILED'}"
                      f" {result.get('error', '')}", flush=True)
    return found


def _readers(work: Path, child: Callable[..., dict[str, Any]], rows: Path, batch: int) -> dict[str, Any]:
    """Arrow-written tables (compacted, so replaced files stay on disk) read by Spark 4.3 without
    connectors and Spark 4.1 with them; Spark-written tables read by delta-rs and PyIceberg."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ingest_toolkit.land import LandingConfig
    from ingest_toolkit.land.tables.maintain import maintain_table

    found = {}
    for table_format in FORMATS:
        tag = f"arrow-{table_format}-0"
        config = LandingConfig.build(root=(work / tag).as_uri(), format=table_format,
                                     iceberg_catalog=f"sqlite:///{work / f'{tag}.db'}")
        maintain_table(config, "events", retain=False)
        found[f"spark43 on arrow {table_format}"] = child("arrow", "read43", table_format, config.root,
                                                          work / f"{tag}.db", rows, batch)
        found[f"spark41 on arrow {table_format}"] = child("read41", "read41", table_format, config.root,
                                                          work / f"{tag}.db", rows, batch)
        spark_tag = f"spark-{table_format}-0"
        found[f"arrow on spark {table_format}"] = child("arrow", "read_arrow", table_format,
                                                        (work / spark_tag).as_uri(), work / f"{spark_tag}.db", rows,
                                                        batch)
    for name, result in found.items():
        print(f"{name}: {result}", flush=True)
    return found


def _print(report: dict[str, Any]) -> None:
    print("\nwriter           format   events/s (median)   peak RSS MB (median)")
    for side in ("arrow", "spark", "spark43"):
        for table_format in ("delta", "iceberg", "parquet"):
            mine = [r for r in report["throughput"] if r["side"] == side and r["format"] == table_format
                    and "events_per_s" in r]
            if mine:
                print(f"{side:<16} {table_format:<8} {statistics.median(r['events_per_s'] for r in mine):>17,.0f}"
                      f" {statistics.median(r['peak_rss_mb'] for r in mine):>22,.0f}")
    for table_format in FORMATS:
        rates = {side: [r["events_per_s"] for r in report["throughput"] if r["side"] == side
                        and r["format"] == table_format and "events_per_s" in r] for side in SIDES}
        if all(rates.values()):
            ratio = statistics.median(rates["arrow"]) / statistics.median(rates["spark"])
            print(f"{table_format}: Arrow-native / Spark connector = {ratio:.2f}x")
