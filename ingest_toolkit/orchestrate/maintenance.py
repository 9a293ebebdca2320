"""The maintenance of a channel's landed table, for an orchestrator's task: compaction and retention
of a Delta or Iceberg table (:func:`~ingest_toolkit.land.tables.maintain.maintain_table`), its log
lines and its summary as plain values.

It may run while a landing of the same channel runs: a compaction that loses the race to a
landing's commit is refused by the table and planned again, and the landing that loses re-checks
its seqs and commits again, so racing costs time, never rows (docs/landing.md, "Maintenance").
The Dagster maintenance asset still shares the landing's pool, so the two take turns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .settings import ChannelSpec
from .verdict import PathValue, TextValue

if TYPE_CHECKING:
    from ..land.config import LandingConfig
    from ..land.tables.maintain import MaintenanceResult

__all__ = ["maintain", "maintenance_lines", "maintenance_metadata", "maintains"]


def maintains(config: LandingConfig) -> bool:
    """Whether the landed table of ``config`` has a maintenance (Delta and Iceberg; plain Parquet
    has neither compaction nor retention)."""
    return config.format != "parquet"


def maintain(spec: ChannelSpec, config: LandingConfig) -> MaintenanceResult:
    """Compact the channel's table, then apply retention with ``[landing] retention_hours``.
    Raises ConfigError for a window below the floor or a plain Parquet table."""
    from ..land.tables.maintain import maintain_table

    return maintain_table(config, spec.name)


def maintenance_lines(result: MaintenanceResult, channel: str) -> list[str]:
    """What the run did, one line per job."""
    return [f"compacted {result.partitions_compacted} partitions of the {result.format} table of channel {channel}: "
            f"{result.files_compacted} files replaced by {result.files_written} ({result.files_before} -> "
            f"{result.files_after} data files, at most {result.max_files_per_partition_after} per partition) in "
            f"{result.compaction_s:.2f} s",
            f"retention ({result.retention_hours:g} h): {result.snapshots_expired} snapshots expired, "
            f"{result.files_deleted} files deleted ({result.bytes_deleted:,} bytes) in {result.retention_s:.2f} s"]


def maintenance_metadata(result: MaintenanceResult) -> dict[str, Any]:
    """The run's summary as plain values (constants are text: not plotted)."""
    version = result.version_after
    return {"format": result.format, "table_uri": PathValue(result.table_uri),
            "table_version": TextValue("" if version is None else version),
            "files_before": result.files_before, "files_after": result.files_after,
            "max_files_per_partition_before": result.max_files_per_partition_before,
            "max_files_per_partition_after": result.max_files_per_partition_after,
            "partitions_compacted": result.partitions_compacted, "files_compacted": result.files_compacted,
            "files_written": result.files_written, "snapshots_expired": result.snapshots_expired,
            "files_deleted": result.files_deleted, "bytes_deleted": result.bytes_deleted,
            "retention_hours": TextValue(f"{result.retention_hours:g}"),
            "compaction_s": result.compaction_s, "retention_s": result.retention_s}
