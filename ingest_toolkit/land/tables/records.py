"""What a landed table says about itself, whatever its format: the reader interface
(:class:`TableReader`; :func:`~.reading.open_reader` gives one, :mod:`.reading` says what each
method answers) and the records it answers with. A leaf: the readers of each format import it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from ..batches import PARTITION_COLUMNS
from .base import TableFormat

__all__ = ["CommitRecord", "DataFile", "TableReader", "files_per_partition", "history_complete", "ids_by_partition",
           "partition_filter", "partition_key", "plain_types"]


@dataclass(frozen=True)
class CommitRecord:
    """One batch commit as the table records it. ``version``: the Delta version, Iceberg
    snapshot id or Parquet commit number; ``channel_id``: 32 hex digits; ``batch_number``: the
    channel's batch number in this table (1, 2, ...)."""

    version: int
    timestamp_ms: int
    channel_id: str
    batch_id: str
    batch_number: int
    events: int


@dataclass(frozen=True)
class DataFile:
    """A data file of the table's current version: its URI (as the format's library names it),
    partition (``event_date=D/event_hour=H``), rows, bytes and modification time."""

    uri: str
    partition: str
    rows: int
    bytes: int
    modified_ms: int = 0


class TableReader(Protocol):
    """What can be read back from a landed table (module docstring)."""

    format: TableFormat
    uri: str

    def version(self) -> int | None:
        """The current version (Delta version, Iceberg snapshot id, Parquet commit); None: no table."""

    def commits(self) -> list[CommitRecord]:
        """The batch commits the table's history still holds, oldest first."""

    def batch_number(self, channel_id: str) -> int:
        """The batch number of channel ``channel_id`` (32 hex digits) recorded in the table (0: none)."""

    def files(self) -> list[DataFile]:
        """The current version's data files."""

    def event_ids(self) -> Iterator[tuple[str, pa.Array]]:
        """``(partition, event_id values)`` chunks covering every row of the current version."""

    def read(self, *, version: int | None = None, partition: str | None = None,
             columns: list[str] | None = None) -> pa.Table:
        """Rows of the current version (or of ``version``), of one partition or all, with plain Arrow types."""

    def version_of_batch(self, batch_id: str) -> int | None:
        """The version the batch's commit produced, while the history holds it."""


def partition_key(date: object, hour: object) -> str:
    """``event_date=D/event_hour=H``: how every format's partition is named in reports."""
    return f"event_date={date}/event_hour={hour}"


def partition_filter(partition: str) -> tuple[str, str]:
    """``(date, hour)`` of a partition key."""
    values = dict(part.split("=", 1) for part in partition.split("/"))
    return values[PARTITION_COLUMNS[0]], values[PARTITION_COLUMNS[1]]


def files_per_partition(files: list[DataFile]) -> dict[str, int]:
    """Partition -> number of data files."""
    counts: dict[str, int] = {}
    for f in files:
        counts[f.partition] = counts.get(f.partition, 0) + 1
    return counts


def history_complete(commits: list[CommitRecord], channel_id: str, batch_number: int) -> bool:
    """Whether the history still holds every batch commit of the channel: its batch numbers
    1..``batch_number`` all have a record (a retention job may have trimmed the oldest)."""
    numbers = {c.batch_number for c in commits if c.channel_id == channel_id}
    return numbers == set(range(1, batch_number + 1))


def plain_types(table: pa.Table) -> pa.Table:
    """delta-rs reads strings and binaries as Arrow's view types: back to the plain ones."""
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    if not any(f.type in plain for f in table.schema):
        return table
    return table.cast(pa.schema([pa.field(f.name, plain.get(f.type, f.type)) for f in table.schema]))


def ids_by_partition(rows: pa.Table) -> Iterator[tuple[str, pa.Array]]:
    """The ``event_id`` values of ``rows`` (columns ``event_id``, ``event_date``, ``event_hour``)
    grouped by partition."""
    date, hour = (rows.column(name).cast(pa.string()) for name in PARTITION_COLUMNS)
    keys = pc.binary_join_element_wise("event_date=", date, "/event_hour=", hour, "")
    ids = rows.column("event_id").cast(pa.string())
    for key in pc.unique(keys).to_pylist():
        yield str(key), ids.filter(pc.equal(keys, key)).combine_chunks()
