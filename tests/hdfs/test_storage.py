"""The landing's storage primitives on a real NameNode: the claims the commit protocol rests on.

* a Hadoop ``rename`` onto an existing file returns false and leaves both files alone (so the
  hidden-file-then-rename manifest commit is exclusive), proven with the raw FileSystem call;
* of many landings creating the same manifest names at once, each name has exactly one winner;
* the commit log keeps overlapping seqs out under concurrent committers;
* a file open for write (a writer that died holding its lease) is invisible to the commit log
  and can be deleted by recovery;
* the pyarrow view of HDFS (asset checks, curated swap) lists, reads, renames and deletes.
"""

from __future__ import annotations

import random
import threading
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import fs as pafs

from ingest_toolkit.hdfs import MiniHdfs
from ingest_toolkit.land.errors import CommitConflict
from ingest_toolkit.land.manifest import Manifest, ManifestLog, overlap
from ingest_toolkit.land.storage.hadoop_arrow import hadoop_filesystem

from .helpers import HdfsFiles

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration
CID = bytes(range(16))


def test_rename_onto_an_existing_file_is_refused_by_the_namenode(hdfs_root: str, files: HdfsFiles,
                                                                 spark: SparkSession) -> None:
    store = files.store(hdfs_root)
    store.create_exclusive("a", b"first")  # any two files
    store.create_exclusive("b", b"second")
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.Path(hdfs_root).getFileSystem(spark._jsc.hadoopConfiguration())
    assert fs.getClass().getName() == "org.apache.hadoop.hdfs.DistributedFileSystem"
    path = jvm.org.apache.hadoop.fs.Path
    refused = fs.rename(path(f"{hdfs_root}/b"), path(f"{hdfs_root}/a"))
    assert refused is False
    assert store.read_bytes("a") == b"first" and store.read_bytes("b") == b"second"
    assert store.move("b", "a") is False and store.move("b", "c/d") is True
    assert store.read_bytes("c/d") == b"second" and not store.exists("b")


def test_create_exclusive_has_one_winner_per_name_under_concurrency(hdfs_root: str, files: HdfsFiles) -> None:
    store = files.store(hdfs_root)
    wins: list[tuple[int, int]] = []
    start = threading.Barrier(4)

    def racer(who: int) -> None:
        start.wait()
        for name in range(15):
            try:
                store.create_exclusive(f"log/{name:04d}", str(who).encode())
                wins.append((name, who))
            except FileExistsError:
                pass

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(name for name, _ in wins) == list(range(15))  # each name won exactly once
    for name, who in wins:
        assert store.read_bytes(f"log/{name:04d}") == str(who).encode()
    assert sorted(store.list_dir("log")) == [f"{n:04d}" for n in range(15)]  # no hidden file left behind


def test_concurrent_committers_never_commit_overlapping_seqs_on_hdfs(hdfs_root: str, files: HdfsFiles) -> None:
    log = ManifestLog(files.store(hdfs_root), "ch")
    outcomes: list[Manifest | CommitConflict | None] = []
    start = threading.Barrier(3)

    def committer(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for i in range(8):
            lo = rng.randrange(0, 60)
            ranges = ((lo, lo + rng.randrange(0, 10)),)
            landed = log.landed(CID, *ranges[0])
            if landed.ranges:
                outcomes.append(None)
                continue
            draft = Manifest(channel="ch", channel_id=CID.hex(), batch_id=f"t{seed}-{i}", seq_ranges=ranges,
                             count=ranges[0][1] - ranges[0][0] + 1, files=(), created="2026-01-01T00:00:00Z")
            try:
                outcomes.append(log.commit(draft, after=landed.newest))
            except CommitConflict as err:
                outcomes.append(err)

    threads = [threading.Thread(target=committer, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committed = log.manifests()
    assert [m.commit for m in committed] == list(range(1, len(committed) + 1))
    for i, a in enumerate(committed):
        for b in committed[i + 1:]:
            assert not overlap(a.seq_ranges, b.seq_ranges), (a, b)
    assert len(outcomes) == 24 and len(committed) == sum(isinstance(o, Manifest) for o in outcomes)


def test_a_file_left_open_by_a_dead_writer_is_no_manifest_and_recovery_deletes_it(hdfs_root: str,
                                                                                  files: HdfsFiles,
                                                                                  spark: SparkSession) -> None:
    """A writer that died between create and close (its lease still held) leaves a hidden,
    incomplete file: not a commit name, so the log ignores it, and deleting it is allowed."""
    store = files.store(hdfs_root)
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.Path(hdfs_root).getFileSystem(spark._jsc.hadoopConfiguration())
    open_file = fs.create(jvm.org.apache.hadoop.fs.Path(f"{hdfs_root}/ch/_manifests/.000000000001.json.tmp-dead"))
    open_file.write(bytearray(b'{"half": '))
    open_file.hflush()  # visible to readers, never closed
    log = ManifestLog(store, "ch")
    assert log.entries() == []
    store.delete("ch/_manifests/.000000000001.json.tmp-dead")
    assert store.list_dir("ch/_manifests") == []


def test_the_pyarrow_view_of_hdfs_lists_reads_renames_and_deletes(hdfs: MiniHdfs, hdfs_root: str,
                                                                  spark: SparkSession) -> None:
    fs, base = hadoop_filesystem(hdfs_root, spark)
    fs.create_dir(f"{base}/t/p=1", recursive=True)
    pq.write_table(pa.table({"event_id": [f"id-{i}" for i in range(1000)]}), f"{base}/t/p=1/a.parquet", filesystem=fs)
    infos = fs.get_file_info(pafs.FileSelector(f"{base}/t", recursive=True))
    assert sorted((i.path, i.type) for i in infos) == [
        (f"{base}/t/p=1", pafs.FileType.Directory), (f"{base}/t/p=1/a.parquet", pafs.FileType.File)]
    assert abs(infos[-1].mtime.timestamp() - time.time()) < 120  # type: ignore[union-attr]
    table = pq.read_table(f"{base}/t/p=1/a.parquet", columns=["event_id"], filesystem=fs)
    assert table.column("event_id").to_pylist()[-1] == "id-999"
    fs.move(f"{base}/t/p=1", f"{base}/t/p=2")
    assert fs.get_file_info(f"{base}/t/p=1").type == pafs.FileType.NotFound
    with pytest.raises(OSError):
        fs.move(f"{base}/t/missing", f"{base}/t/p=3")
    with pytest.raises(FileNotFoundError):  # as pyarrow's own file systems: readers of optional files rely on it
        fs.open_input_stream(f"{base}/t/missing.json")
    fs.delete_dir(f"{base}/t")
    assert fs.get_file_info(f"{base}/t").type == pafs.FileType.NotFound
    assert hdfs.uri.startswith("hdfs://127.0.0.1:")
