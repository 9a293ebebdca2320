"""The table layer: one interface per table format, under the landing, the curation, the checks
and the maintenance jobs (:mod:`.base` draws it; docs/landing.md, "Table formats").

* ``parquet`` (default): plain Parquet directories and the landing's manifest commit log, written
  by Spark (:mod:`.parquet`);
* ``delta``: a Delta Lake table, written and committed by delta-rs (:mod:`.delta`);
* ``iceberg``: an Apache Iceberg table in a SQL catalog, written by PyIceberg (:mod:`.iceberg`).

Delta and Iceberg take the Arrow table the landing builds and need no JVM: a landing into them
does not start Spark. They reach ``file://``, ``hdfs://`` and ``s3a://`` roots (:mod:`.io`).

Reading a table back (its batch commits and batch numbers, its files per partition, its event
ids, one partition, an older version) is :mod:`.reading` (``open_reader``), for the checks, the
benchmarks and readers; compaction and retention of a Delta or Iceberg table are
:mod:`.maintain` (``maintain_table``).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ...errors import ConfigError
from ...extras import require
from .base import FORMATS, Batch, Committed, Landed, LandedTable, TableFormat, overlap
from .io import TableIO, table_io

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..config import LandingConfig

__all__ = ["FORMATS", "Batch", "Committed", "Landed", "LandedTable", "TableFormat", "TableIO", "needs_spark",
           "open_landed", "overlap", "table_io"]


def needs_spark(config: LandingConfig) -> bool:
    """Whether landing with ``config`` writes through Spark (plain Parquet) or not (Delta, Iceberg)."""
    return config.format == "parquet"


def open_landed(config: LandingConfig, channel: str, spark: SparkSession | None = None,
                write_lock: AbstractContextManager[Any] | None = None) -> LandedTable:
    """The landed table of ``channel`` under ``config.root`` in ``config.format``. ``spark``: the
    session plain Parquet is written with (the other formats need none); ``write_lock``: one
    write at a time (a drain's two batches: a Spark write, or a Delta/Iceberg write and commit,
    while the other batch takes and builds its Arrow table; two commits of one channel at once
    would conflict and one of them would write its files again)."""
    _one_format(config, channel)
    if config.format == "parquet":
        from ..storage import open_storage
        from .parquet import ParquetLanded

        return ParquetLanded(open_storage(config.root, config.storage, spark), channel, config, spark, write_lock)
    io = table_io(config.root, config.spark.conf).child(channel)
    if config.format == "delta":
        require("deltalake", "landing into a Delta table", "tables")
        from .delta import DeltaLanded

        return DeltaLanded(io, channel, compression=config.compression, target_file_bytes=config.target_file_bytes,
                           write_lock=write_lock)
    require("pyiceberg", "landing into an Iceberg table", "tables")
    from .iceberg import IcebergLanded

    return IcebergLanded(io, channel, catalog=config.iceberg_catalog, namespace=config.iceberg_namespace,
                         compression=config.compression, target_file_bytes=config.target_file_bytes,
                         write_lock=write_lock)


_MARKERS = {"parquet": "_manifests", "delta": "_delta_log", "iceberg": "metadata"}


def _one_format(config: LandingConfig, channel: str) -> None:
    """A channel's directory holds one table: landing in another format there (``--format`` changed,
    the root kept) would mix a second table's files into the first one's partitions. Checked on
    local roots (a look for the other formats' marker directories); elsewhere, use a root per format."""
    parsed = urlparse(config.root)
    if parsed.scheme != "file":
        return
    directory = f"{parsed.path.rstrip('/')}/{channel}"
    for other, marker in _MARKERS.items():
        if other != config.format and os.path.isdir(f"{directory}/{marker}"):
            raise ConfigError(f"{config.root}/{channel} holds a {other} table ({marker}/), and this landing writes "
                              f"{config.format}: land into another root ([landing] root) or keep format = "
                              f'"{other}"', key="landing.format")
