"""HDFS faults during a landing: a DataNode lost, the NameNode in safe mode or stopped, a root
the landing's user may not write. Each fails the run with one line naming the URI and the
state, rolls the take back (the events stay in the channel, in order), and the next landing,
once HDFS is well again, lands every event exactly once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.hdfs import MiniHdfs
from ingest_toolkit.land import InProcessSource, LandingError, land_once

from ..land.helpers import assert_landed_exactly_once, channel_settings, landing_config, make_events, put_events
from .helpers import HdfsFiles, run_land, write_toml

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def _filled(tmp_path: Path, n: int) -> tuple[dict[str, Any], dict[int, tuple[bytes, dict[str, str]]], bytes]:
    settings = channel_settings(tmp_path)
    ch = FileChannel(**settings)
    expected = put_events(ch, make_events(n))
    channel_id = ch.channel_id
    ch.close()
    return settings, expected, channel_id


def _still_queued_in_order(ch: FileChannel, expected: dict[int, tuple[bytes, dict[str, str]]]) -> None:
    assert len(ch) == len(expected) and ch.stats()["takes_committed"] == 0
    with ch.transaction() as tx:
        assert [e.body for e in tx.take(len(expected))] == [expected[s][0] for s in sorted(expected)]
        tx.rollback()


def _one_line(message: str) -> None:
    assert "\n" not in message and "\tat " not in message and len(message) < 900, message


class _DataNodeDiesDuringTheWrite:
    """A ``write_lock`` for land_once: entered after the take, just before Spark writes. It
    stops the DataNode as soon as a write task has created its file in staging (the block is
    not written yet: Parquet writes it at close), or at the latest when the write starts."""

    def __init__(self, hdfs: MiniHdfs, files: HdfsFiles, root: str) -> None:
        self.hdfs, self.files, self.root, self.stopped = hdfs, files, root, threading.Event()

    def _watch(self) -> None:
        store = self.files.store(self.root)
        for _ in range(400):
            if any(f.path.rsplit("/", 1)[-1].startswith("part-") for f in store.list_files("events/_staging")):
                break
            threading.Event().wait(0.01)
        self.hdfs.stop_datanode(0)
        self.stopped.set()

    def __enter__(self) -> None:
        threading.Thread(target=self._watch, daemon=True).start()

    def __exit__(self, *exc: object) -> None:
        self.stopped.wait(60)


def test_a_datanode_lost_during_the_write_fails_the_run_and_the_next_landing_lands_once(
        tmp_path: Path, healthy_hdfs: MiniHdfs, hdfs_root: str, files: HdfsFiles, spark: SparkSession) -> None:
    settings, expected, channel_id = _filled(tmp_path, 3000)
    config = landing_config(hdfs_root, max_events=5000, staging_grace_seconds=0)  # type: ignore[arg-type]
    ch = FileChannel(**settings)
    try:
        with pytest.raises(LandingError) as failed:
            land_once(InProcessSource(ch, "events"), config, spark,
                      write_lock=_DataNodeDiesDuringTheWrite(healthy_hdfs, files, hdfs_root))
        message = str(failed.value)
        _one_line(message)
        assert failed.value.rolled_back and failed.value.phase == "writing Parquet with Spark", message
        assert "DataNode" in message and healthy_hdfs.uri in message, message
        assert files.manifests(hdfs_root) == []
        _still_queued_in_order(ch, expected)
        healthy_hdfs.start_datanode(0)
        result = land_once(InProcessSource(ch, "events"), config, spark)
        assert result.events == 3000 and len(ch) == 0
    finally:
        ch.close()
    assert_landed_exactly_once(files.landed(hdfs_root), expected, channel_id)
    assert files.staging(hdfs_root) == []


def test_a_namenode_in_safe_mode_fails_the_run_in_one_line_and_loses_nothing(
        tmp_path: Path, healthy_hdfs: MiniHdfs, hdfs_root: str, files: HdfsFiles, spark: SparkSession) -> None:
    settings, expected, channel_id = _filled(tmp_path, 400)
    config = landing_config(hdfs_root, max_events=1000, staging_grace_seconds=0)  # type: ignore[arg-type]
    assert healthy_hdfs.safe_mode("enter") is True
    ch = FileChannel(**settings)
    try:
        with pytest.raises(LandingError) as failed:
            land_once(InProcessSource(ch, "events"), config, spark)
        message = str(failed.value)
        _one_line(message)
        assert "is in safe mode" in message and hdfs_root in message and failed.value.rolled_back, message
        _still_queued_in_order(ch, expected)
        assert healthy_hdfs.safe_mode("leave") is False
        assert land_once(InProcessSource(ch, "events"), config, spark).events == 400 and len(ch) == 0
    finally:
        ch.close()
    assert_landed_exactly_once(files.landed(hdfs_root), expected, channel_id)


def test_a_stopped_namenode_fails_the_land_command_in_one_line(tmp_path: Path, healthy_hdfs: MiniHdfs,
                                                              hdfs_root: str, files: HdfsFiles) -> None:
    settings, expected, channel_id = _filled(tmp_path, 300)
    channel_toml = write_toml(tmp_path / "channel.toml", {"channel": settings})
    args = ["--conf", "conf/landing.toml", "--channel", "events", "--channel-conf", str(channel_toml)]
    env = {"INGEST_LANDING__ROOT": hdfs_root}
    healthy_hdfs.stop_namenode()
    failed = run_land(args, env)
    assert failed.returncode == 1, failed.stderr[-3000:]
    (line,) = [ln for ln in failed.stderr.splitlines() if ln.startswith("Error:")]
    assert "does not answer" in line and healthy_hdfs.uri in line and "nothing was taken" in line, line
    assert "Traceback" not in failed.stderr and "\tat " not in failed.stderr
    ch = FileChannel(**settings)
    try:
        _still_queued_in_order(ch, expected)
    finally:
        ch.close()
    healthy_hdfs.start_namenode()
    assert run_land(args, env).returncode == 0
    assert_landed_exactly_once(files.landed(hdfs_root), expected, channel_id)


@contextmanager
def _locked_root(spark: SparkSession, uri: str) -> Iterator[None]:
    """``uri`` created by the superuser (the test session's user), mode 755: others cannot write."""
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    fs.mkdirs(path)
    fs.setPermission(path, jvm.org.apache.hadoop.fs.permission.FsPermission(0o755))
    yield
    fs.setPermission(path, jvm.org.apache.hadoop.fs.permission.FsPermission(0o777))


def test_a_root_the_landing_user_may_not_write_fails_in_one_line(tmp_path: Path, hdfs_root: str,
                                                                  files: HdfsFiles, spark: SparkSession) -> None:
    settings, expected, channel_id = _filled(tmp_path, 200)
    channel_toml = write_toml(tmp_path / "channel.toml", {"channel": settings})
    args = ["--conf", "conf/landing.toml", "--channel", "events", "--channel-conf", str(channel_toml)]
    env = {"INGEST_LANDING__ROOT": hdfs_root, "HADOOP_USER_NAME": "alice"}  # simple auth: this user
    with _locked_root(spark, hdfs_root):
        failed = run_land(args, env)
        assert failed.returncode == 1, failed.stderr[-3000:]
        (line,) = [ln for ln in failed.stderr.splitlines() if ln.startswith("Error:")]
        assert "permission denied under" in line and "user=alice" in line and hdfs_root in line, line
        assert "The take was rolled back" in line and "Traceback" not in failed.stderr, line
        ch = FileChannel(**settings)
        try:
            _still_queued_in_order(ch, expected)
        finally:
            ch.close()
    assert run_land(args, env).returncode == 0  # the same user, once the root is writable
    assert_landed_exactly_once(files.landed(hdfs_root), expected, channel_id)
