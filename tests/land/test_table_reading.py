"""The table layer's reader (land/tables/reading.py) on real Delta and Iceberg tables: the batch
commits and batch numbers the table records, the current files per partition, the event ids,
one partition, and time travel to the version a batch produced (what the checks, the
maintenance and a user call). Compared with what the landing returned and with each format's
own library."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.land import InProcessSource, LandingResult, land_once
from ingest_toolkit.land.tables.reading import files_per_partition, history_complete, open_reader

from .helpers import channel_settings, make_events, put_events
from .tables import FORMATS, format_config, read_table


@pytest.fixture(params=FORMATS)
def table_format(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _land(tmp_path: Path, table_format: str, batches: int = 3) -> tuple[list[LandingResult], str, Path]:
    config = format_config(tmp_path / "landing", table_format, max_events=400)
    with FileChannel(**channel_settings(tmp_path)) as channel:
        put_events(channel, make_events(1000))
        results = [land_once(InProcessSource(channel, "events"), config, None) for _ in range(batches)]
        return results, channel.channel_id.hex(), tmp_path / "landing"


def test_the_reader_gives_the_commits_numbers_files_and_versions_the_landing_made(
        tmp_path: Path, table_format: str) -> None:
    results, channel_id, _root = _land(tmp_path, table_format)
    config = format_config(tmp_path / "landing", table_format)
    reader = open_reader(config, "events")
    assert reader.format == table_format and reader.uri == results[-1].table_uri
    assert reader.version() == results[-1].table_version
    commits = reader.commits()
    assert [(c.batch_id, c.batch_number, c.events, c.channel_id) for c in commits] == [
        (r.batch_id, r.batch_number, r.events, channel_id) for r in results]
    assert [c.version for c in commits] == [r.table_version for r in results]
    assert reader.batch_number(channel_id) == 3 and reader.batch_number("00" * 16) == 0
    assert history_complete(commits, channel_id, 3)
    files = reader.files()
    assert sum(f.rows for f in files) == 1000 and len(files) == sum(r.files for r in results)
    per_partition = files_per_partition(files)
    assert set(per_partition) == {p for r in results for p in r.partitions}
    ids = [i for _p, chunk in reader.event_ids() for i in chunk.to_pylist()]
    assert sorted(ids) == sorted(read_table(config, "events").column("event_id").to_pylist())
    hour = max(per_partition, key=lambda p: per_partition[p])
    one = reader.read(partition=hour, columns=["event_id", "event_date", "event_hour"])
    assert one.num_rows == sum(f.rows for f in files if f.partition == hour)
    hours = zip(one.column("event_date").to_pylist(), one.column("event_hour").to_pylist(), strict=True)
    assert {f"event_date={d}/event_hour={h}" for d, h in hours} == {hour}


def test_time_travel_to_the_version_a_batch_produced(tmp_path: Path, table_format: str) -> None:
    results, _channel_id, _root = _land(tmp_path, table_format)
    reader = open_reader(format_config(tmp_path / "landing", table_format), "events")
    version = reader.version_of_batch(str(results[1].batch_id))
    assert version == results[1].table_version
    as_of = reader.read(version=version, columns=["batch_id"])
    assert sorted(set(as_of.column("batch_id").to_pylist())) == sorted([results[0].batch_id, results[1].batch_id])
    assert as_of.num_rows == 800 and reader.read().num_rows == 1000
    assert reader.version_of_batch("no-such-batch") is None


def test_an_absent_table_reads_as_empty(tmp_path: Path, table_format: str) -> None:
    reader = open_reader(format_config(tmp_path / "landing", table_format), "events")
    assert reader.version() is None and reader.commits() == [] and reader.files() == []
    assert list(reader.event_ids()) == [] and reader.batch_number("ab" * 16) == 0
