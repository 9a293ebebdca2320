"""Landing from a real file channel with a real local SparkSession, read back with pyarrow."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.cli import main
from ingest_toolkit.land import (
    InProcessSource,
    LandingError,
    LandingResult,
    land_once,
    land_until_empty,
    read_manifests,
)
from ingest_toolkit.land.source import TakeBatch
from ingest_toolkit.land.storage import LocalStorage

from .helpers import (
    assert_landed_exactly_once,
    channel_settings,
    landing_config,
    make_events,
    manifest_counts,
    put_events,
    read_landed,
    staging_leftovers,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


@pytest.fixture
def channel(tmp_path: Path) -> Iterator[FileChannel]:
    ch = FileChannel(**channel_settings(tmp_path))
    yield ch
    ch.close()


def test_lands_every_event_once_with_its_columns_and_partitions(tmp_path: Path, channel: FileChannel,
                                                                spark: SparkSession) -> None:
    expected = put_events(channel, make_events(1200))
    root = tmp_path / "landing"
    config = landing_config(root, max_events=500)
    results: list[LandingResult] = []
    while channel and len(results) < 10:
        results.append(land_once(InProcessSource(channel, "events"), config, spark))
    assert [r.events for r in results] == [500, 500, 200] and len(channel) == 0
    assert results[-1].backlog_after == 0 and len({r.batch_id for r in results}) == 3
    table = read_landed(root, "events")
    assert_landed_exactly_once(table, expected, channel.channel_id)
    manifests = read_manifests(str(root), "events", spark=spark)
    assert [m.count for m in manifests] == [500, 500, 200] and manifest_counts(root, "events") == 1200
    assert {m.batch_id for m in manifests} == {r.batch_id for r in results}
    assert sum(r.files for r in results) == sum(len(m.files) for m in manifests)
    for m in manifests:  # every file a manifest names is in place, under its final name
        assert all((root / "events" / f.path).stat().st_size == f.bytes for f in m.files)
    assert staging_leftovers(root, "events") == []
    row = next(r for r in table.to_pylist() if r["body"] == b"event-000001")  # timestamp 22:01Z
    assert (row["event_date"], row["event_hour"]) == ("2025-11-22", "22")
    assert row["event_time"].isoformat() == "2025-11-22T22:01:00+00:00"
    row = next(r for r in table.to_pylist() if r["body"] == b"event-000179")  # 00:59Z the next day
    assert (row["event_date"], row["event_hour"]) == ("2025-11-23", "00")
    by_spark = spark.read.parquet(f"{root.as_uri()}/events")  # Spark ignores _manifests and _staging too
    assert by_spark.count() == 1200 and by_spark.select("event_id").distinct().count() == 1200


class _LostCommit:
    """A take whose commit is lost, as when an agent's lease runs out during the write: the
    events go back to the channel although the batch was landed."""

    def __init__(self, take: TakeBatch) -> None:
        self.take, self.channel_id, self.columns = take, take.channel_id, take.columns

    def commit(self) -> None:
        self.take.rollback()
        raise TimeoutError("lease expired")

    def rollback(self) -> None:
        self.take.rollback()


class _LosingSource(InProcessSource):
    def open_take(self, max_events: int) -> _LostCommit:  # type: ignore[override]
        return _LostCommit(super().open_take(max_events))


def test_redelivered_events_are_recognised_and_not_written_again(tmp_path: Path, channel: FileChannel,
                                                                 spark: SparkSession) -> None:
    expected = put_events(channel, make_events(300))
    root = tmp_path / "landing"
    with pytest.raises(LandingError, match="recognises them as landed") as err:
        land_once(_LosingSource(channel, "events"), landing_config(root, max_events=200), spark)
    assert err.value.phase == "commit" and not err.value.rolled_back
    assert len(channel) == 300  # landed, but the take did not commit
    expected.update(put_events(channel, make_events(50, start=300)))
    result = land_once(InProcessSource(channel, "events"), landing_config(root, max_events=1000), spark)
    assert (result.taken, result.redelivered, result.events) == (350, 200, 150)
    result = land_once(InProcessSource(channel, "events"), landing_config(root), spark)
    assert result.taken == 0 and len(channel) == 0
    assert_landed_exactly_once(read_landed(root, "events"), expected, channel.channel_id)


def test_a_fully_redelivered_batch_only_commits(tmp_path: Path, channel: FileChannel, spark: SparkSession) -> None:
    expected = put_events(channel, make_events(100))
    root = tmp_path / "landing"
    with pytest.raises(LandingError):
        land_once(_LosingSource(channel, "events"), landing_config(root), spark)
    result = land_once(InProcessSource(channel, "events"), landing_config(root), spark)
    assert (result.taken, result.redelivered, result.events, result.files, result.batch_id) == (100, 100, 0, 0, None)
    assert len(channel) == 0 and len(read_manifests(str(root), "events")) == 1
    assert_landed_exactly_once(read_landed(root, "events"), expected, channel.channel_id)


def test_spark_failure_rolls_the_take_back(tmp_path: Path, channel: FileChannel, spark: SparkSession) -> None:
    expected = put_events(channel, make_events(150))
    root = tmp_path / "landing"
    (root / "events").mkdir(parents=True)
    (root / "events" / "_staging").write_text("a file where Spark's staging directory must go")
    with pytest.raises(LandingError) as err:  # recover=False: recovery would refuse the layout before taking
        land_once(InProcessSource(channel, "events"), landing_config(root), spark, recover=False)
    assert err.value.phase == "writing Parquet with Spark" and err.value.rolled_back
    assert err.value.channel == "events" and "events are still in the channel" in str(err.value)
    assert len(channel) == 150 and read_manifests(str(root), "events") == []
    with channel.transaction() as tx:
        assert [e.seq for e in tx.take(150)] == sorted(expected)  # all back, in order


def test_a_broken_landing_root_fails_before_taking(tmp_path: Path, channel: FileChannel, spark: SparkSession) -> None:
    put_events(channel, make_events(10))
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the landing root's parent should be")
    with pytest.raises(LandingError, match="Not a directory") as err:
        land_once(InProcessSource(channel, "events"), landing_config(blocker / "landing"), spark)
    assert err.value.phase == "recovering earlier runs" and "nothing was taken" in str(err.value)
    assert len(channel) == 10


def test_a_full_disk_at_the_manifest_commit_rolls_back_and_publishes_nothing(
        tmp_path: Path, channel: FileChannel, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = put_events(channel, make_events(80))
    root = tmp_path / "landing"

    def disk_full(self: LocalStorage, rel: str, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", rel)

    with monkeypatch.context() as patch:
        patch.setattr(LocalStorage, "create_exclusive", disk_full)
        with pytest.raises(LandingError, match="No space left on device") as err:
            land_once(InProcessSource(channel, "events"), landing_config(root), spark)
    assert err.value.phase == "committing the manifest" and err.value.rolled_back
    assert len(channel) == 80 and read_landed(root, "events").num_rows == 0
    assert read_manifests(str(root), "events") == []
    assert len(list((root / "events" / "_staging").iterdir())) == 1  # the failed run's files: unpublished
    retry = landing_config(root, staging_grace_seconds=0)  # space again; the leftover counts as idle
    result = land_once(InProcessSource(channel, "events"), retry, spark)
    assert result.events == 80 and not list((root / "events" / "_staging").iterdir())
    assert_landed_exactly_once(read_landed(root, "events"), expected, channel.channel_id)


def test_arrow_storage_lands_the_same(tmp_path: Path, channel: FileChannel, spark: SparkSession) -> None:
    expected = put_events(channel, make_events(300))
    root = tmp_path / "landing"
    result = land_once(InProcessSource(channel, "events"), landing_config(root, storage="arrow"), spark)
    assert result.events == 300 and result.manifest_uri and result.manifest_uri.startswith("file://")
    assert_landed_exactly_once(read_landed(root, "events"), expected, channel.channel_id)


def test_cli_lands_in_process_and_prints_json(tmp_path: Path, spark: SparkSession) -> None:
    settings = channel_settings(tmp_path)
    ch = FileChannel(**settings)
    expected = put_events(ch, [Event(b"x" * 100, {"timestamp": "1763798400000"}) for _ in range(700)])
    channel_id = ch.channel_id
    ch.close()
    channel_toml = tmp_path / "channel.toml"
    channel_toml.write_text("[channel]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    landing_toml = tmp_path / "landing.toml"
    landing_toml.write_text(f'[landing]\nroot = "{tmp_path / "landing"}"\nmax_events = 300\n'
                            '[spark]\nmaster = "local[2]"\n')
    result = CliRunner().invoke(main, ["land", "--conf", str(landing_toml), "--channel", "events",
                                       "--channel-conf", str(channel_toml), "--drain", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)  # stderr says where it takes from
    assert document["totals"]["events"] == 700
    assert sorted(r["events"] for r in document["runs"] if r["taken"]) == [100, 300, 300]
    assert document["totals"]["backlog_after"] == 0 and document["totals"]["files"] >= 3
    assert_landed_exactly_once(read_landed(tmp_path / "landing", "events"), expected, channel_id)
    assert spark.range(3).count() == 3  # the CLI left the shared session running


@pytest.mark.parametrize("overlap", [True, False])
def test_land_until_empty_with_two_batches_in_flight(tmp_path: Path, channel: FileChannel, spark: SparkSession,
                                                     overlap: bool) -> None:
    expected = put_events(channel, make_events(2300))
    root = tmp_path / "landing"
    results = land_until_empty(InProcessSource(channel, "events"), landing_config(root, max_events=500), spark,
                               overlap=overlap)
    assert sum(r.events for r in results) == 2300 and len(channel) == 0
    assert sorted(r.events for r in results if r.taken) == [300, 500, 500, 500, 500]
    assert_landed_exactly_once(read_landed(root, "events"), expected, channel.channel_id)
    assert manifest_counts(root, "events") == 2300 and staging_leftovers(root, "events") == []
