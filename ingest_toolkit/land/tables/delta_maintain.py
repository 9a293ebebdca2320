"""Compaction and retention of a Delta landed table with delta-rs (:mod:`.maintain` says what and why).

Both commit with ``ingest.maintenance`` in ``commitInfo`` (no ``ingest.batch_id``: they are not
batches). A landing that commits while ``OPTIMIZE`` runs makes one of the two commits fail;
delta-rs refuses a conflicting commit, and either side tries again on the new version (the
landing re-checks its seqs first): racing changes timing, never the rows.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from .delta_read import DeltaReader
from .upkeep import backoff, conflict

if TYPE_CHECKING:
    from .upkeep import MaintenanceResult

__all__ = ["compact", "retain"]

_ATTEMPTS = 8


def compact(reader: DeltaReader, result: MaintenanceResult, *, target_file_bytes: int) -> None:
    """``OPTIMIZE``: bin-pack the small files of every partition into files of about
    ``target_file_bytes`` (delta-rs compacts any partition with two or more files below it)."""
    from deltalake import CommitProperties
    from deltalake.exceptions import CommitFailedError

    for attempt in range(_ATTEMPTS):
        table = reader.table()
        if table is None:
            return
        try:
            metrics = table.optimize.compact(target_size=target_file_bytes, commit_properties=CommitProperties(
                custom_metadata={"ingest.maintenance": "compact"}))
        except CommitFailedError:
            time.sleep(backoff(attempt))  # a landing committed meanwhile: plan again on the new version
            continue
        result.partitions_compacted = int(metrics.get("partitionsOptimized", 0))
        result.files_compacted = int(metrics.get("numFilesRemoved", 0))
        result.files_written = int(metrics.get("numFilesAdded", 0))
        return
    raise conflict(reader.uri, "compacting")


def retain(reader: DeltaReader, result: MaintenanceResult, window_hours: float) -> None:
    """``VACUUM`` (``full``: also files no commit named) with the window, then a checkpoint (it
    carries the app transactions) and ``cleanup_metadata`` (log entries past the log's own
    retention, ``delta.logRetentionDuration``)."""
    from deltalake import CommitProperties

    table = reader.table()
    if table is None:
        return
    removed = table.vacuum(retention_hours=math.ceil(window_hours), dry_run=False, enforce_retention_duration=False,
                           full=True, commit_properties=CommitProperties(
                               custom_metadata={"ingest.maintenance": "vacuum"}))
    result.files_deleted = len(removed)
    table = reader.table()
    assert table is not None
    table.create_checkpoint()
    table.cleanup_metadata()
