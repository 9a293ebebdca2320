"""Reading a Delta landed table with delta-rs (:class:`~.reading.TableReader`).

The batch commits are the log's commits whose ``commitInfo`` carries ``ingest.*`` keys
(:func:`~.delta.batch_metadata`); ``history()`` holds them as long as the log does
(``delta.logRetentionDuration``, 30 days by default, and the maintenance's
``cleanup_metadata``). The channel's batch number is its app transaction, which checkpoints
carry forward: it outlives the log's retention. Reads use ``scan()``, not
``to_pyarrow_table()`` (which can abort the process at exit, delta-rs#2184).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from ..batches import PARTITION_COLUMNS
from .base import TableFormat
from .delta import app_id
from .io import TableIO
from .records import CommitRecord, DataFile, ids_by_partition, partition_filter, partition_key, plain_types

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = ["DeltaReader"]


class DeltaReader:
    """The Delta table at ``io`` (module docstring)."""

    format: TableFormat = "delta"

    def __init__(self, io: TableIO) -> None:
        self.io, self.uri = io, io.spark_uri

    def table(self, version: int | None = None) -> DeltaTable | None:
        """The table (at ``version``); None when there is none."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.io.uri, version=version, storage_options=self.io.delta_options or None)
        except TableNotFoundError:
            return None

    def version(self) -> int | None:
        table = self.table()
        return None if table is None else table.version()

    def commits(self) -> list[CommitRecord]:
        table = self.table()
        if table is None:
            return []
        records = [CommitRecord(int(h["version"]), int(h.get("timestamp", 0)), str(h["ingest.channel_id"]),
                                str(h["ingest.batch_id"]), int(h["ingest.batch"]), int(h["ingest.events"]))
                   for h in table.history() if "ingest.batch_id" in h]
        return sorted(records, key=lambda r: r.version)

    def batch_number(self, channel_id: str) -> int:
        table = self.table()
        return 0 if table is None else table.transaction_version(app_id(bytes.fromhex(channel_id))) or 0

    def files(self) -> list[DataFile]:
        table = self.table()
        if table is None:
            return []
        actions = pa.table(table.get_add_actions(flatten=True))
        dates, hours = (actions.column(f"partition.{c}").to_pylist() for c in PARTITION_COLUMNS)
        modified = actions.column("modification_time").cast(pa.int64()).to_pylist()
        return [DataFile(_join(self.io.uri, path), partition_key(d, h), int(rows or 0), int(size), int(m or 0))
                for path, d, h, rows, size, m in zip(actions.column("path").to_pylist(), dates, hours,
                                                     actions.column("num_records").to_pylist(),
                                                     actions.column("size_bytes").to_pylist(), modified, strict=True)]

    def event_ids(self) -> Iterator[tuple[str, pa.Array]]:
        table = self.table()
        if table is None:
            return
        reader = pa.RecordBatchReader.from_stream(table.scan(columns=["event_id", *PARTITION_COLUMNS]))
        for batch in reader:
            rows = plain_types(pa.Table.from_batches([batch]))
            yield from ids_by_partition(rows)

    def read(self, *, version: int | None = None, partition: str | None = None,
             columns: list[str] | None = None) -> pa.Table:
        table = self.table(version)
        if table is None:
            return pa.table({})
        predicate = None
        if partition is not None:
            date, hour = partition_filter(partition)
            predicate = f"event_date = '{date}' AND event_hour = '{hour}'"
        stream = table.scan(columns=columns, predicate=predicate)
        return plain_types(pa.RecordBatchReader.from_stream(stream).read_all())

    def version_of_batch(self, batch_id: str) -> int | None:
        return next((c.version for c in self.commits() if c.batch_id == batch_id), None)


def _join(root: str, path: str) -> str:
    return path if "://" in path else f"{root.rstrip('/')}/{path}"

