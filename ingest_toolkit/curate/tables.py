"""The curated table of a channel in each format: replace one hour, keep the schema and its history.

The curation builds an hour with Spark and hands it here; each format makes the replacement
atomic with its own means, and records the columns (with the field path each is read from) and
every change of them (when, by which run, for which hour, which batches brought it):

* ``parquet``: ``<root>/<channel>/event_date=D/event_hour=H``, replaced by two renames (staging
  directory, then swap); the schema in ``<root>/<channel>/_schema.json`` beside it.
* ``delta``: a Delta table at ``<root>/<channel>``; Spark writes the hour's files, which are moved
  under the table and committed in one Delta commit that replaces the hour's partition (delta-rs,
  ``overwrite`` with the partition filter). New columns are added to the table first
  (``ALTER TABLE ADD COLUMNS``: no file is rewritten); the schema record and its history are table
  properties (``ingest.curated.columns``, ``ingest.curated.changes``).
* ``iceberg``: an Iceberg table ``<namespace>.<channel>_curated`` in the landing's SQL catalog;
  Spark writes the hour's files, and one transaction deletes the hour's partition and adds them
  (PyIceberg ``add_files``). New columns are added by a schema update in the same transaction;
  the record and history are table properties, and Iceberg keeps every schema version itself.

The schema record is written before the data, so a crash in between leaves columns that no file
has yet (read as nulls), never data whose columns the record does not know.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..land.storage import Location
from .schema import CuratedSchema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["PARTITION_COLUMNS", "CuratedTable", "SchemaChange", "partition_values"]

PARTITION_COLUMNS = ("event_date", "event_hour")
_MAX_CHANGES = 200  # the history kept in a table property (every change is in the log of Delta and Iceberg)


@dataclass(frozen=True)
class SchemaChange:
    """Columns added by one curated build: when, by which run, for which hour, from which batches."""

    added: list[dict[str, Any]]
    at: str
    run: str
    hour: str
    batches: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def partition_values(hour_utc: Any) -> dict[str, str]:
    """``event_date`` / ``event_hour`` of a UTC hour (a pendulum or datetime)."""
    return {"event_date": hour_utc.strftime("%Y-%m-%d"), "event_hour": hour_utc.strftime("%H")}


class CuratedTable(Protocol):
    """One channel's curated table (module docstring)."""

    format: str
    uri: str
    location: Location

    def schema(self) -> CuratedSchema | None:
        """The columns recorded for the table; None for a table not written yet."""

    def changes(self) -> list[dict[str, Any]]:
        """The recorded schema changes, oldest first."""

    def data_files(self) -> list[str]:
        """The data files of the table's current version (paths for pyarrow, below ``location``)."""

    def read_arrow(self, columns: list[str] | None = None) -> pa.Table:
        """The table's current rows with pyarrow (no Spark): every column of the latest schema,
        null where an older file lacks it."""

    def replace_hour(self, frame: DataFrame, hour_utc: Any, schema: CuratedSchema,
                     change: SchemaChange | None) -> str:
        """Make ``frame`` (the hour's rows, partition columns included) the table's partition of
        ``hour_utc``, with ``schema`` recorded (and ``change`` appended to the history); returns
        where the partition is."""


def record_doc(schema: CuratedSchema, history: list[dict[str, Any]], change: SchemaChange | None) -> dict[str, Any]:
    """The schema record: columns and (bounded) history with ``change`` appended."""
    changes = [*history, change.to_json()] if change is not None else list(history)
    return {"columns": schema.to_json(), "changes": changes[-_MAX_CHANGES:]}


def staged(location: Location, frame: DataFrame, drop: tuple[str, ...] = ()) -> tuple[Location, list[str]]:
    """Write ``frame`` (one task: one file per hour) under a fresh staging directory of
    ``location``; the directory and the paths (for pyarrow) of its Parquet files."""
    from ..land.spark import ensure_landing_conf

    ensure_landing_conf(frame.sparkSession)
    stage = location.child("_staging", f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}")
    frame.drop(*drop).coalesce(1).write.mode("error").parquet(stage.uri)
    return stage, stage.files()


def read_files(location: Location, files: list[str], columns: list[str] | None,
               partitions: bool = True) -> pa.Table:
    """Concatenate Parquet ``files`` below ``location`` (schemas unified: a column an older file
    lacks is null), with the ``event_date`` / ``event_hour`` of their directories when
    ``partitions`` and the file does not hold them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for path in files:
        with location.fs.open_input_file(path) as handle:
            table = pq.read_table(handle)
        if partitions:
            for part in path.split("/"):
                name, _, value = part.partition("=")
                if name in PARTITION_COLUMNS and name not in table.column_names:
                    table = table.append_column(name, pa.array([value] * table.num_rows, pa.string()))
        tables.append(table)
    if not tables:
        return pa.table({})
    merged = pa.concat_tables(tables, promote_options="default")
    return merged.select(columns) if columns else merged


def load_record(raw: str | None) -> tuple[CuratedSchema | None, list[dict[str, Any]]]:
    if not raw:
        return None, []
    doc = json.loads(raw)
    return CuratedSchema.from_json(doc.get("columns", [])), list(doc.get("changes", []))


def schema_properties(doc: Mapping[str, Any]) -> dict[str, str]:
    """The schema record as table properties (columns and history, each a JSON string)."""
    return {"ingest.curated.columns": json.dumps(doc["columns"], separators=(",", ":")),
            "ingest.curated.changes": json.dumps(doc["changes"], separators=(",", ":"))}


def record_from_properties(properties: Mapping[str, str]) -> tuple[CuratedSchema | None, list[dict[str, Any]]]:
    columns = properties.get("ingest.curated.columns")
    if columns is None:
        return None, []
    return CuratedSchema.from_json(json.loads(columns)), json.loads(properties.get("ingest.curated.changes", "[]"))
