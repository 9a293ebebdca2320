"""Upkeep of a Delta or Iceberg landed table: compaction of small files and retention.

Every batch is one commit, and a batch spreads over the hours its events happened in, so a
partition collects one small file per batch that reached it (late events reach old hours).
:func:`maintain_table` runs both jobs on one channel's table:

* **compaction**: Delta ``OPTIMIZE`` (delta-rs ``optimize.compact``: bin-packs small files of
  each partition into files of ``target_file_bytes``); Iceberg, whose PyIceberg 0.12 has no
  ``rewrite_data_files``: every partition with at least ``min_files`` data files is read and
  written back as one ``overwrite`` with that partition's filter, in one transaction
  (:mod:`.iceberg_maintain`). Rows, event ids and batch ids are unchanged; readers of the
  current version see the same rows before and after.
* **retention**, with a window (``[landing] retention_hours``, default 168 = 7 days) longer than
  any reader's: Delta ``VACUUM`` (files removed from the table longer ago than the window, and
  with ``full`` the files no commit ever named that are older than it: a crashed landing's),
  then a checkpoint and ``cleanup_metadata`` (log entries past ``delta.logRetentionDuration``);
  Iceberg: expire the snapshots older than the window (never the current one), then delete the
  files under the table's location that no remaining snapshot references and that are older
  than the window (the compacted files, a crashed landing's files, old manifests).

**Exactly once is untouched**: the channel's batch number lives in the Delta app transaction
(carried by every checkpoint) and in the Iceberg table property ``ingest.batch.<channel id>``;
neither is removed by vacuum, log cleanup or snapshot expiry, and recognising a redelivered
take reads the rows (event ids), which compaction keeps. A reader at an older version within
the window still reads it: only files unreferenced for longer than the window are deleted.

**The window has a floor**: a landing writes its files before its commit names them, so a
window shorter than the longest landing would let the retention delete a landing's files before
it commits. :func:`retention_floor_hours` is one hour, or the landing's lease plus its renewal
ceiling (``lease_seconds + lease_renewal_max_seconds``: after that a take is gone and its files
are never committed), whichever is longer; a shorter window is a ConfigError.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from . import delta_maintain, iceberg_maintain
from .delta_read import DeltaReader
from .iceberg_read import IcebergReader
from .reading import files_per_partition, open_reader
from .upkeep import MaintenanceResult

if TYPE_CHECKING:
    from ..config import LandingConfig

__all__ = ["MIN_RETENTION_HOURS", "MaintenanceResult", "maintain_table", "retention_floor_hours"]

MIN_RETENTION_HOURS = 1.0


def retention_floor_hours(config: LandingConfig) -> float:
    """The shortest retention window the table allows (module docstring)."""
    return max(MIN_RETENTION_HOURS, (config.lease_seconds + config.lease_renewal_max_seconds) / 3600)


def checked_window(config: LandingConfig, hours: float | None) -> float:
    """``hours`` (default ``config.retention_hours``), refused below :func:`retention_floor_hours`."""
    window = config.retention_hours if hours is None else hours
    floor = retention_floor_hours(config)
    if window < floor:
        raise ConfigError(f"a retention window of {window:g} h is shorter than the floor of {floor:g} h: a landing "
                          "still writing (lease_seconds + lease_renewal_max_seconds) could lose files it has not "
                          "committed yet; choose a window of at least that, and longer than any reader's",
                          key="landing.retention_hours")
    return window


def maintain_table(config: LandingConfig, channel: str, *, compact: bool = True, retain: bool = True,
                   retention_hours: float | None = None, min_files: int = 2,
                   allow_short_window: bool = False) -> MaintenanceResult:
    """Compact and/or apply retention to ``channel``'s Delta or Iceberg table (module docstring).
    ``allow_short_window``: skip the floor (tests that must see files go; never in production).
    Raises ConfigError for a plain Parquet table (no compaction or retention is built for it)."""
    if config.format == "parquet":
        raise ConfigError("maintenance (compaction, retention) is for Delta and Iceberg tables; this landing "
                          "writes plain Parquet", key="landing.format")
    window = (config.retention_hours if retention_hours is None else retention_hours) if allow_short_window \
        else checked_window(config, retention_hours)
    reader = open_reader(config, channel)
    result = MaintenanceResult(config.format, reader.uri, window, version_before=reader.version())
    _count(result, reader.files(), before=True)
    if compact:
        started = time.monotonic()
        if isinstance(reader, DeltaReader):
            delta_maintain.compact(reader, result, target_file_bytes=config.target_file_bytes)
        elif isinstance(reader, IcebergReader):
            iceberg_maintain.compact(reader, result, min_files=min_files)
        result.compaction_s = round(time.monotonic() - started, 3)
    if retain:
        started = time.monotonic()
        if isinstance(reader, DeltaReader):
            delta_maintain.retain(reader, result, window)
        elif isinstance(reader, IcebergReader):
            iceberg_maintain.retain(reader, result, window)
        result.retention_s = round(time.monotonic() - started, 3)
    result.version_after = reader.version()
    _count(result, reader.files(), before=False)
    return result


def _count(result: MaintenanceResult, files: list[Any], *, before: bool) -> None:
    per_partition = files_per_partition(files)
    worst = max(per_partition.values(), default=0)
    if before:
        result.files_before, result.max_files_per_partition_before = len(files), worst
    else:
        result.files_after, result.max_files_per_partition_after = len(files), worst
