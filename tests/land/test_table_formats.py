"""Landing into Delta Lake and Iceberg tables (issue 29), in-process and without Spark: exactly
once through the table's own commit, a redelivered batch recognised and only its take committed,
a failed write rolled back, two landings racing for the same events, two channels sharing one
table, time travel to a batch's version. Read back with each format's own library."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.land import InProcessSource, land_once
from ingest_toolkit.land.batches import build_table, seq_ranges
from ingest_toolkit.land.errors import CommitConflict, LandingError
from ingest_toolkit.land.tables import Batch, open_landed

from .helpers import assert_landed_exactly_once, channel_settings, make_events, put_events
from .tables import FORMATS, batch_numbers, committed_batches, format_config, read_table, whole_batches


@pytest.fixture(params=FORMATS)
def table_format(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_lands_exactly_once_with_one_commit_per_batch(tmp_path: Path, table_format: str) -> None:
    config = format_config(tmp_path / "landing", table_format, max_events=400)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        expected = put_events(channel, make_events(1000))
        results = [land_once(InProcessSource(channel, "events"), config, None) for _ in range(3)]
        assert len(channel) == 0
        channel_id = channel.channel_id
    assert [r.events for r in results] == [400, 400, 200] and {r.format for r in results} == {table_format}
    assert [r.batch_number for r in results] == [1, 2, 3] and results[0].manifest_uri is None
    assert all(r.files > 0 and r.bytes > 0 and r.partitions for r in results)
    rows = read_table(config, "events")
    assert_landed_exactly_once(rows, expected, channel_id)
    batches = committed_batches(config, "events")
    assert batches == {r.batch_id: r.events for r in results}
    whole_batches(rows, batches)
    assert batch_numbers(config, "events", channel_id) == 3
    first = read_table(config, "events", version=results[0].table_version)  # time travel to batch 1
    assert sorted(first.column("batch_id").unique().to_pylist()) == [results[0].batch_id]


def test_a_batch_landed_before_its_take_committed_is_recognised_not_written_again(
        tmp_path: Path, table_format: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash between the table commit and the take commit: the next run finds the batch in the
    table, writes nothing and commits the take."""
    config = format_config(tmp_path / "landing", table_format, max_events=300)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        expected = put_events(channel, make_events(300))
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
        takes[0].rollback()  # what the channel's recovery does when the landing process dies here
        assert len(channel) == 300
        again = land_once(InProcessSource(channel, "events"), config, None)
        assert (again.events, again.redelivered, again.taken, again.batch_id) == (0, 300, 300, None)
        assert len(channel) == 0
        assert_landed_exactly_once(read_table(config, "events"), expected, channel.channel_id)
    assert len(committed_batches(config, "events")) == 1


def test_a_failed_write_rolls_the_take_back_and_commits_nothing(tmp_path: Path, table_format: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    config = format_config(tmp_path / "landing", table_format, max_events=200)
    module = "ingest_toolkit.land.tables.delta" if table_format == "delta" else "pyiceberg.table.Transaction"
    with FileChannel(**channel_settings(tmp_path)) as channel:
        put_events(channel, make_events(200))
        if table_format == "delta":
            monkeypatch.setattr(f"{module}.DeltaLanded._write", _fail)
        else:
            monkeypatch.setattr(f"{module}.append", _fail)
        with pytest.raises(LandingError) as failed:
            land_once(InProcessSource(channel, "events"), config, None)
        assert failed.value.rolled_back and "disk on fire" in str(failed.value)
        assert len(channel) == 200
    assert read_table(config, "events").num_rows == 0


def _fail(*_args: object, **_kwargs: object) -> None:
    raise OSError("disk on fire")


def _batch(channel_id: bytes, first: int, n: int, batch_id: str) -> Batch:
    from ingest_toolkit.channel import Event

    rows = build_table([Event(b"e%d" % s, {}, s) for s in range(first, first + n)], channel_id=channel_id,
                       batch_id=batch_id, ingest_time_us=time.time_ns() // 1000)
    return Batch("events", channel_id, batch_id, rows, tuple(seq_ranges(rows.column("seq").combine_chunks())))


def test_two_landings_racing_for_the_same_events_commit_them_once(tmp_path: Path, table_format: str) -> None:
    """A remote take whose lease ran out while it wrote, and the landing that took its events
    again: both reach the commit with overlapping seqs; exactly one commits, the other gets
    CommitConflict and writes nothing the readers see. A third, disjoint batch of the same
    channel racing with them commits too."""
    config = format_config(tmp_path / "landing", table_format)
    channel_id = bytes(range(16))
    batches = [_batch(channel_id, 1000, 300, "a"), _batch(channel_id, 1100, 300, "b"),
               _batch(channel_id, 5000, 50, "c")]
    outcomes: dict[str, str] = {}
    start = threading.Barrier(3)

    def land(batch: Batch) -> None:
        table = open_landed(config, "events")
        landed = table.landed(channel_id, batch.seq_ranges[0][0], batch.seq_ranges[-1][1])
        start.wait(timeout=30)
        try:
            table.commit(batch, landed, phase=lambda _p: None, before_commit=lambda: None)
            outcomes[batch.batch_id] = "committed"
        except CommitConflict:
            outcomes[batch.batch_id] = "conflict"

    threads = [threading.Thread(target=land, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(outcomes[b] for b in ("a", "b")) == ["committed", "conflict"] and outcomes["c"] == "committed"
    seqs = read_table(config, "events").column("seq").to_pylist()
    assert len(seqs) == len(set(seqs)) == 350
    assert batch_numbers(config, "events", channel_id) == 2


def test_two_channels_of_one_name_share_one_table(tmp_path: Path, table_format: str) -> None:
    """Aggregators of a fleet: their commits never conflict (other app ids), their events never
    collide (event ids carry the channel), each channel has its own batch numbers."""
    config = format_config(tmp_path / "landing", table_format, max_events=250)
    channels = [FileChannel(**channel_settings(tmp_path / host)) for host in ("agg1", "agg2")]
    try:
        expected = [put_events(ch, make_events(500)) for ch in channels]
        errors: list[BaseException] = []

        def lander(channel: FileChannel) -> None:
            try:
                for _ in range(2):
                    land_once(InProcessSource(channel, "events"), config, None)
            except BaseException as err:  # reported below
                errors.append(err)

        threads = [threading.Thread(target=lander, args=(ch,)) for ch in channels]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        rows = read_table(config, "events")
        for channel, wanted in zip(channels, expected, strict=True):
            prefix = channel.channel_id.hex()
            mine = rows.filter([e.startswith(prefix) for e in rows.column("event_id").to_pylist()])
            assert_landed_exactly_once(mine, wanted, channel.channel_id)
            assert batch_numbers(config, "events", channel.channel_id) == 2
    finally:
        for channel in channels:
            channel.close()


def test_a_drain_lands_batch_after_batch_without_orphan_files(tmp_path: Path, table_format: str) -> None:
    """``land --drain`` (land_until_empty, two in flight for Spark) writes Delta and Iceberg batches one
    after another: no two commits of the channel race, so no batch writes its files twice."""
    from ingest_toolkit.land import land_until_empty
    from ingest_toolkit.land.tables.reading import open_reader

    config = format_config(tmp_path / "landing", table_format, max_events=250)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        expected = put_events(channel, make_events(2000))
        results = land_until_empty(InProcessSource(channel, "events"), config, None, overlap=True)
        assert len(channel) == 0 and [r.batch_number for r in results] == list(range(1, 9))
        assert_landed_exactly_once(read_table(config, "events"), expected, channel.channel_id)
    data = tmp_path / "landing" / "events"
    on_disk = [p for p in data.rglob("*.parquet") if "metadata" not in p.parts]
    assert len(on_disk) == len(open_reader(config, "events").files())


def test_a_channel_directory_holds_one_format(tmp_path: Path, table_format: str) -> None:
    """``--format`` changed with the root kept: refused before anything is taken, naming the table
    that is there (its files would otherwise mix into the other table's partitions)."""
    from ingest_toolkit.errors import ConfigError

    config = format_config(tmp_path / "landing", table_format, max_events=100)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        put_events(channel, make_events(200))
        land_once(InProcessSource(channel, "events"), config, None)
        for other in ("iceberg" if table_format == "delta" else "delta", "parquet"):  # parquet: before Spark
            with pytest.raises(LandingError, match=f"holds a {table_format} table") as refused:
                land_once(InProcessSource(channel, "events"), format_config(tmp_path / "landing", other), None)
            assert isinstance(refused.value.__cause__, ConfigError) and refused.value.rolled_back
        assert len(channel) == 100
