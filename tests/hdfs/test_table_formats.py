"""Delta Lake and Iceberg tables on a real HDFS and on an S3 API (issue 29, item 3): the landing
process is SIGKILLed right after its table commit (before the take commits) and after writing
data files, then lands again; every event is in the table exactly once, read back by the format's
own library over the same storage (delta-rs's and hdfs-native's HDFS clients, no JVM)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.hdfs import MiniHdfs
from ingest_toolkit.land import InProcessSource, LandingConfig, SparkSettings, land_once

from ..land.helpers import assert_landed_exactly_once, channel_settings, make_events, put_events
from ..land.tables import FORMATS, committed_batches, read_table, whole_batches
from .helpers import write_toml
from .test_s3a import BUCKET, KEY, s3a_conf

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """moto's S3 server in a process of its own: delta-rs holds the GIL while it waits on a request,
    so a server thread of this process could never answer it."""
    import boto3

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=KEY,
                          region_name="us-east-1")
    deadline = time.monotonic() + 30
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:
            if time.monotonic() > deadline:
                server.kill()
                raise
            time.sleep(0.2)
    try:
        yield endpoint
    finally:
        server.terminate()
        server.wait(30)


def _config(tmp_path: Path, root: str, table_format: str, conf: dict[str, str]) -> LandingConfig:
    return LandingConfig.build(root=root, format=table_format, max_events=200,
                               iceberg_catalog=f"sqlite:///{tmp_path / 'catalog.db'}",
                               spark=SparkSettings(conf=conf))


def _land_killed_at(tmp_path: Path, config: LandingConfig, settings: dict[str, Any], phase: str) -> None:
    write_toml(tmp_path / "channel.toml", {"channel": settings})
    write_toml(tmp_path / "landing.toml", {
        "landing": {"root": config.root, "max_events": 200, "format": config.format,
                    "iceberg_catalog": config.iceberg_catalog},
        "spark": {"master": "local[1]"}, "spark.conf": dict(config.spark.conf)})
    done = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "land", "--conf", str(tmp_path / "landing.toml"),
                           "--channel", "events", "--channel-conf", str(tmp_path / "channel.toml")],
                          env={**os.environ, "INGEST_LAND_FAULT": phase}, capture_output=True, text=True, timeout=180)
    assert done.returncode == -9, done.stderr[-3000:]


def _round_trip(tmp_path: Path, config: LandingConfig) -> None:
    settings = channel_settings(tmp_path)
    with FileChannel(**settings) as channel:
        expected = put_events(channel, make_events(600))
        channel_id = channel.channel_id
    _land_killed_at(tmp_path, config, settings, "after_table_commit")  # landed, take not committed
    assert read_table(config, "events").num_rows == 200
    with FileChannel(**settings) as channel:  # the redelivered batch: recognised, only its take commits
        again = land_once(InProcessSource(channel, "events"), config, None)
        assert (again.redelivered, again.events, len(channel)) == (200, 0, 400)
    _land_killed_at(tmp_path, config, settings, "during_write")  # maybe files, maybe a commit
    with FileChannel(**settings) as channel:
        while len(channel):
            land_once(InProcessSource(channel, "events"), config, None)
    rows = read_table(config, "events")
    assert_landed_exactly_once(rows, expected, channel_id)
    whole_batches(rows, committed_batches(config, "events"))


@pytest.mark.parametrize("table_format", FORMATS)
def test_on_hdfs_exactly_once_through_sigkills(tmp_path: Path, hdfs: MiniHdfs, table_format: str) -> None:
    root = f"{hdfs.uri}/t-{tmp_path.name}/landing"
    _round_trip(tmp_path, _config(tmp_path, root, table_format, {}))


@pytest.mark.parametrize("table_format", FORMATS)
def test_on_s3_exactly_once_through_sigkills(tmp_path: Path, s3_server: str, table_format: str) -> None:
    root = f"s3a://{BUCKET}/t-{tmp_path.name}/landing"
    _round_trip(tmp_path, _config(tmp_path, root, table_format, s3a_conf(s3_server)))


def _maintained(config: LandingConfig, tmp_path: Path) -> None:
    """Compaction then retention with a zero window on the remote table: the small files are
    replaced and every unreferenced file is deleted through the storage's own client (delta-rs's
    vacuum; PyIceberg's FileIO after a listing with hdfs-native or pyarrow's S3 client); the
    channel's batch numbers survive and every event is still there once."""
    from ingest_toolkit.land.tables.maintain import maintain_table
    from ingest_toolkit.land.tables.reading import files_per_partition, open_reader

    settings = channel_settings(tmp_path)
    with FileChannel(**settings) as channel:
        expected = put_events(channel, make_events(600))
        for _ in range(3):
            land_once(InProcessSource(channel, "events"), config, None)
        channel_id = channel.channel_id
    reader = open_reader(config, "events")
    assert max(files_per_partition(reader.files()).values()) == 3
    done = maintain_table(config, "events", retention_hours=0, allow_short_window=True)
    assert done.max_files_per_partition_after == 1 and done.files_deleted >= done.files_compacted > 0
    assert max(files_per_partition(reader.files()).values()) == 1
    assert reader.batch_number(channel_id.hex()) == 3
    assert_landed_exactly_once(read_table(config, "events"), expected, channel_id)


@pytest.mark.parametrize("table_format", FORMATS)
def test_maintenance_on_hdfs(tmp_path: Path, hdfs: MiniHdfs, table_format: str) -> None:
    root = f"{hdfs.uri}/t-{tmp_path.name}/landing"
    _maintained(_config(tmp_path, root, table_format, {}), tmp_path)


@pytest.mark.parametrize("table_format", FORMATS)
def test_maintenance_on_s3(tmp_path: Path, s3_server: str, table_format: str) -> None:
    root = f"s3a://{BUCKET}/t-{tmp_path.name}/landing"
    _maintained(_config(tmp_path, root, table_format, s3a_conf(s3_server)), tmp_path)
