"""HadoopStorage (the driver JVM's Hadoop FileSystem through py4j), the storage an hdfs:// or
s3a:// landing root uses, exercised on a file:// root through a real SparkSession.

Hadoop's local file system shows every operation's semantics; that a rename is atomic and never
replaces a file is HDFS's own property, which local Hadoop cannot show (docs/landing.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest_toolkit.land.errors import CommitConflict
from ingest_toolkit.land.manifest import Manifest, ManifestLog
from ingest_toolkit.land.storage import HadoopStorage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration
CID = bytes(range(16))


@pytest.fixture
def store(tmp_path: Path, spark: SparkSession) -> HadoopStorage:
    return HadoopStorage(tmp_path.as_uri(), spark)


def test_files_listing_reading_and_parquet_footers(store: HadoopStorage, tmp_path: Path) -> None:
    (tmp_path / "ch/p").mkdir(parents=True)
    pq.write_table(pa.table({"v": list(range(41))}), tmp_path / "ch/p/part-0.parquet")
    (tmp_path / "ch/b.txt").write_bytes(b"hello")
    assert store.exists("ch/b.txt") and not store.exists("ch/none")
    assert store.list_dir("ch") == ["b.txt", "p"] and store.list_dir("missing") == []
    files = {f.path: f for f in store.list_files("ch")}
    assert set(files) == {"b.txt", "p/part-0.parquet"} and files["b.txt"].size == 5
    assert abs(files["b.txt"].mtime - time.time()) < 60 and abs(store.mtime("ch/b.txt") - time.time()) < 60
    assert store.read_bytes("ch/b.txt") == b"hello"
    assert store.parquet_rows("ch/p/part-0.parquet") == 41  # the Parquet reader on Spark's classpath
    store.delete("ch/p")
    assert not (tmp_path / "ch/p").exists()


def test_create_exclusive_and_moves_never_replace(store: HadoopStorage, tmp_path: Path) -> None:
    store.create_exclusive("ch/_manifests/000000000001.json", b"first")
    with pytest.raises(FileExistsError):
        store.create_exclusive("ch/_manifests/000000000001.json", b"second")
    assert (tmp_path / "ch/_manifests/000000000001.json").read_bytes() == b"first"
    assert [n for n in store.list_dir("ch/_manifests") if not n.endswith(".crc")] == ["000000000001.json"]
    (tmp_path / "a").write_bytes(b"staged")
    (tmp_path / "b").write_bytes(b"landed")
    assert store.move("a", "b") is False and (tmp_path / "b").read_bytes() == b"landed"
    assert store.move("a", "x/y/c") is True and (tmp_path / "x/y/c").read_bytes() == b"staged"


def test_the_commit_log_over_hadoop(store: HadoopStorage) -> None:
    log = ManifestLog(store, "ch")

    def draft(batch: str, lo: int, hi: int) -> Manifest:
        return Manifest(channel="ch", channel_id=CID.hex(), batch_id=batch, seq_ranges=((lo, hi),),
                        count=hi - lo + 1, files=(), created="2026-01-01T00:00:00Z")

    assert log.commit(draft("b1", 1, 100), after=0).commit == 1
    with pytest.raises(CommitConflict):
        log.commit(draft("late", 50, 150), after=0)
    assert log.commit(draft("b2", 101, 150), after=0).commit == 2
    landed = log.landed(CID, 90, 120)
    assert landed.ranges == [(1, 100), (101, 150)] and landed.newest == 2
    assert [e.batch_id for e in log.entries()] == ["b1", "b2"]
