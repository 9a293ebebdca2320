"""Maintenance of Delta and Iceberg landed tables (land/tables/maintain.py): compaction of small
files and retention never break exactly-once. A batch landed before its take committed is still
recognised after compaction and retention (the batch numbers live in the Delta app transaction
and the Iceberg property, which survive vacuum and snapshot expiry); a reader at an older version
within the window still reads it; files no commit names are deleted only once older than the
window; a window below the floor is refused; a compaction racing with landings loses no row."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.errors import ConfigError
from ingest_toolkit.land import InProcessSource, land_once
from ingest_toolkit.land.errors import LandingError, MaintenanceConflict
from ingest_toolkit.land.tables.maintain import maintain_table, retention_floor_hours
from ingest_toolkit.land.tables.reading import files_per_partition, open_reader

from .helpers import assert_landed_exactly_once, channel_settings, make_events, put_events
from .tables import FORMATS, batch_numbers, format_config, read_table


@pytest.fixture(params=FORMATS)
def table_format(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _fail(*_args: object, **_kwargs: object) -> None:
    raise OSError("the take's commit was lost")


def test_compaction_leaves_one_file_per_partition_and_the_rows_and_old_versions_alone(
        tmp_path: Path, table_format: str) -> None:
    config = format_config(tmp_path / "landing", table_format, max_events=100)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        expected = put_events(channel, make_events(1000))
        results = [land_once(InProcessSource(channel, "events"), config, None) for _ in range(10)]
        channel_id = channel.channel_id
    reader = open_reader(config, "events")
    before = files_per_partition(reader.files())
    assert max(before.values()) == 10  # one small file per batch in every hour
    old = reader.read(version=results[4].table_version).num_rows
    done = maintain_table(config, "events")  # the default window: 7 days
    assert done.retention_hours == 168 and done.partitions_compacted == len(before)
    assert (done.files_before, done.max_files_per_partition_before) == (sum(before.values()), 10)
    assert done.files_after == len(before) and done.max_files_per_partition_after == 1
    assert files_per_partition(reader.files()) == dict.fromkeys(before, 1)
    assert_landed_exactly_once(read_table(config, "events"), expected, channel_id)
    assert batch_numbers(config, "events", channel_id) == 10
    assert reader.read(version=results[4].table_version).num_rows == old == 500  # within the window
    assert done.files_deleted == 0 and done.snapshots_expired == 0  # nothing is older than 7 days
    assert len(reader.commits()) == 10  # the maintenance's commits are not batches


def test_a_redelivered_batch_is_recognised_after_compaction_and_retention(
        tmp_path: Path, table_format: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table commit made, the take's commit lost; then the table is compacted and everything
    older than a zero window removed (old versions, history); the retry still finds the batch."""
    config = format_config(tmp_path / "landing", table_format, max_events=300)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        expected = put_events(channel, make_events(900))
        for _ in range(2):
            land_once(InProcessSource(channel, "events"), config, None)
        source = InProcessSource(channel, "events")
        real, takes = source.open_take, []

        def take_that_cannot_commit(n: int):  # type: ignore[no-untyped-def]
            take = real(n)
            takes.append(take)
            take.commit = _fail  # type: ignore[method-assign]
            return take

        monkeypatch.setattr(source, "open_take", take_that_cannot_commit)
        with pytest.raises(LandingError, match="committing the take failed"):
            land_once(source, config, None)
        monkeypatch.undo()
        takes[0].rollback()
        done = maintain_table(config, "events", retention_hours=0, allow_short_window=True)
        assert done.max_files_per_partition_after == 1 and done.files_deleted > 0
        reader = open_reader(config, "events")
        assert batch_numbers(config, "events", channel.channel_id) == 3
        again = land_once(InProcessSource(channel, "events"), config, None)
        assert (again.events, again.redelivered, again.batch_id) == (0, 300, None)
        assert len(channel) == 0
        assert_landed_exactly_once(read_table(config, "events"), expected, channel.channel_id)
        if table_format == "iceberg":  # the snapshots of the batches are gone, their number is not
            assert reader.commits() == [] and done.snapshots_expired > 0


def test_retention_deletes_unreferenced_files_only_once_older_than_the_window(
        tmp_path: Path, table_format: str) -> None:
    """A crashed landing's file older than the window goes; one younger (a landing still writing)
    stays, and so does every file the current version names."""
    config = format_config(tmp_path / "landing", table_format, max_events=200)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        expected = put_events(channel, make_events(400))
        for _ in range(2):
            land_once(InProcessSource(channel, "events"), config, None)
        channel_id = channel.channel_id
    reader = open_reader(config, "events")
    directory = Path(reader.files()[0].uri.removeprefix("file://")).parent
    stale, fresh = directory / "crashed-landing.parquet", directory / "landing-in-flight.parquet"
    for orphan in (stale, fresh):
        orphan.write_bytes(b"PAR1 not committed PAR1")
    eight_days_ago = time.time() - 8 * 24 * 3600
    os.utime(stale, (eight_days_ago, eight_days_ago))
    done = maintain_table(config, "events", compact=False)
    assert not stale.exists() and fresh.exists() and done.files_deleted == 1
    assert_landed_exactly_once(read_table(config, "events"), expected, channel_id)


def test_a_window_below_the_floor_is_refused(tmp_path: Path) -> None:
    config = format_config(tmp_path / "landing", "delta", lease_seconds=600, lease_renewal_max_seconds=7200)
    assert retention_floor_hours(config) == pytest.approx(7800 / 3600)
    with pytest.raises(ConfigError, match="shorter than the floor of 2.16667 h") as refused:
        maintain_table(config, "events", retention_hours=2)
    assert refused.value.key == "landing.retention_hours"
    quick = format_config(tmp_path / "landing", "delta", lease_seconds=60, lease_renewal_max_seconds=0)
    assert retention_floor_hours(quick) == 1.0  # never below an hour
    with pytest.raises(ConfigError, match="plain Parquet"):
        maintain_table(format_config(tmp_path / "landing", "parquet"), "events")


def test_compaction_racing_with_landings_loses_and_duplicates_nothing(tmp_path: Path, table_format: str) -> None:
    """Landings and compactions at once (no pool keeps them apart here): a commit that loses the
    race is refused by the table and tried again by its side; every event once, in order of batch
    numbers."""
    config = format_config(tmp_path / "landing", table_format, max_events=100)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        expected = put_events(channel, make_events(1200))
        for _ in range(3):
            land_once(InProcessSource(channel, "events"), config, None)
        errors: list[BaseException] = []
        outcomes: list[str] = []
        stop = threading.Event()

        def compactor() -> None:
            while not stop.is_set():
                try:
                    maintain_table(config, "events", retain=False)
                    outcomes.append("compacted")
                except MaintenanceConflict:  # lost to the landings on every attempt: nothing committed
                    outcomes.append("gave up")
                except BaseException as err:  # reported below
                    errors.append(err)
                    return

        thread = threading.Thread(target=compactor)
        thread.start()
        try:
            while len(channel):
                land_once(InProcessSource(channel, "events"), config, None)
        finally:
            stop.set()
            thread.join(timeout=120)
        assert not errors, errors
        assert outcomes, "the compactor never ran while the landings did"
        maintain_table(config, "events", retain=False)
        assert_landed_exactly_once(read_table(config, "events"), expected, channel.channel_id)
        assert batch_numbers(config, "events", channel.channel_id) == 12


def test_an_iceberg_compaction_that_read_a_stale_snapshot_commits_nothing(tmp_path: Path) -> None:
    """The compaction reads a partition, a landing commits into the table, the compaction's
    overwrite is refused (the snapshot it read is no longer the head) and the table is unchanged."""
    from pyiceberg.exceptions import CommitFailedException

    from ingest_toolkit.land.tables.iceberg_maintain import rewrite_partition

    config = format_config(tmp_path / "landing", "iceberg", max_events=100)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        expected = put_events(channel, make_events(400))
        for _ in range(3):
            land_once(InProcessSource(channel, "events"), config, None)
        reader = open_reader(config, "events")
        stale = reader.landed.load()  # type: ignore[attr-defined]
        land_once(InProcessSource(channel, "events"), config, None)  # the head moves
        partition = next(iter(files_per_partition(reader.files())))
        version = reader.version()
        with pytest.raises(CommitFailedException):
            rewrite_partition(stale, partition)
        assert reader.version() == version
        assert_landed_exactly_once(read_table(config, "events"), expected, channel.channel_id)
