"""Counting rows and duplicate ``event_id``s of a table with pyarrow.

Only the ``event_id`` column is read, file by file (plain Parquet: every file in the partition
directories) or chunk by chunk from a table format's own reader (Delta, Iceberg: the files of the
current version only; :func:`scan_chunks`), so a check costs a fraction of a Spark job and starts
in milliseconds (no JVM). Memory: one hash table entry per distinct id of the table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..land.storage import Location

__all__ = ["TableScan", "scan_chunks", "scan_event_ids"]


@dataclass(slots=True)
class TableScan:
    rows: int = 0
    files: int = 0
    duplicate_ids: int = 0  # ids that occur more than once
    extra_rows: int = 0  # rows beyond the first of each duplicated id
    sample: list[str] = field(default_factory=list)  # a few duplicated ids
    rows_by_partition: dict[str, int] = field(default_factory=dict)
    duplicates_by_partition: dict[str, int] = field(default_factory=dict)
    rows_by_channel: dict[str, int] = field(default_factory=dict)  # channel identity (32 hex digits) -> rows


def scan_event_ids(table: Location, *, sample_size: int = 5, files: list[str] | None = None) -> TableScan:
    """Rows and duplicate ids of every data file below ``table`` (hidden and ``_`` dirs skipped),
    or of ``files`` (paths below it: the files a Delta or Iceberg table's current version names).

    Duplicates are counted over the whole table; ``duplicates_by_partition`` counts the extra
    rows whose duplicate sits in the same ``event_date=/event_hour=`` directory.
    """
    chunks = ((_partition_of(table, path), pq.read_table(path, columns=["event_id"], filesystem=table.fs)
               .column("event_id")) for path in (table.files() if files is None else files))
    return scan_chunks(chunks, sample_size=sample_size, files_are_chunks=True)


def scan_chunks(chunks: Iterable[tuple[str, pa.Array | pa.ChunkedArray]], *, sample_size: int = 5,
                files_are_chunks: bool = False, files: int = 0) -> TableScan:
    """Rows, rows per channel identity and duplicate ids of ``(partition, event ids)`` chunks (a
    table format's reader gives them); ``files``: the table's data files, for the report
    (``files_are_chunks``: one chunk per file)."""
    scan = TableScan(files=files)
    seen: Counter[str] = Counter()
    for partition, column in chunks:
        ids = column.to_pylist()
        scan.files += 1 if files_are_chunks else 0
        scan.rows += len(ids)
        scan.rows_by_partition[partition] = scan.rows_by_partition.get(partition, 0) + len(ids)
        for channel, count in _channels(column).items():
            scan.rows_by_channel[channel] = scan.rows_by_channel.get(channel, 0) + count
        for event_id in ids:
            seen[f"{partition}\x00{event_id}"] += 1
    by_id: Counter[str] = Counter()
    for key, count in seen.items():
        partition, event_id = key.split("\x00", 1)
        by_id[event_id] += count
        if count > 1:
            scan.duplicates_by_partition[partition] = scan.duplicates_by_partition.get(partition, 0) + count - 1
    for event_id, count in by_id.items():
        if count > 1:
            scan.duplicate_ids += 1
            scan.extra_rows += count - 1
            if len(scan.sample) < sample_size:
                scan.sample.append(event_id)
    return scan


def _channels(column: pa.Array | pa.ChunkedArray) -> dict[str, int]:
    """Rows per channel identity: the first 32 characters of an event id."""
    if not len(column):
        return {}
    counts = pc.value_counts(pc.utf8_slice_codeunits(column.cast(pa.string()), 0, 32))
    if isinstance(counts, pa.ChunkedArray):
        counts = counts.combine_chunks()
    return {str(v): int(n) for v, n in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(),
                                           strict=True)}


def _partition_of(table: Location, path: str) -> str:
    parts = path[len(table.path):].strip("/").split("/")[:-1]
    return "/".join(parts) or "."
