"""Landing into a real HDFS (MiniDFSCluster, Hadoop at PySpark's version), exactly once.

* the shipped ``conf/landing.toml`` with ``INGEST_LANDING__ROOT=hdfs://127.0.0.1:<port>/...``
  through ``ingest-toolkit land``, read back through Spark from HDFS;
* a real landing process SIGKILLed at each phase of the commit protocol, then landed again;
* two landings of the same events racing for the same commit number: exactly one wins;
* a Spark failure on HDFS rolls the take back, the events stay in order, the retry lands them;
* a landing killed while writing its manifest: the temporary file it leaves is removed by the
  first landing past the grace period.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.land import InProcessSource, LandingError, land_once
from ingest_toolkit.land.errors import CommitConflict
from ingest_toolkit.land.faults import COMMIT_WRITE
from ingest_toolkit.land.faults import PARQUET_PHASES as PHASES
from ingest_toolkit.land.manifest import ManifestLog
from ingest_toolkit.land.storage import is_tmp_name

from ..land.helpers import assert_landed_exactly_once, channel_settings, landing_config, make_events, put_events
from .helpers import HdfsFiles, run_land, write_toml

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration
COMMITTED_MANIFEST = {"after_manifest", "during_moves", "before_commit", "after_commit"}


def _channel(tmp_path: Path, n: int) -> tuple[dict[str, Any], dict[int, tuple[bytes, dict[str, str]]], bytes]:
    settings = channel_settings(tmp_path)
    ch = FileChannel(**settings)
    expected = put_events(ch, make_events(n))
    channel_id = ch.channel_id
    ch.close()
    return settings, expected, channel_id


def test_the_shipped_conf_lands_into_hdfs_exactly_once(tmp_path: Path, hdfs_root: str, files: HdfsFiles) -> None:
    settings, expected, channel_id = _channel(tmp_path, 700)
    channel_toml = write_toml(tmp_path / "channel.toml", {"channel": settings})
    env = {"INGEST_LANDING__ROOT": hdfs_root}
    args = ["--conf", "conf/landing.toml", "--channel", "events", "--channel-conf", str(channel_toml), "--json"]
    first = run_land(args, env)
    assert first.returncode == 0, first.stderr[-3000:]
    doc = json.loads(first.stdout)
    assert doc["root"] == hdfs_root and doc["totals"]["events"] == 700 and doc["totals"]["temp_files_pending"] == 0
    assert doc["runs"][0]["manifest_uri"] == f"{hdfs_root}/events/_manifests/000000000001.json"
    again = run_land(args, env)  # nothing left: lands nothing, adds no manifest
    assert again.returncode == 0 and json.loads(again.stdout)["totals"]["taken"] == 0, again.stderr[-2000:]
    landed = files.landed(hdfs_root)
    assert_landed_exactly_once(landed, expected, channel_id)
    hours = sorted(set(zip(landed.column("event_date").to_pylist(), landed.column("event_hour").to_pylist(),
                           strict=True)))
    assert len(hours) >= 3  # partitioned by event time across a date boundary
    assert [m["count"] for m in files.manifests(hdfs_root)] == [700] and files.staging(hdfs_root) == []


def _small_landing_toml(tmp_path: Path, root: str, max_events: int = 1000) -> Path:
    """A landing configuration for a landing process of its own that starts quickly (small JVM)."""
    return write_toml(tmp_path / "landing.toml", {
        "landing": {"root": root, "max_events": max_events},
        "spark": {"master": "local[2]"},
        "spark.conf": {"spark.driver.memory": "512m",
                       "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}})


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASES)
def test_sigkill_at_each_phase_then_relanding_into_hdfs_is_exactly_once(tmp_path: Path, phase: str,
                                                                        hdfs_root: str, files: HdfsFiles,
                                                                        spark: SparkSession) -> None:
    settings, expected, channel_id = _channel(tmp_path, 300)
    channel_toml = write_toml(tmp_path / "channel.toml", {"channel": settings})
    landing_toml = _small_landing_toml(tmp_path, hdfs_root, max_events=200)
    done = run_land(["--conf", str(landing_toml), "--channel", "events", "--channel-conf", str(channel_toml)],
                    {"INGEST_LAND_FAULT": phase})
    assert done.returncode == -9, f"not killed at {phase}: rc={done.returncode}\n{done.stderr[-3000:]}"
    assert [m["count"] for m in files.manifests(hdfs_root)] == ([200] if phase in COMMITTED_MANIFEST else [])
    if phase in ("during_write", "after_write"):  # Spark's job commit writes _SUCCESS: the two moments differ
        store = files.store(hdfs_root)
        committed = [b for b in files.staging(hdfs_root) if store.exists(f"events/_staging/{b}/_SUCCESS")]
        assert len(committed) == (0 if phase == "during_write" else 1), committed
    ch = FileChannel(**settings)
    try:
        assert len(ch) == (100 if phase == "after_commit" else 300)
        result = land_once(InProcessSource(ch, "events"),
                           landing_config(hdfs_root, max_events=1000, staging_grace_seconds=0), spark)  # type: ignore[arg-type]
        assert result.redelivered == (200 if phase in COMMITTED_MANIFEST - {"after_commit"} else 0)
        assert result.events + result.redelivered == result.taken and len(ch) == 0
    finally:
        ch.close()
    assert_landed_exactly_once(files.landed(hdfs_root), expected, channel_id)
    assert files.staging(hdfs_root) == []
    assert sum(m["count"] for m in files.manifests(hdfs_root)) == 300


class _Redelivered:
    """The same events handed to a second landing, as an agent does after a lease ran out."""

    def __init__(self, channel_id: bytes, columns: Any) -> None:
        self.channel_id, self.columns, self.committed, self.rolled_back = channel_id, columns, False, False

    def commit(self) -> None:
        self.committed = True

    def rollback(self) -> None:
        self.rolled_back = True


class _SecondTaker:
    name = "events"

    def __init__(self, first_took: threading.Event, holder: dict[str, Any]) -> None:
        self.first_took, self.holder = first_took, holder

    def open_take(self, max_events: int) -> _Redelivered:
        assert self.first_took.wait(120)
        self.holder["second"] = _Redelivered(self.holder["channel_id"], self.holder["columns"])
        return self.holder["second"]  # type: ignore[no-any-return]

    def backlog(self) -> int:
        return 0


def test_two_landings_racing_for_one_commit_exactly_one_wins(tmp_path: Path, hdfs_root: str, files: HdfsFiles,
                                                             spark: SparkSession,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Both landings write the same 400 events with Spark, then both try to create commit 1 at
    the same moment (a barrier in front of the commit): HDFS lets one rename win."""
    settings, expected, channel_id = _channel(tmp_path, 400)
    ch = FileChannel(**settings)
    first_took, holder = threading.Event(), {"channel_id": ch.channel_id}
    source = InProcessSource(ch, "events")
    real_open = source.open_take

    def open_and_share(max_events: int) -> Any:
        take = real_open(max_events)
        holder["columns"] = take.columns
        first_took.set()
        return take

    monkeypatch.setattr(source, "open_take", open_and_share)
    barrier, real_commit = threading.Barrier(2, timeout=120), ManifestLog.commit

    def commit_together(log: ManifestLog, manifest: Any, after: int) -> Any:
        barrier.wait()  # both are past their Spark writes and checked the log at the same state
        return real_commit(log, manifest, after)

    monkeypatch.setattr(ManifestLog, "commit", commit_together)
    config = landing_config(hdfs_root, max_events=1000)  # type: ignore[arg-type]
    outcomes: dict[str, Any] = {}

    def run(name: str, src: Any) -> None:
        try:
            outcomes[name] = land_once(src, config, spark)
        except LandingError as err:
            outcomes[name] = err

    threads = [threading.Thread(target=run, args=("first", source)),
               threading.Thread(target=run, args=("second", _SecondTaker(first_took, holder)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    lost = [o for o in outcomes.values() if isinstance(o, CommitConflict)]
    won = [o for o in outcomes.values() if not isinstance(o, LandingError)]
    assert len(lost) == 1 and len(won) == 1, outcomes
    assert "commit 1" in str(lost[0]) and won[0].events == 400
    monkeypatch.setattr(ManifestLog, "commit", real_commit)
    try:
        land_once(source, config, spark)  # the channel's take (if it was the loser) is recognised and committed
        assert len(ch) == 0
    finally:
        ch.close()
    assert_landed_exactly_once(files.landed(hdfs_root), expected, channel_id)
    assert [m["commit"] for m in files.manifests(hdfs_root)] == [1] and files.staging(hdfs_root) == []


def _space_quota(spark: SparkSession, uri: str, quota: int) -> None:
    """An HDFS space quota on ``uri`` (-1: none), set as the superuser the test session runs as."""
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    fs.mkdirs(path)
    fs.setQuota(path, 9223372036854775807, quota)  # namespace quota left alone (QUOTA_DONT_SET)


def test_a_spark_failure_on_hdfs_rolls_the_take_back_and_the_retry_lands_once(tmp_path: Path, hdfs_root: str,
                                                                             files: HdfsFiles,
                                                                             spark: SparkSession) -> None:
    """Spark's tasks cannot allocate a block (the channel directory's space quota is full):
    the job fails after the take, the take goes back in order, and the retry lands once."""
    settings, expected, channel_id = _channel(tmp_path, 250)
    _space_quota(spark, f"{hdfs_root}/events", 1024)
    config = landing_config(hdfs_root, max_events=1000)  # type: ignore[arg-type]
    ch = FileChannel(**settings)
    try:
        with pytest.raises(LandingError) as failed:
            land_once(InProcessSource(ch, "events"), config, spark)
        message = str(failed.value)
        assert failed.value.rolled_back and failed.value.phase == "writing Parquet with Spark", message
        assert "\n" not in message and "\tat " not in message and len(message) < 800, message
        assert "quota" in message and f"{hdfs_root}/events" in message, message
        assert "The take was rolled back; the events are still in the channel" in message
        assert len(ch) == 250
        with ch.transaction() as tx:
            assert [e.body for e in tx.take(250)] == [expected[s][0] for s in sorted(expected)]  # in order
            tx.rollback()
        _space_quota(spark, f"{hdfs_root}/events", -1)
        again = land_once(InProcessSource(ch, "events"), config.model_copy(update={"staging_grace_seconds": 0}), spark)
        assert again.events == 250 and len(ch) == 0
    finally:
        ch.close()
    assert_landed_exactly_once(files.landed(hdfs_root), expected, channel_id)
    assert files.staging(hdfs_root) == []


@pytest.mark.slow
def test_a_commit_killed_mid_write_leaves_a_temporary_file_that_a_landing_past_the_grace_removes(
        tmp_path: Path, hdfs_root: str, files: HdfsFiles, spark: SparkSession) -> None:
    """A landing process SIGKILLed while its manifest is written under its temporary name leaves
    that file open on HDFS. The next landing lands the events once and keeps the file (younger
    than the grace: a live landing may be writing it), reporting it; once it is older than the
    grace, the next landing removes it."""
    settings, expected, channel_id = _channel(tmp_path, 300)
    channel_toml = write_toml(tmp_path / "channel.toml", {"channel": settings})
    killed = run_land(["--conf", str(_small_landing_toml(tmp_path, hdfs_root)), "--channel", "events",
                       "--channel-conf", str(channel_toml)], {"INGEST_LAND_FAULT": COMMIT_WRITE})
    assert killed.returncode == -9, killed.stderr[-3000:]
    store = files.store(hdfs_root)
    (temp,) = store.list_dir("events/_manifests")
    assert is_tmp_name(temp) and temp.startswith(".000000000001.json.tmp-"), temp
    config = landing_config(hdfs_root, max_events=1000)  # type: ignore[arg-type]  # the default grace, one hour
    ch = FileChannel(**settings)
    try:
        landed = land_once(InProcessSource(ch, "events"), config, spark)
        assert landed.events == 300 and landed.temp_files_pending == 1 and len(ch) == 0
        assert temp in store.list_dir("events/_manifests")
        _written_hours_ago(spark, f"{hdfs_root}/events/_manifests/{temp}", 2)
        again = land_once(InProcessSource(ch, "events"), config, spark)  # nothing to take; recovery runs
        assert again.taken == 0 and again.temp_files_pending == 0
    finally:
        ch.close()
    assert store.list_dir("events/_manifests") == ["000000000001.json", "_index"]
    assert_landed_exactly_once(files.landed(hdfs_root), expected, channel_id)


def _written_hours_ago(spark: SparkSession, uri: str, hours: float) -> None:
    """Set the modification time the NameNode keeps for ``uri`` (as if written ``hours`` ago)."""
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    written_ms = int((time.time() - hours * 3600) * 1000)
    path.getFileSystem(spark._jsc.hadoopConfiguration()).setTimes(path, written_ms, -1)
