"""Shared pieces of the landing tests: channels with known events, reading the landed table."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.land import LandingConfig, SparkSettings, event_id

BASE_MILLIS = 1_763_798_400_000  # 2025-11-22T08:00:00Z
HOUR_MS = 3_600_000

Expected = dict[int, tuple[bytes, dict[str, str]]]  # seq -> (body, headers)


def channel_settings(tmp: Path, **overrides: Any) -> dict[str, Any]:
    return {"checkpoint_dir": str(tmp / "ch" / "cp"), "data_dirs": [str(tmp / "ch" / "data")],
            "min_free_bytes": 0, "max_file_size": 4 << 20, "max_event_size": 64 << 10,
            "transaction_capacity": 5000, "checkpoint_interval": 0.0, **overrides}


def make_events(n: int, start: int = 0) -> list[Event]:
    """Bodies ``event-<i>``; every third event has no headers, every seventh a bad timestamp, the
    rest a timestamp header spread over three hours across a date boundary (22:00 - 00:59)."""
    events = []
    for i in range(start, start + n):
        if i % 3 == 0:
            headers: dict[str, str] = {}
        elif i % 7 == 0:
            headers = {"timestamp": "not-a-number", "k": str(i)}
        else:
            headers = {"timestamp": str(BASE_MILLIS + 14 * HOUR_MS + (i % 180) * 60_000), "k": str(i)}
        events.append(Event(f"event-{i:06d}".encode(), headers))
    return events


def put_events(ch: FileChannel, events: list[Event], batch: int = 500) -> Expected:
    expected: Expected = {}
    for at in range(0, len(events), batch):
        chunk = events[at:at + batch]
        with ch.transaction() as tx:
            seqs = tx.put_many(chunk)
        expected.update({s: (e.body, dict(e.headers)) for s, e in zip(seqs, chunk, strict=True)})
    return expected


def landing_config(root: Path, **overrides: Any) -> LandingConfig:
    return LandingConfig.build(root=str(root), spark=SparkSettings(master="local[2]"), **overrides)


def read_landed(root: Path, channel: str) -> pa.Table:
    """Every Parquet file in the channel's partitions, the way a plain reader sees them."""
    directory = root / channel
    if not directory.exists():
        return pa.table({"seq": pa.array([], pa.int64())})
    partitioning = ds.partitioning(pa.schema([("event_date", pa.string()), ("event_hour", pa.string())]),
                                   flavor="hive")
    return ds.dataset(str(directory), format="parquet", partitioning=partitioning).to_table()


def assert_landed_exactly_once(table: pa.Table, expected: Mapping[int, tuple[bytes, dict[str, str]]],
                               channel_id: bytes) -> None:
    seqs = table.column("seq").to_pylist()
    duplicates = len(seqs) - len(set(seqs))
    assert duplicates == 0, f"{duplicates} events landed more than once"
    assert set(seqs) == set(expected), (f"missing {len(set(expected) - set(seqs))}, "
                                        f"unexpected {len(set(seqs) - set(expected))}")
    rows = table.select(["seq", "event_id", "body", "headers"]).to_pylist()
    for row in rows:
        body, headers = expected[row["seq"]]
        assert row["body"] == body
        assert dict(row["headers"]) == headers
        assert row["event_id"] == event_id(channel_id, row["seq"])


def staging_leftovers(root: Path, channel: str) -> list[str]:
    staging = root / channel / "_staging"
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


def manifest_counts(root: Path, channel: str) -> int:
    return sum(json.loads(p.read_text())["count"] for p in (root / channel / "_manifests").glob("*.json"))


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
