"""The result of a table's maintenance and what its jobs share (a leaf: :mod:`.maintain` and the
jobs of each format, :mod:`.delta_maintain` and :mod:`.iceberg_maintain`, import it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import MaintenanceConflict

__all__ = ["MaintenanceResult", "backoff", "conflict"]


@dataclass
class MaintenanceResult:
    """What one maintenance run did to a channel's table."""

    format: str
    table_uri: str
    retention_hours: float
    version_before: int | None = None
    version_after: int | None = None
    files_before: int = 0
    files_after: int = 0
    max_files_per_partition_before: int = 0
    max_files_per_partition_after: int = 0
    partitions_compacted: int = 0
    files_compacted: int = 0  # data files replaced by compaction
    files_written: int = 0  # data files compaction wrote
    rows_rewritten: int = 0
    snapshots_expired: int = 0  # Iceberg
    files_deleted: int = 0  # by retention: vacuum, or unreferenced files
    bytes_deleted: int = 0
    compaction_s: float = 0.0
    retention_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1`` of a commit that lost a race."""
    return float(min(2.0, 0.05 * 2 ** attempt))


def conflict(uri: str, doing: str) -> MaintenanceConflict:
    return MaintenanceConflict(f"{doing} the table {uri} lost the race to other commits (landings) on every "
                               "attempt; nothing of it was committed. Run the maintenance again, or in the "
                               "landing's concurrency pool (the Dagster asset shares landing-<channel>)")
