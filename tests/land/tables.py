"""Reading Delta and Iceberg landed tables with their own libraries (independent of the landing's
code): what a reader of each format sees, and the batches each commit says it holds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest_toolkit.land import LandingConfig, SparkSettings
from ingest_toolkit.land.tables import TableIO, table_io

FORMATS = ("delta", "iceberg")


def format_config(root: Path, table_format: str, **overrides: Any) -> LandingConfig:
    """A landing into ``root`` in ``table_format`` (Iceberg: a SQLite catalog beside the root)."""
    extra: dict[str, Any] = {"format": table_format}
    if table_format == "iceberg":
        extra["iceberg_catalog"] = f"sqlite:///{root.parent / (root.name + '-catalog.db')}"
    return LandingConfig.build(root=str(root), spark=SparkSettings(master="local[2]"), **extra, **overrides)


def read_table(config: LandingConfig, channel: str, version: int | None = None) -> pa.Table:
    """Every row of the channel's table as its format's own reader sees it (``version``: a Delta
    version or an Iceberg snapshot id to travel to)."""
    if config.format == "delta":
        from deltalake.exceptions import TableNotFoundError

        try:
            table = _delta(config, channel, version)
        except TableNotFoundError:
            return pa.table({"seq": pa.array([], pa.int64())})
        return _plain(pa.RecordBatchReader.from_stream(table.scan()).read_all())
    iceberg = _iceberg(config, channel)
    if iceberg is None:
        return pa.table({"seq": pa.array([], pa.int64())})
    return iceberg.scan(snapshot_id=version).to_arrow()  # type: ignore[no-any-return]


def _plain(table: pa.Table) -> pa.Table:
    """delta-rs reads strings and binaries as Arrow's view types: back to the plain ones."""
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    return table.cast(pa.schema([pa.field(f.name, plain.get(f.type, f.type)) for f in table.schema]))


def committed_batches(config: LandingConfig, channel: str) -> dict[str, int]:
    """Batch id -> events, as the table's commits record them (Delta history, Iceberg snapshots)."""
    if config.format == "delta":

        history = _delta(config, channel).history()
        return {h["ingest.batch_id"]: int(h["ingest.events"]) for h in history if "ingest.batch_id" in h}
    iceberg = _iceberg(config, channel)
    assert iceberg is not None
    return {s.summary["ingest.batch_id"]: int(s.summary["ingest.events"]) for s in iceberg.snapshots()
            if s.summary is not None and "ingest.batch_id" in s.summary.additional_properties}


def whole_batches(rows: pa.Table, batches: dict[str, int]) -> None:
    """Every batch a reader sees is whole: as many rows as its commit recorded, and committed."""
    seen = Counter(rows.column("batch_id").to_pylist()) if rows.num_rows else Counter()
    partial = {b: (n, batches.get(b)) for b, n in seen.items() if batches.get(b) != n}
    assert not partial, f"partial or uncommitted batches seen (rows seen, rows committed): {partial}"


def batch_numbers(config: LandingConfig, channel: str, channel_id: bytes) -> int:
    """The channel's batch number the table records (Delta app transaction, Iceberg property)."""
    if config.format == "delta":

        return _delta(config, channel).transaction_version(f"ingest-toolkit/{channel_id.hex()}") or 0
    iceberg = _iceberg(config, channel)
    assert iceberg is not None
    return int(iceberg.properties.get(f"ingest.batch.{channel_id.hex()}", "0"))


def _io(config: LandingConfig, channel: str) -> TableIO:
    """Where the table is for the libraries (the root's spelling and storage settings for them)."""
    return table_io(config.root, config.spark.conf).child(channel)


def _delta(config: LandingConfig, channel: str, version: int | None = None) -> Any:
    from deltalake import DeltaTable

    io = _io(config, channel)
    return DeltaTable(io.uri, version=version, storage_options=io.delta_options or None)


def _iceberg(config: LandingConfig, channel: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    io = _io(config, channel)
    catalog = SqlCatalog("ingest", uri=config.iceberg_catalog, **io.iceberg_properties)  # the landing's catalog name
    try:
        return catalog.load_table((config.iceberg_namespace, channel))
    except NoSuchTableError:
        return None


def dumps(value: Any) -> str:
    return json.dumps(value, default=str)
