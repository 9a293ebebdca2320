"""The curated table's verdicts (no Spark, no orchestrator): every landed hour curated, schema
drift, rescued data, discarded rows, duplicate event ids."""

from __future__ import annotations

from pathlib import Path

import pendulum
import pyarrow as pa
import pyarrow.parquet as pq

from ingest_toolkit.land.config import load_landing_config
from ingest_toolkit.orchestrate.curated_checks import (
    curated_covers_landed,
    curated_no_duplicate_event_ids,
    curated_rescued_below_threshold,
    curated_rows_discarded,
    curated_schema_drift,
)
from ingest_toolkit.orchestrate.verdict import Severity

from .helpers import make_setup


def _no_spark() -> None:
    raise AssertionError("a local table is read with pyarrow, without Spark")


def _write(table_dir: Path, hour: str, name: str, ids: list[str]) -> None:
    (table_dir / hour).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"event_id": ids}), table_dir / hour / name)


def _hour(window: str, rows: int, **counts: object) -> dict[str, object]:
    return {"window_utc": window, "rows": rows, "parser": "json", "columns": 3, "columns_added": [],
            "rescued_rows": 0, "discarded_rows": 0, "unparsed_rows": 0, **counts}


def test_curated_duplicates_are_judged_on_the_curated_root(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    _write(setup.root / "curated" / "events", "event_date=2026-11-20/event_hour=08", "part-0.parquet", ["a", "b", "a"])
    config = load_landing_config(setup.conf / "landing.toml")
    verdict = curated_no_duplicate_event_ids(setup.spec, setup.settings, config, f"{setup.root}/curated/", _no_spark)
    assert not verdict.passed and verdict.check == "curated_no_duplicate_event_ids"
    assert verdict.description == "curated table: 1 event_ids occur more than once (1 extra rows)"


def test_landed_hours_before_the_first_partition_fail_naming_hours_and_events(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    landed = setup.root / "landing" / "events"
    _write(landed, "event_date=2026-11-20/event_hour=22", "a.parquet", [f"a{i}" for i in range(40)])
    _write(landed, "event_date=2026-11-20/event_hour=23", "b.parquet", [f"b{i}" for i in range(2)])
    _write(landed, "event_date=2026-11-21/event_hour=00", "c.parquet", [f"c{i}" for i in range(5)])
    config = load_landing_config(setup.conf / "landing.toml")
    covered = curated_covers_landed(setup.spec, setup.settings, config, pendulum.datetime(2026, 11, 20, 22), _no_spark)
    assert covered.passed and covered.metadata["landed_hours"] == 3
    late = curated_covers_landed(setup.spec, setup.settings, config, pendulum.datetime(2026, 11, 21), _no_spark)
    assert not late.passed and late.severity == Severity.ERROR
    assert late.metadata["hours_before_first_partition"] == 2 and late.metadata["events_before_first_partition"] == 42
    assert "2026-11-20T22:00:00+00:00 (40 events), 2026-11-20T23:00:00+00:00 (2 events)" in late.description
    assert 'partitions_start = "2026-11-20-22:00"' in late.description, late.description


def test_schema_drift_warns_naming_the_new_columns(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    quiet = curated_schema_drift(setup.spec, setup.settings, [_hour("08", 10)])
    assert quiet.passed
    drift = curated_schema_drift(setup.spec, setup.settings, [
        _hour("08", 10), _hour("09", 10, columns_added=["user__plan", "late"])])
    assert not drift.passed and drift.severity == Severity.WARN
    assert "added 2 columns: late, user__plan (first in hour 09)" in drift.description
    assert curated_schema_drift(setup.spec, setup.settings, []).passed
    created = curated_schema_drift(setup.spec, setup.settings, [_hour("08", 10, columns_added=["a"],
                                                                      schema_created=True)])
    assert created.passed  # the build that creates the table adds its first columns: not drift
    latest = curated_schema_drift(setup.spec, setup.settings, [_hour("09", 3, columns_added=["b"])],
                                  "of the 1 most recently built partitions (their latest build)")
    assert "the hours of the 1 most recently built partitions (their latest build) added 1 columns: b" in \
        latest.description


def test_rescued_share_above_the_threshold_fails_with_the_worst_hour(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)  # rescued_max_share: 0.01
    fine = curated_rescued_below_threshold(setup.spec, setup.settings, [_hour("08", 1000, rescued_rows=10)])
    assert fine.passed and fine.metadata["rescued_share"] == 0.01
    bad = curated_rescued_below_threshold(setup.spec, setup.settings, [
        _hour("08", 1000, rescued_rows=10), _hour("09", 100, rescued_rows=30, unparsed_rows=30)])
    assert not bad.passed and bad.severity == Severity.ERROR and bad.metadata["hours_over"] == 1
    assert "the worst 09: 30 of 100 rows; 30 bodies did not parse with parser \"json\"" in bad.description
    lenient = make_setup(tmp_path / "lenient", curated={"rescued_max_share": 0.5})
    assert curated_rescued_below_threshold(lenient.spec, lenient.settings, [_hour("09", 100, rescued_rows=30)]).passed


def test_discarded_rows_warn(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    assert curated_rows_discarded(setup.spec, setup.settings, [_hour("08", 10)]).passed
    dropped = curated_rows_discarded(setup.spec, setup.settings, [_hour("08", 10, discarded_rows=4)])
    assert not dropped.passed and dropped.severity == Severity.WARN and dropped.metadata["discarded_rows"] == 4
    assert "dropped 4 rows in the hours built by this run: 08 (4 rows)" in dropped.description
