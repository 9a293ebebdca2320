"""Landing into ``s3a://`` against a real S3 HTTP API (moto's server on 127.0.0.1), with Spark's
S3A client (hadoop-aws at PySpark's Hadoop version and the AWS SDK v2 bundle its POM names).

S3 has no atomic rename. What keeps the commit log exclusive there is a conditional write:
HadoopStorage creates a manifest with S3A's ``fs.option.create.conditional.overwrite``
(``If-None-Match: *``), and the store refuses a name that exists. Each landing runs in a process
of its own (``ingest-toolkit land``) whose Spark has the S3A jars; the table is read back with
pyarrow's S3 client.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyarrow import fs as pafs

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.hdfs import classpath, fetch

from ..land.helpers import assert_landed_exactly_once, channel_settings, make_events, put_events
from .helpers import REPO, run_land, write_toml

pytestmark = pytest.mark.integration
BUCKET, KEY = "lake", "testing"


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (an ephemeral port) with one bucket; its endpoint URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    fetch(("s3",))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=KEY,
                 region_name="us-east-1").create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


def s3a_conf(endpoint: str) -> dict[str, str]:
    """What a landing needs for s3a:// against this endpoint: the jars and the S3A settings."""
    jars = os.pathsep.join(classpath("s3"))
    return {"spark.driver.extraClassPath": jars, "spark.executor.extraClassPath": jars,
            "spark.hadoop.fs.s3a.endpoint": endpoint, "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
            "spark.hadoop.fs.s3a.path.style.access": "true", "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": KEY, "spark.hadoop.fs.s3a.secret.key": KEY,
            "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "spark.driver.memory": "768m",
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def _s3fs(endpoint: str) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(access_key=KEY, secret_key=KEY, endpoint_override=endpoint, scheme="http",
                             region="us-east-1")


def _landed(endpoint: str, prefix: str) -> pa.Table:
    partitioning = ds.partitioning(pa.schema([("event_date", pa.string()), ("event_hour", pa.string())]),
                                   flavor="hive")
    return ds.dataset(f"{BUCKET}/{prefix}/events", filesystem=_s3fs(endpoint), format="parquet",
                      partitioning=partitioning).to_table()


def _manifests(endpoint: str, prefix: str) -> list[dict[str, Any]]:
    fs = _s3fs(endpoint)
    infos = fs.get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}/events/_manifests", allow_not_found=True))
    names = sorted(i.path for i in infos if i.path.endswith(".json"))
    return [json.loads(fs.open_input_stream(n).readall()) for n in names]


def _setup(tmp_path: Path, endpoint: str, n: int) -> tuple[list[str], str, Any, bytes]:
    settings = channel_settings(tmp_path)
    ch = FileChannel(**settings)
    expected = put_events(ch, make_events(n))
    channel_id = ch.channel_id
    ch.close()
    prefix = f"t-{tmp_path.name}"
    write_toml(tmp_path / "channel.toml", {"channel": settings})
    write_toml(tmp_path / "landing.toml", {
        "landing": {"root": f"s3a://{BUCKET}/{prefix}", "max_events": 200, "staging_grace_seconds": 0},
        "spark": {"master": "local[2]"}, "spark.conf": s3a_conf(endpoint)})
    args = ["--conf", str(tmp_path / "landing.toml"), "--channel", "events", "--channel-conf",
            str(tmp_path / "channel.toml"), "--json"]
    return args, prefix, expected, channel_id


def test_lands_into_s3a_exactly_once(tmp_path: Path, s3: str) -> None:
    args, prefix, expected, channel_id = _setup(tmp_path, s3, 450)
    done = run_land([*args, "--drain"])
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["totals"]["events"] == 450 and doc["totals"]["backlog_after"] == 0
    assert doc["runs"][0]["manifest_uri"] == f"s3a://{BUCKET}/{prefix}/events/_manifests/000000000001.json"
    assert_landed_exactly_once(_landed(s3, prefix), expected, channel_id)
    assert [m["commit"] for m in _manifests(s3, prefix)] == [1, 2, 3]
    assert sum(m["count"] for m in _manifests(s3, prefix)) == 450


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["after_write", "after_manifest"])
def test_sigkill_around_the_manifest_then_relanding_into_s3a_is_exactly_once(tmp_path: Path, s3: str,
                                                                           phase: str) -> None:
    """``after_write``: the Parquet files are staged, no manifest (the retry writes them again
    under a new batch and deletes the orphans); ``after_manifest``: committed, not moved (the
    retry finishes the moves, a copy and a delete on S3, and recognises the events)."""
    args, prefix, expected, channel_id = _setup(tmp_path, s3, 300)
    killed = run_land(args, {"INGEST_LAND_FAULT": phase})
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert len(_manifests(s3, prefix)) == (1 if phase == "after_manifest" else 0)
    again = run_land([*args, "--drain"])
    assert again.returncode == 0, again.stderr[-3000:]
    totals = json.loads(again.stdout)["totals"]
    assert totals["redelivered"] == (200 if phase == "after_manifest" else 0) and totals["backlog_after"] == 0
    assert_landed_exactly_once(_landed(s3, prefix), expected, channel_id)
    assert sum(m["count"] for m in _manifests(s3, prefix)) == 300
    staging = _s3fs(s3).get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}/events/_staging", allow_not_found=True,
                                                        recursive=True))
    assert [i.path for i in staging if i.type == pafs.FileType.File] == []


def test_the_s3_commit_log_is_exclusive_through_conditional_writes(tmp_path: Path, s3: str) -> None:
    """The store refuses an existing manifest name on the write itself (no check in front of
    it), and two committers of the same seqs racing for commit 1 end with one commit."""
    settings = tmp_path / "race.json"
    settings.write_text(json.dumps({"root": f"s3a://{BUCKET}/t-{tmp_path.name}", "conf": s3a_conf(s3)}))
    done = subprocess.run([sys.executable, "-m", "tests.hdfs.s3_child", str(settings)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    out = json.loads(line.removeprefix("RESULT "))
    assert out["conditional"] is True and out["raw"] == "refused" and out["raw_bytes"] == "first", out
    race = out["race"]
    winners = [name for name, result in race.items() if result == 1]
    losers = [name for name, result in race.items() if str(result).startswith("conflict: ")]
    assert len(winners) == 1 and len(losers) == 1, race
    assert out["commits"] == [[1, winners[0]]]
