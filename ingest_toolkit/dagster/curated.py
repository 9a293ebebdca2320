"""Which curated partitions a landed hour feeds; the curation itself is :mod:`ingest_toolkit.orchestrate.curation`.

It depends on the partitions' zone: in UTC one, in a half-hour zone (Asia/Kolkata) two, and on a
day when daylight saving time ends the repeated local hour is its own partition with an offset in
its key (``2026-11-01-01:00-0500``).
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg
import pendulum

__all__ = ["partition_keys_for_hours"]


def partition_keys_for_hours(partitions: dg.TimeWindowPartitionsDefinition,
                             hours: Iterable[pendulum.DateTime]) -> list[str]:
    """The partitions of ``partitions`` that overlap the given UTC hours, sorted by time.

    Partitions start on the hour in their own zone, so one UTC hour overlaps the partition of
    its first minute and the one of its last minute (two in a half-hour zone). Hours outside
    the partition set (before ``partitions_start``, or beyond the hour in progress) have none.
    """
    keys: dict[str, float] = {}
    for hour in hours:
        for minute in (0, 59):
            key = partitions.get_partition_key_for_timestamp(hour.add(minutes=minute).timestamp())
            if key not in keys and partitions.has_partition_key(key):
                keys[key] = partitions.time_window_for_partition_key(key).start.timestamp()
    return sorted(keys, key=keys.__getitem__)
