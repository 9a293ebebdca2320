"""Compaction and retention of an Iceberg landed table with PyIceberg 0.12 (:mod:`.maintain`).

**Compaction without ``rewrite_data_files``** (PyIceberg 0.12 has none): a partition with at
least ``min_files`` data files is read at the current snapshot and written back with
``overwrite(rows, overwrite_filter=<that partition>)`` in one transaction: the partition's old
files are removed (whole files: the filter is the identity partition) and the rows appended as
files of ``write.target-file-size-bytes``, in one commit that requires the snapshot it read. A
landing that commits to the table meanwhile makes the compaction's commit fail
(``CommitFailedException``: the table is created with ``commit.retry.num-retries = 0``, so
PyIceberg never re-applies an overwrite to a table it did not read): the partition is read
again and retried. The commit's summary carries ``ingest.maintenance = compact``.

**Retention**: snapshots older than the window are expired (the current one never is; the
batch numbers are table properties and stay), then every file under the table's location that
no remaining snapshot references (data files, manifests, manifest lists, metadata files) and
that is older than the window is deleted through the table's FileIO.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .files import list_files
from .iceberg_read import IcebergReader
from .reading import files_per_partition, partition_filter
from .upkeep import backoff, conflict

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from .upkeep import MaintenanceResult

__all__ = ["compact", "retain", "rewrite_partition"]

_ATTEMPTS = 8


def compact(reader: IcebergReader, result: MaintenanceResult, *, min_files: int) -> None:
    """Rewrite every partition with at least ``min_files`` data files as few files (module docstring;
    the files' size is the table's ``write.target-file-size-bytes``, the landing's ``target_file_bytes``)."""
    crowded = sorted(p for p, n in files_per_partition(reader.files()).items() if n >= max(2, min_files))
    for partition in crowded:
        before, rows = _rewrite_with_retries(reader, partition)
        result.partitions_compacted += 1
        result.files_compacted += before
        result.rows_rewritten += rows
    after = files_per_partition(reader.files())
    result.files_written = sum(after.get(p, 0) for p in crowded)


def _rewrite_with_retries(reader: IcebergReader, partition: str) -> tuple[int, int]:
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(_ATTEMPTS):
        table = reader.table()
        assert table is not None
        try:
            return rewrite_partition(table, partition)
        except CommitFailedException:
            time.sleep(backoff(attempt))  # a landing committed meanwhile: read the partition again
    raise conflict(reader.uri, f"compacting partition {partition}")


def rewrite_partition(table: Table, partition: str) -> tuple[int, int]:
    """Read ``partition`` at the table's current snapshot and overwrite it with the same rows in
    one commit; ``(files replaced, rows)``. Raises CommitFailedException when the table moved."""
    date, hour = partition_filter(partition)
    where = f"event_date == '{date}' and event_hour == '{hour}'"
    snapshot = table.current_snapshot()
    assert snapshot is not None
    scan = table.scan(row_filter=where, snapshot_id=snapshot.snapshot_id)
    files = len(list(scan.plan_files()))
    rows = scan.to_arrow()
    with table.transaction() as tx:
        tx.overwrite(rows, overwrite_filter=where, snapshot_properties={
            "ingest.maintenance": "compact", "ingest.partition": partition, "ingest.rows": str(rows.num_rows)})
    return files, rows.num_rows


def retain(reader: IcebergReader, result: MaintenanceResult, window_hours: float) -> None:
    """Expire snapshots older than the window, then delete unreferenced files older than it."""
    from pyiceberg.exceptions import CommitFailedException

    cutoff_ms = int((time.time() - window_hours * 3600) * 1000)
    for attempt in range(_ATTEMPTS):
        table = reader.table()
        if table is None:
            return
        current = table.current_snapshot()
        old = [s.snapshot_id for s in table.snapshots()
               if s.timestamp_ms < cutoff_ms and (current is None or s.snapshot_id != current.snapshot_id)]
        if not old:
            break
        try:
            table.maintenance.expire_snapshots().by_ids(old).commit()
        except CommitFailedException:
            time.sleep(backoff(attempt))  # a landing committed meanwhile
            continue
        result.snapshots_expired = len(old)
        break
    else:
        raise conflict(reader.uri, "expiring snapshots")
    _delete_unreferenced(reader, result, cutoff_ms)


def _delete_unreferenced(reader: IcebergReader, result: MaintenanceResult, cutoff_ms: int) -> None:
    table = reader.table()
    if table is None:
        return
    keep = _referenced(table)
    for stored in list_files(reader.io, table.location()):
        if stored.uri in keep or stored.modified_ms >= cutoff_ms:
            continue
        table.io.delete(stored.uri)
        result.files_deleted += 1
        result.bytes_deleted += stored.bytes


def _referenced(table: Table) -> set[str]:
    """Every file a remaining snapshot or the metadata log references."""
    keep = {table.metadata_location, *(entry.metadata_file for entry in table.metadata.metadata_log)}
    for snapshot in table.snapshots():
        keep.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            keep.add(manifest.manifest_path)
    if table.snapshots():
        keep.update(table.inspect.all_files().column("file_path").to_pylist())
    return keep
