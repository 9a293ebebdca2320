"""The landed-table checks on real Delta and Iceberg tables landed from a real channel (no Spark,
no orchestrator): events landed = events taken from the table's own records, no duplicate event
ids in the current version (files outside it are not rows), the last table version carries the
last batch, files per partition (WARN), and the landing's summary naming the table version."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from ingest_toolkit.land.config import LandingConfig, load_landing_config
from ingest_toolkit.land.manifest import MANIFEST_DIR, Manifest, ManifestFile
from ingest_toolkit.land.tables.maintain import maintain_table
from ingest_toolkit.land.tables.reading import open_reader
from ingest_toolkit.orchestrate.data_checks import (
    LastLanding,
    landed_files_per_partition,
    landed_no_duplicate_event_ids,
    landed_reconciles,
)
from ingest_toolkit.orchestrate.landing import land, landing_metadata
from ingest_toolkit.orchestrate.verdict import Severity

from .helpers import Setup, events_at, fill, hour_ms, make_setup

FORMATS = ("delta", "iceberg")
T08 = hour_ms("2026-11-20T08:00:00+00:00")


@pytest.fixture(params=FORMATS)
def table_format(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _no_spark() -> None:
    raise AssertionError("a Delta or Iceberg table is read by its own library, without Spark")


def _setup(tmp_path: Path, table_format: str, events: int = 300, step_ms: int = 30_000,
           **settings: object) -> tuple[Setup, LandingConfig]:
    setup = make_setup(tmp_path, **settings)
    landing = setup.conf / "landing.toml"
    catalog = f'iceberg_catalog = "sqlite:///{tmp_path}/catalog.db"\n' if table_format == "iceberg" else ""
    landing.write_text(landing.read_text().replace("max_events = 1000\n", "max_events = 100\n"
                                                   f'format = "{table_format}"\n{catalog}'))
    channel = setup.open()
    fill(channel, events_at(events, T08, step_ms=step_ms))  # 300 events: 08:00 .. 10:29 UTC
    channel.close()
    return setup, load_landing_config(landing)


def _land(setup: Setup, config: LandingConfig, batches: int = 3) -> dict[str, object]:
    run = land(setup.spec, config, _no_spark, batches=batches)  # type: ignore[arg-type]
    return landing_metadata(run, config.root, setup.spec.name)


def test_every_landed_check_passes_on_a_consistent_table(tmp_path: Path, table_format: str) -> None:
    setup, config = _setup(tmp_path, table_format)
    landed = _land(setup, config)
    assert landed["format"] == table_format and landed["batch_number"] == 3 and landed["last_batch_events"] == 100
    reader = open_reader(config, "events")
    assert int(str(landed["table_version"])) == reader.version() and landed["table_uri"] == reader.uri
    assert len(landed["table_versions"]) == 3  # type: ignore[arg-type]
    last = LastLanding.from_metadata(landed)
    reconciled = landed_reconciles(setup.spec, setup.settings, config, _no_spark, last=last)
    assert reconciled.passed, reconciled.description
    assert reconciled.description == ("300 rows of the channel in the " + table_format + " table = takes committed "
                                      "by the channel; every batch commit's events = its rows; batch number 3 = "
                                      "the newest commit's")
    meta = reconciled.metadata
    assert (meta["format"], meta["landed_rows"], meta["commit_batches"], meta["commit_events"]) == (
        table_format, 300, 3, 300)
    assert (meta["takes_committed"], meta["batch_number"], meta["last_landing_batch"]) == (300, 3, 3)
    unique = landed_no_duplicate_event_ids(setup.spec, setup.settings, config.root, _no_spark, landing=config)
    assert unique.passed and unique.metadata["rows"] == 300 and unique.metadata["format"] == table_format
    files = landed_files_per_partition(setup.spec, setup.settings, config, _no_spark)
    assert files.passed and files.severity == Severity.WARN and files.metadata["partitions"] == 3


def test_files_no_commit_names_are_not_rows(tmp_path: Path, table_format: str) -> None:
    """A crashed landing's file in the table's directory: a directory scan would count it twice,
    the checks read the current version only."""
    setup, config = _setup(tmp_path, table_format)
    _land(setup, config)
    reader = open_reader(config, "events")
    first = Path(reader.files()[0].uri.removeprefix("file://"))
    (first.parent / "crashed-landing.parquet").write_bytes(first.read_bytes())
    assert landed_no_duplicate_event_ids(setup.spec, setup.settings, config.root, _no_spark, landing=config).passed
    assert landed_reconciles(setup.spec, setup.settings, config, _no_spark).passed


def test_a_foreign_take_and_duplicated_rows_fail_with_the_numbers(tmp_path: Path, table_format: str) -> None:
    setup, config = _setup(tmp_path, table_format)
    _land(setup, config, batches=2)
    channel = setup.open()
    with channel.transaction() as tx:  # another consumer takes 100 events: they never land
        tx.take(100)
    channel.close()
    taken = landed_reconciles(setup.spec, setup.settings, config, _no_spark)
    assert not taken.passed and taken.severity == Severity.ERROR
    assert "the channel committed takes of 300 events (checkpoint.meta" in taken.description
    assert "the table holds 200 rows of the channel" in taken.description
    _append_copy(config, open_reader(config, "events").read(columns=None).slice(0, 7))
    duplicated = landed_no_duplicate_event_ids(setup.spec, setup.settings, config.root, _no_spark, landing=config)
    assert not duplicated.passed and duplicated.metadata["extra_rows"] == 7
    assert duplicated.description == f"landed table ({table_format}): 7 event_ids occur more than once (7 extra rows)"
    reconciled = landed_reconciles(setup.spec, setup.settings, config, _no_spark)
    assert "record 200 events but the table holds 207 rows of it" in reconciled.description


def _append_copy(config: LandingConfig, rows: pa.Table) -> None:
    """Rows appended behind the landing's back (a copy made by hand), as a plain commit."""
    reader = open_reader(config, "events")
    if config.format == "delta":
        from deltalake import write_deltalake

        write_deltalake(reader.table(), rows, mode="append")  # type: ignore[attr-defined]
    else:
        reader.table().append(rows)  # type: ignore[attr-defined]


def test_the_last_table_version_must_carry_the_last_landing(tmp_path: Path, table_format: str) -> None:
    setup, config = _setup(tmp_path, table_format)
    landed = _land(setup, config)
    last = LastLanding.from_metadata(landed)
    assert last is not None
    ahead = LastLanding(last.batch_id, last.batch_number + 1, last.events)  # a landing the table lost
    verdict = landed_reconciles(setup.spec, setup.settings, config, _no_spark, last=ahead)
    assert not verdict.passed
    assert f"the last landing committed batch 4 ({last.batch_id}) but the table records batch number 3" in \
        verdict.description
    wrong = LastLanding(last.batch_id, last.batch_number, last.events + 5)
    assert "with 100 events; the landing reported batch 3 with 105" in landed_reconciles(
        setup.spec, setup.settings, config, _no_spark, last=wrong).description


def test_after_retention_trims_the_history_the_rows_still_reconcile(tmp_path: Path, table_format: str) -> None:
    setup, config = _setup(tmp_path, table_format)
    landed = _land(setup, config)
    maintain_table(config, "events", retention_hours=0, allow_short_window=True)
    verdict = landed_reconciles(setup.spec, setup.settings, config, _no_spark, last=LastLanding.from_metadata(landed))
    assert verdict.passed, verdict.description
    if table_format == "iceberg":  # the batches' snapshots are expired; their numbers are not
        assert verdict.metadata["history_complete"] is False and verdict.metadata["commit_batches"] == 0
        assert "older batch commits trimmed by retention: commit events not compared" in verdict.description
    assert verdict.metadata["batch_number"] == 3 and verdict.metadata["landed_rows"] == 300


def test_files_per_partition_warns_above_the_limit_and_passes_after_compaction(tmp_path: Path,
                                                                                table_format: str) -> None:
    setup, config = _setup(tmp_path, table_format, events=600, step_ms=5_000, max_files_per_partition=2)
    _land(setup, config, batches=6)
    crowded = landed_files_per_partition(setup.spec, setup.settings, config, _no_spark)
    assert not crowded.passed and crowded.severity == Severity.WARN
    assert crowded.description.startswith(f"{table_format} table: ") and "run the maintenance" in \
        crowded.description
    assert crowded.metadata["max_files_in_a_partition"] > 2 and crowded.metadata["crowded_partitions"]
    maintain_table(config, "events")
    after = landed_files_per_partition(setup.spec, setup.settings, config, _no_spark)
    assert after.passed and after.metadata["max_files_in_a_partition"] == 1


def test_files_per_partition_of_a_parquet_table_counts_its_manifests(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, max_files_per_partition=1)
    table = setup.root / "landing" / "events"
    hour = "event_date=2026-11-20/event_hour=08"
    files = tuple(ManifestFile(f"{hour}/part-{n}.parquet", 10, "_staging/b1", rows=5) for n in range(3))
    manifest = Manifest(channel="events", channel_id="ab" * 16, batch_id="b1", seq_ranges=((1, 15),), count=15,
                        files=files, created="2026-11-20T08:30:00Z", partitions=(hour,), commit=1)
    (table / MANIFEST_DIR).mkdir(parents=True)
    (table / MANIFEST_DIR / manifest.name).write_text(json.dumps(manifest.to_json()))
    verdict = landed_files_per_partition(setup.spec, setup.settings, load_landing_config(setup.conf / "landing.toml"),
                                         _no_spark)
    assert not verdict.passed and verdict.metadata["crowded_partitions"] == {hour: 3}
    assert verdict.description.startswith("parquet table: 1 partitions hold more than 1 data files")
