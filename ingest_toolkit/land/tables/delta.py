"""The landed table as a Delta Lake table, written with delta-rs (``deltalake``, no JVM).

Each batch is **one Delta commit** that appends its files and carries the app transaction
``(ingest-toolkit/<channel id>, n)``, ``n`` being the channel's batch number in this table
(``DeltaTable.transaction_version`` reads it back, from the log or a checkpoint, whatever the
log's retention), and the batch in the commit's metadata (``ingest.*`` keys of ``commitInfo``).

Exactly once, with the channel's take committed after the table commit:

1. Before anything is written, the seqs of the take that the table holds are recognised with
   one scan that the event id range prunes to the files of this channel and seq range (event
   ids of a channel sort like its seqs); those events are not written again.
2. At commit time the table is loaded again and checked again; the commit is made against that
   very snapshot with batch number ``n + 1``. A concurrent commit of the same channel (same app
   id) makes delta-rs refuse ours (``CommitFailedError``): the table is loaded and checked again,
   and if the other commit holds some of our seqs we stop with CommitConflict. Commits of other
   channels (other app ids) are appends that delta-rs rebases: they never conflict.
3. A crash before the commit leaves data files no commit names (invisible to every reader;
   ``VACUUM`` with ``full`` removes them); after it, the next run finds the batch in step 1 and
   only commits the take.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from ..batches import PARTITION_COLUMNS, event_id, seq_ranges
from ..errors import CommitConflict, LandingError
from ..faults import fault_during, fault_point
from .base import Batch, Committed, Landed, Phase, TableFormat, overlap
from .io import TableIO

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = ["DeltaLanded", "app_id", "batch_metadata", "landed_in_rows"]

_ATTEMPTS = 20
_Codec = Literal["UNCOMPRESSED", "SNAPPY", "GZIP", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"]
_CODECS: dict[str, _Codec] = {"snappy": "SNAPPY", "zstd": "ZSTD", "gzip": "GZIP", "lz4": "LZ4_RAW",
                               "none": "UNCOMPRESSED", "uncompressed": "UNCOMPRESSED"}


_LANDED_KEYS = pa.schema([("seq", pa.int64()), *((name, pa.string()) for name in PARTITION_COLUMNS)])


def app_id(channel_id: bytes) -> str:
    """The app id of a channel's transactions in a table."""
    return f"ingest-toolkit/{channel_id.hex()}"


def batch_metadata(batch: Batch, number: int) -> dict[str, str]:
    """What a commit records about its batch (Delta: ``commitInfo``; Iceberg: the snapshot summary)."""
    return {"ingest.channel": batch.channel, "ingest.channel_id": batch.channel_id.hex(),
            "ingest.batch_id": batch.batch_id, "ingest.batch": str(number), "ingest.events": str(batch.rows.num_rows),
            "ingest.seq_ranges": json.dumps([list(r) for r in batch.seq_ranges], separators=(",", ":"))}


def landed_in_rows(rows: pa.Table) -> Landed:
    """The :class:`Landed` answer of a table's rows of one channel (columns ``seq``,
    ``event_date``, ``event_hour``)."""
    if not rows.num_rows:
        return Landed([], ())
    rows = rows.select(["seq", *PARTITION_COLUMNS]).cast(_LANDED_KEYS)  # delta-rs reads strings as string_view
    hours = rows.select(list(PARTITION_COLUMNS)).group_by(list(PARTITION_COLUMNS)).aggregate([]).to_pylist()
    partitions = tuple(sorted(f"event_date={h['event_date']}/event_hour={h['event_hour']}" for h in hours))
    return Landed(seq_ranges(rows.column("seq").combine_chunks()), partitions)


class DeltaLanded:
    """The landed table of one channel name as a Delta table at ``io`` (module docstring)."""

    format: TableFormat = "delta"

    def __init__(self, io: TableIO, channel: str, *, compression: str = "snappy",
                 target_file_bytes: int = 128 << 20, write_lock: AbstractContextManager[Any] | None = None) -> None:
        self.io, self.channel, self.uri = io, channel, io.spark_uri
        self._compression, self._target = _CODECS[compression], target_file_bytes
        self._write_lock = write_lock or nullcontext()

    def load(self) -> DeltaTable | None:
        """The table as it is now; None when it does not exist yet."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.io.uri, storage_options=self.io.delta_options or None)
        except TableNotFoundError:
            return None

    def recover(self) -> int:
        """Nothing to finish: a Delta commit is atomic (a crashed write leaves files no commit names)."""
        return 0

    def landed(self, channel_id: bytes, lo: int, hi: int) -> Landed:
        table = self.load()
        return Landed([], ()) if table is None else _landed(table, channel_id, lo, hi)

    def commit(self, batch: Batch, landed: Landed, *, phase: Phase, before_commit: Callable[[], None]) -> Committed:
        with self._write_lock:  # a drain's two batches: one writes and commits, the other takes meanwhile
            return self._commit(batch, landed, phase=phase, before_commit=before_commit)

    def _commit(self, batch: Batch, landed: Landed, *, phase: Phase, before_commit: Callable[[], None]) -> Committed:
        from deltalake.exceptions import CommitFailedError, DeltaError

        app = app_id(batch.channel_id)
        lo, hi = batch.seq_ranges[0][0], batch.seq_ranges[-1][1]
        for _attempt in range(_ATTEMPTS):
            phase("committing to the Delta table")
            table = self.create(batch.rows.schema)
            if overlap(_landed(table, batch.channel_id, lo, hi).ranges, batch.seq_ranges):
                raise self._conflict(batch)
            number = (table.transaction_version(app) or 0) + 1
            before_commit()
            before, started = _files(table), time.time()
            try:
                with fault_during("during_write", functools.partial(self.io.data_written_since, started)):
                    self._write(table, batch, app, number)
            except CommitFailedError:
                continue  # a concurrent commit of this channel: check again
            except DeltaError as err:
                raise LandingError(f"writing batch {batch.batch_id} to the Delta table {self.uri} failed: {err}",
                                   channel=self.channel, phase="writing to the Delta table",
                                   rolled_back=True) from err
            fault_point("after_table_commit")
            return self._committed(batch, number, before)
        raise LandingError(f"the Delta table {self.uri} kept changing under {_ATTEMPTS} attempts to commit batch "
                           f"{batch.batch_id}; nothing was committed", channel=self.channel,
                           phase="committing to the Delta table", rolled_back=True)

    def create(self, schema: pa.Schema) -> DeltaTable:
        """The table, created empty (schema, partitioning) if it does not exist yet. A commit is
        always made against a loaded snapshot: written to a URI instead, delta-rs would load the
        newest version itself and a concurrent commit of the same channel would go unnoticed."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        for _attempt in range(_ATTEMPTS):
            table = self.load()
            if table is not None:
                return table
            try:
                DeltaTable.create(self.io.uri, schema, mode="ignore", partition_by=list(PARTITION_COLUMNS),
                                  storage_options=self.io.delta_options or None)
            except DeltaError:
                continue  # another landing created it first
        raise LandingError(f"the Delta table {self.uri} could not be created", channel=self.channel,
                           phase="creating the Delta table", rolled_back=True)

    def _write(self, table: DeltaTable, batch: Batch, app: str, number: int) -> None:
        from deltalake import CommitProperties, Transaction, WriterProperties, write_deltalake

        commit = CommitProperties(app_transactions=[Transaction(app, number)],
                                  custom_metadata=batch_metadata(batch, number))
        write_deltalake(table, batch.rows, mode="append", partition_by=list(PARTITION_COLUMNS),  # the checked snapshot
                        target_file_size=self._target,
                        writer_properties=WriterProperties(compression=self._compression), commit_properties=commit)

    def _committed(self, batch: Batch, number: int, before: dict[str, int]) -> Committed:
        """The commit just made: its version (found by its batch id among the last commits), and
        the files it added (those the table names now and did not before; a concurrent commit's
        files may be counted too: the numbers are for reports)."""
        table = self.load()
        assert table is not None  # it was just committed to
        recent = table.history(limit=50)
        version = next((int(h["version"]) for h in recent if h.get("ingest.batch_id") == batch.batch_id),
                       table.version())
        added = {path: size for path, size in _files(table).items() if path not in before}
        landed = landed_in_rows(batch.rows.select(["seq", *PARTITION_COLUMNS]))
        return Committed(self.uri, version, number, len(added), sum(added.values()), landed.partitions)

    def _conflict(self, batch: Batch) -> CommitConflict:
        return CommitConflict(f"channel {self.channel!r}: another commit to the Delta table {self.uri} landed some of "
                              f"batch {batch.batch_id}'s events first, while it was being written (a concurrent "
                              "landing, or a remote take whose lease ran out); this batch is discarded",
                              channel=self.channel, phase="committing to the Delta table", rolled_back=False)


def _files(table: DeltaTable | None) -> dict[str, int]:
    """Path -> size of every data file of the table's snapshot."""
    if table is None:
        return {}
    actions = pa.table(table.get_add_actions(flatten=True)).select(["path", "size_bytes"])
    return dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True))


def _landed(table: DeltaTable, channel_id: bytes, lo: int, hi: int) -> Landed:
    """One scan, pruned by the files' event id statistics to this channel's seqs in [lo, hi]."""
    predicate = f"event_id >= '{event_id(channel_id, lo)}' AND event_id <= '{event_id(channel_id, hi)}'"
    reader = table.scan(columns=["seq", *PARTITION_COLUMNS], predicate=predicate)
    return landed_in_rows(pa.RecordBatchReader.from_stream(reader).read_all())
