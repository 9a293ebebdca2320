"""The curated table in each format (:mod:`.tables` says what each keeps where)."""

from __future__ import annotations

import json
import time
import uuid
import warnings
from typing import TYPE_CHECKING, Any

from pyarrow import fs as pafs

from ..land.storage import Location
from ..land.tables.io import TableIO
from .schema import CuratedSchema
from .tables import (
    PARTITION_COLUMNS,
    SchemaChange,
    load_record,
    partition_values,
    read_files,
    record_doc,
    record_from_properties,
    schema_properties,
    staged,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["DeltaCurated", "IcebergCurated", "ParquetCurated"]

SCHEMA_FILE = "_schema.json"


def _read_text(location: Location) -> str | None:
    try:
        with location.fs.open_input_stream(location.path) as stream:
            return bytes(stream.readall()).decode()
    except (FileNotFoundError, OSError):
        return None


def _write_text(location: Location, text: str) -> None:
    """Replace a small file: write a hidden sibling, then rename it over (delete first where the
    file system's rename does not replace, as HDFS's does not)."""
    parent, _, name = location.path.rpartition("/")
    temporary = f"{parent}/.{name}.tmp-{uuid.uuid4().hex[:8]}"
    location.fs.create_dir(parent, recursive=True)
    with location.fs.open_output_stream(temporary) as stream:
        stream.write(text.encode())
    if location.exists():
        location.fs.delete_file(location.path)
    location.fs.move(temporary, location.path)


def _swap(table: Location, staging: Location, target: Location) -> None:
    """Put ``staging`` where ``target`` is: two renames, the old version deleted afterwards."""
    fs = table.fs
    trash = table.child("_trash", uuid.uuid4().hex)
    fs.create_dir(target.path.rsplit("/", 1)[0], recursive=True)
    moved_old = False
    if target.exists():
        fs.create_dir(table.child("_trash").path, recursive=True)
        fs.move(target.path, trash.path)
        moved_old = True
    fs.move(staging.path, target.path)
    if moved_old:
        fs.delete_dir(trash.path)


class ParquetCurated:
    """Plain Parquet directories, one per hour, with ``_schema.json`` beside them."""

    format = "parquet"

    def __init__(self, location: Location) -> None:
        self.location, self.uri = location, location.uri

    def _record(self) -> tuple[CuratedSchema | None, list[dict[str, Any]]]:
        return load_record(_read_text(self.location.child(SCHEMA_FILE)))

    def schema(self) -> CuratedSchema | None:
        return self._record()[0]

    def changes(self) -> list[dict[str, Any]]:
        return self._record()[1]

    def data_files(self) -> list[str]:
        return self.location.files()

    def read_arrow(self, columns: list[str] | None = None) -> pa.Table:
        return read_files(self.location, self.data_files(), columns)

    def replace_hour(self, frame: DataFrame, hour_utc: Any, schema: CuratedSchema,
                     change: SchemaChange | None) -> str:
        current, history = self._record()
        if change is not None or current is None:
            _write_text(self.location.child(SCHEMA_FILE), json.dumps(record_doc(schema, history, change), indent=1))
        values = partition_values(hour_utc)
        target = self.location.child(f"event_date={values['event_date']}", f"event_hour={values['event_hour']}")
        stage, _files = staged(self.location, frame, PARTITION_COLUMNS)
        try:
            _swap(self.location, stage, target)
        except BaseException:
            if stage.exists():
                stage.fs.delete_dir(stage.path)
            raise
        return target.uri


def _arrow_schema(location: Location, path: str) -> pa.Schema:
    import pyarrow.parquet as pq

    with location.fs.open_input_file(path) as handle:
        return pq.read_schema(handle)


def _rows(location: Location, path: str) -> int:
    import pyarrow.parquet as pq

    with location.fs.open_input_file(path) as handle:
        return int(pq.read_metadata(handle).num_rows)


def _place(location: Location, files: list[str], into: list[str]) -> list[tuple[str, int, int]]:
    """Move staged ``files`` under ``location`` / ``into``; ``(path relative to location, bytes,
    rows)`` of each. Files no commit names are invisible to the table's readers."""
    placed = []
    target = location.child(*into)
    location.fs.create_dir(target.path, recursive=True)
    for index, path in enumerate(files):
        name = f"part-{uuid.uuid4().hex}-{index:05d}.parquet"
        rows = _rows(location, path)
        location.fs.move(path, f"{target.path}/{name}")
        size = location.fs.get_file_info(f"{target.path}/{name}").size
        placed.append(("/".join([*into, name]), int(size or 0), rows))
    return placed


class DeltaCurated:
    """A Delta table; one commit replaces an hour's partition (module :mod:`.tables`)."""

    format = "delta"

    def __init__(self, io: TableIO, location: Location) -> None:
        self.io, self.location, self.uri = io, location, location.uri

    def _load(self) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.io.uri, storage_options=self.io.delta_options or None)
        except TableNotFoundError:
            return None

    def _record(self) -> tuple[CuratedSchema | None, list[dict[str, Any]]]:
        table = self._load()
        return (None, []) if table is None else record_from_properties(table.metadata().configuration)

    def schema(self) -> CuratedSchema | None:
        return self._record()[0]

    def changes(self) -> list[dict[str, Any]]:
        return self._record()[1]

    def data_files(self) -> list[str]:
        import pyarrow as pa

        table = self._load()
        if table is None:
            return []
        paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
        return sorted(self.location.child(path).path for path in paths)

    def read_arrow(self, columns: list[str] | None = None) -> pa.Table:
        import pyarrow as pa

        table = self._load()
        if table is None:
            return pa.table({})
        rows = pa.RecordBatchReader.from_stream(table.scan()).read_all()
        plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}  # delta-rs reads view types
        rows = rows.cast(pa.schema([pa.field(f.name, plain.get(f.type, f.type)) for f in rows.schema]))
        return rows.select(columns) if columns else rows

    def replace_hour(self, frame: DataFrame, hour_utc: Any, schema: CuratedSchema,
                     change: SchemaChange | None) -> str:
        import pyarrow as pa
        from deltalake import CommitProperties, DeltaTable
        from deltalake import Schema as DeltaSchema
        from deltalake.transaction import AddAction

        values = partition_values(hour_utc)
        stage, files = staged(self.location, frame, PARTITION_COLUMNS)
        try:
            written = _arrow_schema(self.location, files[0])
            full = pa.schema([*written, *(pa.field(name, pa.string()) for name in PARTITION_COLUMNS)])
            _current, history = self._record()
            properties = schema_properties(record_doc(schema, history, change))
            table = self._load()
            if table is None:
                table = DeltaTable.create(self.io.uri, full, mode="ignore", partition_by=list(PARTITION_COLUMNS),
                                          configuration=properties, storage_options=self.io.delta_options or None,
                                          raise_if_key_not_exists=False)
            known = {f.name for f in table.schema().fields}
            new = [f for f in full if f.name not in known]
            if new:
                table.alter.add_columns(DeltaSchema.from_arrow(pa.schema(new)).fields)
            if change is not None or _current is None:
                table.alter.set_table_properties(properties, raise_if_not_exists=False)
            placed = _place(self.location, files, [f"event_date={values['event_date']}",
                                                   f"event_hour={values['event_hour']}"])
            now = int(time.time() * 1000)
            adds = [AddAction(path, size, values, now, True, json.dumps({"numRecords": rows}))
                    for path, size, rows in placed]
            table = self._load()
            table.create_write_transaction(
                adds, mode="overwrite", schema=table.schema(), partition_by=list(PARTITION_COLUMNS),
                partition_filters=[(name, "=", values[name]) for name in PARTITION_COLUMNS],
                commit_properties=CommitProperties(custom_metadata={"ingest.curated.hour": hour_utc.isoformat()}))
        finally:
            if stage.exists():
                stage.fs.delete_dir(stage.path)
        return self.uri


class IcebergCurated:
    """An Iceberg table; one transaction replaces an hour's partition (module :mod:`.tables`)."""

    format = "iceberg"

    def __init__(self, io: TableIO, location: Location, catalog: str, namespace: str, channel: str) -> None:
        self.io, self.location, self.uri = io, location, location.uri
        self._catalog_uri, self.identifier = catalog, (namespace, f"{channel}_curated")

    def _load(self) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        from ..land.tables.iceberg import open_catalog

        try:
            return open_catalog(self._catalog_uri, self.io).load_table(self.identifier)
        except NoSuchTableError:
            return None

    def _record(self) -> tuple[CuratedSchema | None, list[dict[str, Any]]]:
        table = self._load()
        return (None, []) if table is None else record_from_properties(table.properties)

    def schema(self) -> CuratedSchema | None:
        return self._record()[0]

    def changes(self) -> list[dict[str, Any]]:
        return self._record()[1]

    def data_files(self) -> list[str]:
        table = self._load()
        if table is None or table.current_snapshot() is None:
            return []
        prefix = self.io.uri.rstrip("/") + "/"
        files = []
        for task in table.scan().plan_files():
            where = self.io.to_library(task.file.file_path)
            files.append(self.location.child(where.split(prefix, 1)[1]).path if where.startswith(prefix) else where)
        return sorted(files)

    def read_arrow(self, columns: list[str] | None = None) -> pa.Table:
        import pyarrow as pa

        table = self._load()
        if table is None:
            return pa.table({})
        rows = table.scan().to_arrow()
        return rows.select(columns) if columns else rows

    def _create(self, schema: pa.Schema, properties: dict[str, str]) -> Any:
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

        from ..land.tables.iceberg import open_catalog

        catalog = open_catalog(self._catalog_uri, self.io)
        catalog.create_namespace_if_not_exists(self.identifier[0])
        location = f"file://{self.io.uri}" if self.io.scheme == "file" else self.io.uri
        try:
            with catalog.create_table_transaction(self.identifier, schema=schema, location=location,
                                                  properties={"commit.retry.num-retries": "0", **properties}) as tx:
                with tx.update_spec() as spec:
                    for name in PARTITION_COLUMNS:
                        spec.add_identity(name)
        except (TableAlreadyExistsError, CommitFailedException):
            pass
        return self._load()

    def replace_hour(self, frame: DataFrame, hour_utc: Any, schema: CuratedSchema,
                     change: SchemaChange | None) -> str:
        values = partition_values(hour_utc)
        stage, files = staged(self.location, frame)  # Iceberg finds each file's partition in its columns
        try:
            written = _arrow_schema(self.location, files[0])
            _current, history = self._record()
            properties = schema_properties(record_doc(schema, history, change))
            table = self._load() or self._create(written, properties)
            placed = _place(self.location, files, ["data", f"event_date={values['event_date']}",
                                                   f"event_hour={values['event_hour']}"])
            uris = [self.io.to_library(self.location.child(path).uri) for path, _size, _rows in placed]
            hour = f"event_date = '{values['event_date']}' and event_hour = '{values['event_hour']}'"
            with table.transaction() as tx:
                with tx.update_schema() as update:
                    update.union_by_name(written)
                # add_files resolves the columns of the files by name: the mapping must know the new ones
                mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
                tx.set_properties({**properties, "schema.name-mapping.default": mapping})
                with warnings.catch_warnings():  # the first build of an hour has nothing to delete
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    tx.delete(hour)
                tx.add_files(uris, snapshot_properties={"ingest.curated.hour": hour_utc.isoformat()})
        finally:
            if stage.exists() and stage.fs.get_file_info(stage.path).type == pafs.FileType.Directory:
                stage.fs.delete_dir(stage.path)
        return self.uri
