"""The landed table as plain Parquet directories with the landing's own commit log.

For readers that want files: ``<root>/<channel>/event_date=D/event_hour=H/part-<batch>-N...parquet``,
written by Spark. Its commit point is a manifest per batch, created exclusively as the next
number of the channel's commit log (:mod:`..manifest`); files reach the partition directories
only after their manifest is committed (:mod:`..publish`). docs/landing.md has the protocol and
its crash table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from ..config import LandingConfig
from ..errors import CommitConflict
from ..faults import fault_during, fault_point
from ..manifest import Manifest, ManifestFile, ManifestLog
from ..publish import STAGING_DIR, finish_moves, recover_channel_dir, staged_files
from ..spark import write_parquet
from ..storage import Storage
from .base import Batch, Committed, Landed, Phase, TableFormat

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ParquetLanded"]


class ParquetLanded:
    """The landed table of one channel name as Parquet directories under ``store`` (module docstring)."""

    format: TableFormat = "parquet"

    def __init__(self, store: Storage, channel: str, config: LandingConfig, spark: SparkSession | None,
                 write_lock: AbstractContextManager[Any] | None = None) -> None:
        self.store, self.channel, self.config, self.spark = store, channel, config, spark
        self.uri = store.uri(channel)
        self._write_lock = write_lock or nullcontext()

    def recover(self) -> int:
        return recover_channel_dir(self.store, self.channel, self.config.staging_grace_seconds).temp_files_pending

    def landed(self, channel_id: bytes, lo: int, hi: int) -> Landed:
        return ManifestLog(self.store, self.channel).landed(channel_id, lo, hi)

    def commit(self, batch: Batch, landed: Landed, *, phase: Phase, before_commit: Callable[[], None]) -> Committed:
        staging = f"{self.channel}/{STAGING_DIR}/{batch.batch_id}"
        phase("writing Parquet with Spark")
        with self._write_lock, fault_during("during_write", lambda: self.store.exists(f"{staging}/_temporary")):
            write_parquet(self.spark, batch.rows, self.store.uri(staging), self.config)  # type: ignore[arg-type]
        fault_point("after_write")
        phase("checking Spark's output")
        files = staged_files(self.store, self.channel, batch.batch_id, batch.rows.num_rows)
        draft = Manifest(channel=self.channel, channel_id=batch.channel_id.hex(), batch_id=batch.batch_id,
                         seq_ranges=batch.seq_ranges, count=batch.rows.num_rows, files=files,
                         partitions=_partitions(files), created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        phase("confirming the take's lease")
        before_commit()
        phase("committing the manifest")
        log = ManifestLog(self.store, self.channel)
        try:
            manifest = log.commit(draft, landed.newest)
        except CommitConflict:
            self.store.delete(staging)
            raise
        fault_point("after_manifest")
        phase("moving files into the partitions")
        finish_moves(self.store, self.channel, manifest)
        return Committed(log.uri(manifest), manifest.commit, manifest.commit, len(manifest.files), manifest.bytes,
                         manifest.partitions)


def _partitions(files: tuple[ManifestFile, ...]) -> tuple[str, ...]:
    return tuple(sorted({f.path.rpartition("/")[0] for f in files if "/" in f.path}))
