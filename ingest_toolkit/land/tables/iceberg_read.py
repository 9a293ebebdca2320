"""Reading an Iceberg landed table with PyIceberg (:class:`~.reading.TableReader`).

The batch commits are the snapshots whose summary carries ``ingest.*`` keys; expiring
snapshots (the maintenance's retention) trims them. The channel's batch number is the table
property ``ingest.batch.<channel id>``, set in the same transaction as each batch's append, which
survives expiry. A version is a snapshot id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from ..batches import PARTITION_COLUMNS
from .base import TableFormat
from .io import TableIO
from .records import CommitRecord, DataFile, ids_by_partition, partition_filter, partition_key

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = ["IcebergReader"]


class IcebergReader:
    """The Iceberg table ``<namespace>.<channel>`` of the SQL catalog ``catalog`` (module docstring)."""

    format: TableFormat = "iceberg"

    def __init__(self, io: TableIO, channel: str, *, catalog: str, namespace: str) -> None:
        from .iceberg import IcebergLanded

        self.io, self.uri = io, io.spark_uri
        self.landed = IcebergLanded(io, channel, catalog=catalog, namespace=namespace)

    def table(self) -> Table | None:
        return self.landed.load()

    def version(self) -> int | None:
        table = self.table()
        snapshot = table.current_snapshot() if table is not None else None
        return None if snapshot is None else snapshot.snapshot_id

    def commits(self) -> list[CommitRecord]:
        table = self.table()
        if table is None:
            return []
        records = []
        for s in table.snapshots():
            summary = s.summary
            if summary is None or summary.get("ingest.batch_id") is None:
                continue
            records.append(CommitRecord(s.snapshot_id, s.timestamp_ms, str(summary.get("ingest.channel_id")),
                                        str(summary.get("ingest.batch_id")), int(summary.get("ingest.batch") or 0),
                                        int(summary.get("ingest.events") or 0)))
        return sorted(records, key=lambda r: (r.timestamp_ms, r.batch_number))

    def batch_number(self, channel_id: str) -> int:
        table = self.table()
        return 0 if table is None else int(table.properties.get(f"ingest.batch.{channel_id}", "0"))

    def files(self) -> list[DataFile]:
        table = self.table()
        if table is None or table.current_snapshot() is None:
            return []
        files = table.inspect.data_files()
        partitions = files.column("partition").to_pylist()
        return [DataFile(path, partition_key(p[PARTITION_COLUMNS[0]], p[PARTITION_COLUMNS[1]]), int(rows), int(size))
                for path, p, rows, size in zip(files.column("file_path").to_pylist(), partitions,
                                               files.column("record_count").to_pylist(),
                                               files.column("file_size_in_bytes").to_pylist(), strict=True)]

    def event_ids(self) -> Iterator[tuple[str, pa.Array]]:
        table = self.table()
        if table is None or table.current_snapshot() is None:
            return
        for batch in table.scan(selected_fields=("event_id", *PARTITION_COLUMNS)).to_arrow_batch_reader():
            yield from ids_by_partition(pa.Table.from_batches([batch]))

    def read(self, *, version: int | None = None, partition: str | None = None,
             columns: list[str] | None = None) -> pa.Table:
        table = self.table()
        if table is None or table.current_snapshot() is None:
            return pa.table({})
        row_filter = "True"
        if partition is not None:
            date, hour = partition_filter(partition)
            row_filter = f"event_date == '{date}' and event_hour == '{hour}'"
        fields = tuple(columns) if columns else ("*",)
        rows: pa.Table = table.scan(row_filter=row_filter, selected_fields=fields, snapshot_id=version).to_arrow()
        return rows

    def version_of_batch(self, batch_id: str) -> int | None:
        return next((c.version for c in self.commits() if c.batch_id == batch_id), None)
