"""The landing's manifests of a channel, summed up for the reconciliation check."""

from __future__ import annotations

import pendulum

from .data_checks import ManifestTotals

__all__ = ["manifest_totals"]


def manifest_totals(root: str, channel: str) -> ManifestTotals:
    """Batches, events and the newest manifest's creation time (read with pyarrow, no Spark)."""
    from ingest_toolkit.land.manifest import read_manifests

    manifests = read_manifests(root, channel, storage="arrow")
    newest = max((pendulum.parse(m.created) for m in manifests), default=None)
    newest_ns = int(newest.timestamp() * 1e9) if isinstance(newest, pendulum.DateTime) else 0
    return ManifestTotals(len(manifests), sum(m.count for m in manifests), newest_ns)
