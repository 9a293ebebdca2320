"""The table layer's interface: what the landing (and the curation, the checks and the
maintenance) ask of a table, whatever its format.

A **landed table** holds the events of one channel name under ``<root>/<channel>``, possibly from
several channels of that name (a fleet's aggregators): every row carries its ``event_id``
(channel identity + sequence number), so the table can always say which events of a channel it
holds. Each format keeps the landing's exactly-once protocol with its own atomic commit:

* ``parquet``: files moved into ``event_date=/event_hour=`` directories, a manifest per batch as
  the commit point (:mod:`ingest_toolkit.land.manifest`);
* ``delta``: one Delta Lake commit per batch carrying an app transaction
  ``(ingest-toolkit/<channel id>, batch number)`` (:mod:`.delta`);
* ``iceberg``: one Iceberg snapshot per batch, with the batch in its summary and the channel's
  batch number in a table property set in the same commit (:mod:`.iceberg`).

In every format a batch commits only the events no earlier commit of its channel holds (the
table is checked again at commit time, and a concurrent commit of the same channel makes the
commit fail and be checked again), so a redelivered take is recognised, and two landings racing
for the same events cannot both land them (:class:`~ingest_toolkit.land.errors.CommitConflict`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FORMATS", "Batch", "Committed", "Landed", "LandedTable", "Phase", "TableFormat", "overlap"]

TableFormat = Literal["parquet", "delta", "iceberg"]
FORMATS: tuple[TableFormat, ...] = ("parquet", "delta", "iceberg")
Phase = Callable[[str], None]  # tells the caller which step runs (its failures name it)


@dataclass(frozen=True)
class Landed:
    """What a table holds of some seqs of one channel: the seq ranges, the partitions
    (``event_date=D/event_hour=H``) those rows are in, and (Parquet) the newest commit number
    the answer is as of (0: none)."""

    ranges: list[tuple[int, int]]
    partitions: tuple[str, ...]
    newest: int = 0


@dataclass(frozen=True)
class Batch:
    """One batch to land: ``rows`` in the landed schema (:data:`~ingest_toolkit.land.batches.LANDED_SCHEMA`),
    all of channel ``channel_id``, whose seqs are ``seq_ranges`` (sorted, disjoint, inclusive)."""

    channel: str
    channel_id: bytes
    batch_id: str
    rows: pa.Table
    seq_ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Committed:
    """A batch's commit: where it is recorded (a manifest's URI, or the table's URI), the table
    version it produced (Delta version, Iceberg snapshot id, Parquet commit number), the
    channel's batch number in this table, and what it wrote."""

    uri: str
    version: int
    batch_number: int
    files: int
    bytes: int
    partitions: tuple[str, ...]


class LandedTable(Protocol):
    """The landed table of one channel name (module docstring)."""

    format: TableFormat
    uri: str  # the table's location, as the user configured it

    def recover(self) -> int:
        """Finish or remove what crashed runs left (Parquet: roll committed moves forward, drop idle
        staging directories and temporary files of killed commits; Delta/Iceberg: nothing to
        finish, their commits are atomic). Returns the temporary files of killed commits it kept,
        being younger than the grace period (a later recovery removes them; 0 for Delta/Iceberg)."""

    def landed(self, channel_id: bytes, lo: int, hi: int) -> Landed:
        """The seq ranges of ``channel_id`` within ``[lo, hi]`` that the table holds."""

    def commit(self, batch: Batch, landed: Landed, *, phase: Phase, before_commit: Callable[[], None]) -> Committed:
        """Write ``batch`` and commit it atomically as one table commit; ``landed`` is what
        :meth:`landed` answered for its seqs. ``before_commit`` runs right before the commit (a
        leased take confirms its lease there). Raises CommitConflict when a commit of the same
        channel that ``landed`` did not include holds some of these seqs."""


def overlap(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> bool:
    """Whether two sorted lists of disjoint inclusive ranges share a value."""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False
