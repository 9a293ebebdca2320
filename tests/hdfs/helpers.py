"""Reading and changing what a test landed on HDFS, through the Spark session's Hadoop client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pyarrow as pa

from ingest_toolkit.land.storage import HadoopStorage

from ..land.helpers import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]


class HdfsFiles:
    """Files under HDFS URIs, through the test session's JVM."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def store(self, root: str) -> HadoopStorage:
        return HadoopStorage(root, self.spark)

    def landed(self, root: str, channel: str = "events") -> pa.Table:
        """The landed table read back through Spark from HDFS (what a reader of the table sees)."""
        if not self.store(root).exists(channel):
            return pa.table({"seq": pa.array([], pa.int64())})
        frame = self.spark.read.parquet(f"{root}/{channel}")
        return frame.select("seq", "event_id", "body", "headers", "event_date", "event_hour").toArrow()

    def staging(self, root: str, channel: str = "events") -> list[str]:
        return self.store(root).list_dir(f"{channel}/_staging")

    def manifests(self, root: str, channel: str = "events") -> list[dict[str, Any]]:
        store = self.store(root)
        names = [n for n in store.list_dir(f"{channel}/_manifests") if n.endswith(".json")]
        return [json.loads(store.read_bytes(f"{channel}/_manifests/{n}")) for n in sorted(names)]


def write_toml(path: Path, tables: dict[str, dict[str, Any]]) -> Path:
    """A small TOML file (string, number, bool and list values; quoted keys)."""
    lines = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_land(args: list[str], env: dict[str, str] | None = None,
             timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``ingest-toolkit land ...`` in a process of its own (its own Spark JVM, tagged so it can be
    waited for after a SIGKILL), from the repository root."""
    marker = f"land-hdfs-{uuid.uuid4().hex[:12]}"
    environment = {**os.environ, "INGEST_SPARK__APP_NAME": marker, **(env or {})}
    done = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "land", *args], env=environment, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    wait_until(lambda: not _processes_with(marker), 60, f"the landing's JVM ({marker}) to exit")
    return done


def _processes_with(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc.info["pid"])
        except psutil.Error:
            continue
    return found
