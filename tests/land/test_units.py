"""The landing's pure parts, without Spark: Arrow columns, seq ranges, configuration, manifests,
storage moves and the recovery of interrupted runs (on the local file system via pyarrow.fs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.columnar import ArrowColumns
from ingest_toolkit.errors import ConfigError, IngestError
from ingest_toolkit.land import (
    InProcessSource,
    LandingConfig,
    LandingError,
    build_table,
    event_id,
    load_landing_config,
)
from ingest_toolkit.land.batches import LANDED_SCHEMA, event_ids, first_values, landed_mask, seq_ranges

from .helpers import BASE_MILLIS, channel_settings, make_events, put_events

CID = bytes(range(16))


def test_event_id_is_channel_identity_plus_zero_padded_seq() -> None:
    assert event_id(CID, 42) == "000102030405060708090a0b0c0d0e0f-00000000000000000042"
    seqs = pa.array([1, 1_795_335_954_286_269, 2**63 - 1], pa.int64())
    assert event_ids(CID, seqs).to_pylist() == [event_id(CID, s) for s in seqs.to_pylist()]
    with pytest.raises(ValueError):
        event_id(b"short", 1)


def test_build_table_columns_event_time_and_partitions() -> None:
    events = [Event(b"a", {"timestamp": str(BASE_MILLIS + 16 * 3_600_000 - 1), "k": "v"}, seq=10),  # 23:59:59.999
              Event(b"b", {}, seq=11),
              Event(b"c", {"timestamp": "12x"}, seq=12),
              Event(b"", {"timestamp": "9" * 16}, seq=14)]
    ingest_us = (BASE_MILLIS + 3_600_000) * 1000  # 09:00Z
    table = build_table(events, channel_id=CID, batch_id="b1", ingest_time_us=ingest_us)
    rows = table.to_pylist()
    assert [r["seq"] for r in rows] == [10, 11, 12, 14]
    assert [r["body"] for r in rows] == [b"a", b"b", b"c", b""]
    assert rows[0]["headers"] == [("timestamp", str(BASE_MILLIS + 16 * 3_600_000 - 1)), ("k", "v")]
    assert rows[1]["headers"] == []  # empty map, not null
    assert [r["event_date"] for r in rows] == ["2025-11-22"] * 4
    assert [r["event_hour"] for r in rows] == ["23", "09", "09", "09"]  # bad or absurd timestamps -> ingest time
    assert rows[0]["event_time"].isoformat() == "2025-11-22T23:59:59.999000+00:00"
    assert {r["batch_id"] for r in rows} == {"b1"}
    assert rows[2]["ingest_time"] == rows[2]["event_time"]
    assert table.schema.field("headers").type == pa.map_(pa.string(), pa.string())


@given(st.lists(st.integers(min_value=-(10**13), max_value=10**14), min_size=1, max_size=200))
def test_partition_columns_match_formatting_every_row(millis: list[int]) -> None:
    events = [Event(b"x", {"timestamp": str(m)} if m >= 0 else {}, seq=i) for i, m in enumerate(millis)]
    table = build_table(events, channel_id=CID, batch_id="b", ingest_time_us=-123_456_789_000)  # before 1970
    times = table.column("event_time")
    assert table.column("event_date").to_pylist() == pc.strftime(times, format="%Y-%m-%d").to_pylist()
    assert table.column("event_hour").to_pylist() == pc.strftime(times, format="%H").to_pylist()


def test_seq_ranges_merge_gaps_order_and_duplicates() -> None:
    assert seq_ranges(pa.array([], pa.int64())) == []
    assert seq_ranges(pa.array([7], pa.int64())) == [(7, 7)]
    assert seq_ranges(pa.array([5, 3, 4, 10, 11, 4, 20], pa.int64())) == [(3, 5), (10, 11), (20, 20)]
    mask = landed_mask(pa.array([1, 3, 5, 10, 21], pa.int64()), [(3, 5), (20, 30)])
    assert mask.to_pylist() == [False, True, True, False, True]


def test_config_from_toml_with_env_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "landing.toml"
    conf.write_text('[landing]\nroot = "out"\nmax_events = 10\n[spark]\nmaster = "local[1]"\n'
                    '[spark.conf]\n"spark.x" = 3\n"spark.sql.parquet.outputTimestampType" = "INT96"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INGEST_LANDING__MAX_EVENTS", "25")
    monkeypatch.setenv("INGEST_SPARK__MASTER", "spark://127.0.0.1:7077")
    config = load_landing_config(conf)
    assert config.root == (tmp_path / "out").as_uri()
    assert config.max_events == 25 and config.spark.master == "spark://127.0.0.1:7077"
    effective = config.spark.effective_conf()
    assert effective["spark.x"] == "3"
    assert effective["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"  # required, not overridable
    assert LandingConfig.build(root="hdfs://nn:8020/land/").root == "hdfs://nn:8020/land"


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "landing.toml"
    conf.write_text("[landing]\nmax_events = 0\n")  # no [spark] table: defaults
    with pytest.raises(ConfigError) as err:
        load_landing_config(conf)
    assert err.value.key == "landing.max_events"
    conf.write_text('[landing]\n[spark]\nremote = "http://x"\n')
    with pytest.raises(ConfigError) as err:
        load_landing_config(conf)
    assert err.value.key == "spark.remote"
    with pytest.raises(ConfigError):
        load_landing_config(tmp_path / "missing.toml")


def test_in_process_source_caps_takes_at_transaction_capacity(tmp_path: Path) -> None:
    ch = FileChannel(**channel_settings(tmp_path, transaction_capacity=50))
    try:
        expected = put_events(ch, make_events(120), batch=40)
        source = InProcessSource(ch, "ch")
        take = source.open_take(1000)
        assert take.channel_id == ch.channel_id and len(take.events) == 50
        take.rollback()
        assert source.backlog() == 120
        take = source.open_take(1000)
        assert [e.seq for e in take.events] == sorted(expected)[:50]  # back at the head, in order
        take.commit()
        assert source.backlog() == 70
    finally:
        ch.close()


def test_fault_hook_sigkills_the_process_at_its_phase() -> None:
    code = ("from ingest_toolkit.land.faults import fault_point; "
            "fault_point('after_write'); fault_point('x'); print('alive')")
    env = {**os.environ, "INGEST_LAND_FAULT": "x"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert done.returncode == -9 and b"alive" not in done.stdout
    done = subprocess.run([sys.executable, "-c", code], env={**env, "INGEST_LAND_FAULT": ""}, capture_output=True,
                          timeout=60)
    assert done.returncode == 0 and b"alive" in done.stdout


def test_landing_error_is_an_ingest_error() -> None:
    err = LandingError("x", channel="c", phase="p", rolled_back=True)
    assert isinstance(err, IngestError) and err.rolled_back and json.dumps({"phase": err.phase})


def test_gc_pause_nests_and_restores_the_collector_state() -> None:
    import gc

    from ingest_toolkit.land.landing import _gc_paused

    assert gc.isenabled()
    with _gc_paused():
        with _gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with _gc_paused():
            pass
        assert not gc.isenabled()  # was off before: stays off
    finally:
        gc.enable()


def test_build_table_is_the_same_from_an_arrow_take_and_from_columns(tmp_path: Path) -> None:
    """The in-process landing builds the table from ``take_arrow``; the remote path from lists."""
    ch = FileChannel(**channel_settings(tmp_path))
    try:
        put_events(ch, make_events(600) + [Event(b"", {"timestamp": "", "é": "€"}, seq=0)], batch=200)
        with ch.transaction() as tx:  # the events as lists, as a remote take hands them out
            columns = tx.take_columns(1000)
            tx.rollback()
        take = InProcessSource(ch, "ch").open_take(1000)
        arrow = take.columns
        take.rollback()
        assert isinstance(arrow, ArrowColumns)
        built = [build_table(c, channel_id=CID, batch_id="b", ingest_time_us=1_000_000) for c in (columns, arrow)]
        assert built[0].equals(built[1])
        assert built[0].num_rows == 601
        # a take in several chunks (one per run of 4 MiB and more) builds the same table
        chunked = ArrowColumns(pa.Table.from_batches(arrow.table.to_batches(max_chunksize=100)))
        assert chunked.table.column("body").num_chunks > 1
        assert build_table(chunked, channel_id=CID, batch_id="b", ingest_time_us=1_000_000).equals(built[0])
    finally:
        ch.close()


def test_build_table_from_an_empty_arrow_take(tmp_path: Path) -> None:
    ch = FileChannel(**channel_settings(tmp_path))
    try:
        take = InProcessSource(ch, "ch").open_take(10)
        table = build_table(take.columns, channel_id=CID, batch_id="b", ingest_time_us=0)
        take.rollback()
        assert table.num_rows == 0 and table.schema.names == [f.name for f in LANDED_SCHEMA]
    finally:
        ch.close()


maps = st.lists(st.lists(st.tuples(st.sampled_from(["timestamp", "k", "", "tímestamp"]),
                                   st.one_of(st.none(), st.text(max_size=3))), max_size=4), max_size=30)


@given(maps, st.integers(0, 5), st.integers(0, 5))
def test_first_values_is_map_lookup_first(rows: list[list[tuple[str, str | None]]], head: int, tail: int) -> None:
    headers = pa.array(rows, pa.map_(pa.string(), pa.string()))
    sliced = headers.slice(min(head, len(rows)), max(0, len(rows) - head - tail))
    for array in (headers, sliced):
        expected = pc.map_lookup(array, pa.scalar("timestamp", pa.string()), "first")
        assert first_values(array, "timestamp").to_pylist() == expected.to_pylist()


def test_the_land_command_reports_temporary_files_kept_by_recovery(capsys: pytest.CaptureFixture[str]) -> None:
    """Temporary files of killed commits that recovery kept (younger than the grace) are named in
    the command's output and counted in its --json totals."""
    from types import SimpleNamespace

    from ingest_toolkit.land.cli import _document, _report
    from ingest_toolkit.land.landing import LandingResult
    from ingest_toolkit.land.run import LandingRun

    result = LandingResult(channel="events", events=5, redelivered=0, taken=5, files=1, bytes=100, batch_id="b",
                           duration_s=0.5, backlog_after=0, manifest_uri=None, temp_files_pending=2)
    route = SimpleNamespace(channel="events", description="in-process")
    run = LandingRun(route, 5, [result])  # type: ignore[arg-type]
    config = LandingConfig.build(root="/data/landing")
    _report(run, config, as_json=False)
    out = capsys.readouterr().out
    assert "2 temporary files of killed commits under file:///data/landing/events/_manifests kept" in out
    assert "staging_grace_seconds (3600 s)" in out
    assert _document(run, "events", config)["totals"]["temp_files_pending"] == 2
    assert _document(LandingRun(run.route, 0), "events", config)["totals"]["temp_files_pending"] == 0
