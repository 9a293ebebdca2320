"""The landing's manifests of a channel, summed up for the reconciliation check."""

from __future__ import annotations

from typing import Any

import pendulum

from .data_checks import ManifestTotals

__all__ = ["manifest_totals"]


def manifest_totals(root: str, channel: str, spark: Any = None) -> ManifestTotals:
    """Batches, events and the newest manifest's creation time (read with pyarrow, no Spark,
    unless ``spark`` is given: a non-local root is then read through its Hadoop client)."""
    from ingest_toolkit.land.manifest import read_manifests

    manifests = read_manifests(root, channel, spark=spark, storage="auto" if spark is not None else "arrow")
    newest = max((pendulum.parse(m.created) for m in manifests), default=None)
    newest_ns = int(newest.timestamp() * 1e9) if isinstance(newest, pendulum.DateTime) else 0
    return ManifestTotals(len(manifests), sum(m.count for m in manifests), newest_ns)
