"""The landed table as an Apache Iceberg table, written with PyIceberg (no JVM).

The table is ``<namespace>.<channel>`` in a SQL catalog (``[landing] iceberg_catalog``: a SQLite
file by default, no server to run; PostgreSQL for writers on several hosts), its files under
``<root>/<channel>`` (``data/`` and ``metadata/``), partitioned by identity on ``event_date`` and
``event_hour`` like the other formats. Each batch is **one snapshot** whose summary records the
batch (``ingest.*`` keys), committed together with the table property
``ingest.batch.<channel id>`` = the channel's batch number in this table, in one transaction.

Exactly once, with the channel's take committed after the table commit:

1. Before anything is written, the seqs of the take that the table holds are recognised with
   one scan that the event id range prunes to this channel's files (event ids sort like seqs).
2. At commit time the table is loaded again and checked again; the commit carries the table
   state it was made against (Iceberg's ``assert-ref-snapshot-id``), and the table is created
   with ``commit.retry.num-retries = 0``: PyIceberg would otherwise re-apply a failed append to
   the new head *without* our check, and two landings of the same events would both commit. A
   commit refused because the table moved (``CommitFailedException``) is checked again and
   retried; one whose events another commit holds stops with CommitConflict.
3. A crash before the commit leaves data files no snapshot names (invisible; removed by the
   maintenance job); after it, the next run finds the batch in step 1 and only commits the take.

Snapshots pile up one per batch; the maintenance job expires them (the batch numbers stay in the
table property, so recognition never needs old snapshots) and old metadata files are deleted
after each commit (``write.metadata.delete-after-commit.enabled``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..batches import LANDED_SCHEMA, PARTITION_COLUMNS, event_id
from ..errors import CommitConflict, LandingError
from ..faults import fault_during, fault_point
from .base import Batch, Committed, Landed, Phase, TableFormat, overlap
from .delta import batch_metadata, landed_in_rows
from .io import TableIO

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

__all__ = ["CATALOG_NAME", "IcebergLanded", "open_catalog"]

_ATTEMPTS = 20
CATALOG_NAME = "ingest"  # a SQL catalog keeps each catalog name's tables apart: readers use this name
_CODECS = {"snappy": "snappy", "zstd": "zstd", "gzip": "gzip", "lz4": "lz4", "none": "uncompressed",
           "uncompressed": "uncompressed"}


def open_catalog(uri: str, io: TableIO) -> Catalog:
    """The SQL catalog at ``uri`` (an absolute SQLAlchemy URL: ``LandingConfig`` makes a
    relative SQLite path absolute) with the storage settings of ``io``; the directory of a
    SQLite file is created."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import DBAPIError

    if uri.startswith("sqlite:///") and uri != "sqlite:///:memory:":
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(_ATTEMPTS):
        try:
            return SqlCatalog(CATALOG_NAME, uri=uri, warehouse=_location(io), **io.iceberg_properties)
        except DBAPIError as err:  # two processes creating the catalog's own tables at once
            if "already exists" not in str(err) or attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _location(io: TableIO) -> str:
    return f"file://{io.uri}" if io.scheme == "file" else io.uri


class IcebergLanded:
    """The landed table of one channel name as an Iceberg table (module docstring)."""

    format: TableFormat = "iceberg"

    def __init__(self, io: TableIO, channel: str, *, catalog: str, namespace: str = "ingest",
                 compression: str = "snappy", target_file_bytes: int = 128 << 20,
                 write_lock: AbstractContextManager[Any] | None = None) -> None:
        self.io, self.channel, self.uri = io, channel, io.spark_uri
        self._write_lock = write_lock or nullcontext()
        self.identifier = (namespace, channel)
        self._catalog_uri = catalog
        self._properties = {"commit.retry.num-retries": "0", "write.metadata.delete-after-commit.enabled": "true",
                            "write.metadata.previous-versions-max": "100",
                            "write.parquet.compression-codec": _CODECS[compression],
                            "write.target-file-size-bytes": str(target_file_bytes)}
        self._catalog: Catalog | None = None

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = open_catalog(self._catalog_uri, self.io)
        return self._catalog

    def load(self) -> Table | None:
        """The table as it is now; None when it does not exist yet."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            return None

    def create(self) -> Table:
        """The table, created if it does not exist yet (two creators at once: both get it)."""
        from pyiceberg.exceptions import CommitFailedException, NamespaceAlreadyExistsError, TableAlreadyExistsError
        from sqlalchemy.exc import IntegrityError

        existing = self.load()
        if existing is not None:
            return existing
        try:
            self.catalog.create_namespace_if_not_exists(self.identifier[0])
        except (NamespaceAlreadyExistsError, IntegrityError):
            pass  # another landing created it a moment ago
        try:  # one transaction: the table appears with its partitioning, or not at all
            with self.catalog.create_table_transaction(self.identifier, schema=LANDED_SCHEMA,
                                                       location=_location(self.io), properties=self._properties) as tx:
                with tx.update_spec() as spec:
                    for name in PARTITION_COLUMNS:
                        spec.add_identity(name)
        except (TableAlreadyExistsError, CommitFailedException, IntegrityError):
            pass  # another landing created it a moment ago
        table = self.load()
        assert table is not None
        return table

    def recover(self) -> int:
        """Nothing to finish: an Iceberg commit is atomic (a crashed write leaves unreferenced files)."""
        return 0

    def landed(self, channel_id: bytes, lo: int, hi: int) -> Landed:
        table = self.load()
        return Landed([], ()) if table is None else _landed(table, channel_id, lo, hi)

    def commit(self, batch: Batch, landed: Landed, *, phase: Phase, before_commit: Callable[[], None]) -> Committed:
        with self._write_lock:  # a drain's two batches: one writes and commits, the other takes meanwhile
            return self._commit(batch, landed, phase=phase, before_commit=before_commit)

    def _commit(self, batch: Batch, landed: Landed, *, phase: Phase, before_commit: Callable[[], None]) -> Committed:
        from pyiceberg.exceptions import CommitFailedException

        key = f"ingest.batch.{batch.channel_id.hex()}"
        lo, hi = batch.seq_ranges[0][0], batch.seq_ranges[-1][1]
        for _attempt in range(_ATTEMPTS):
            phase("committing to the Iceberg table")
            table = self.create()
            if overlap(_landed(table, batch.channel_id, lo, hi).ranges, batch.seq_ranges):
                raise self._conflict(batch)
            number = int(table.properties.get(key, "0")) + 1
            before_commit()
            started = time.time()
            try:
                with fault_during("during_write", functools.partial(self.io.data_written_since, started)), \
                        table.transaction() as tx:
                    tx.set_properties({key: str(number)})
                    tx.append(batch.rows, snapshot_properties=batch_metadata(batch, number))
            except CommitFailedException:
                continue  # the table moved: check again
            fault_point("after_table_commit")
            return self._committed(batch, number)
        raise LandingError(f"the Iceberg table {'.'.join(self.identifier)} kept changing under {_ATTEMPTS} attempts to "
                           f"commit batch {batch.batch_id}; nothing was committed", channel=self.channel,
                           phase="committing to the Iceberg table", rolled_back=True)

    def _committed(self, batch: Batch, number: int) -> Committed:
        table = self.load()
        assert table is not None
        snapshot = next((s for s in reversed(table.snapshots())
                         if s.summary is not None and s.summary.get("ingest.batch_id") == batch.batch_id), None)
        summary = snapshot.summary if snapshot is not None and snapshot.summary is not None else None
        files = int(summary.get("added-data-files", "0")) if summary is not None else 0
        nbytes = int(summary.get("added-files-size", "0")) if summary is not None else 0
        landed = landed_in_rows(batch.rows.select(["seq", *PARTITION_COLUMNS]))
        version = snapshot.snapshot_id if snapshot is not None else 0
        return Committed(self.uri, version, number, files, nbytes, landed.partitions)

    def _conflict(self, batch: Batch) -> CommitConflict:
        return CommitConflict(f"channel {self.channel!r}: another commit to the Iceberg table "
                              f"{'.'.join(self.identifier)} landed some of batch {batch.batch_id}'s events first, "
                              "while it was being written (a concurrent landing, or a remote take whose lease ran "
                              "out); this batch is discarded", channel=self.channel,
                              phase="committing to the Iceberg table", rolled_back=False)


def _landed(table: Table, channel_id: bytes, lo: int, hi: int) -> Landed:
    """One scan, pruned by the data files' event id bounds to this channel's seqs in [lo, hi]."""
    row_filter = f"event_id >= '{event_id(channel_id, lo)}' and event_id <= '{event_id(channel_id, hi)}'"
    rows: pa.Table = table.scan(row_filter=row_filter, selected_fields=("seq", *PARTITION_COLUMNS)).to_arrow()
    return landed_in_rows(rows)
