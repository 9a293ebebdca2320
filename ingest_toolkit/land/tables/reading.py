"""Reading a landed table back, whatever its format: the one interface the checks, the maintenance
jobs, the benchmarks and a reader who wants a batch's version call (:class:`~.records.TableReader`).

* :meth:`TableReader.commits`: the batch commits the table's history still holds (Delta commits
  whose ``commitInfo`` carries ``ingest.*``, Iceberg snapshots whose summary does, Parquet
  manifests), oldest first; a retention job trims the history, never the batch numbers;
* :meth:`TableReader.batch_number`: the channel's batch number the table records (Delta: the
  app transaction; Iceberg: the ``ingest.batch.<channel id>`` property; Parquet: the channel's
  manifests), which survives retention;
* :meth:`TableReader.files`: the data files of the current version with their partitions;
* :meth:`TableReader.event_ids`: the ``event_id`` column of the current version, per partition;
* :meth:`TableReader.read`: rows of the current version or of an older one (time travel),
  optionally one partition only; :meth:`TableReader.version_of_batch`: the version a batch
  produced.

:func:`open_reader` gives the reader of a channel's table from the landing configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...extras import require
from .delta_read import DeltaReader
from .iceberg_read import IcebergReader
from .io import table_io
from .parquet_read import ParquetReader
from .records import (
    CommitRecord,
    DataFile,
    TableReader,
    files_per_partition,
    history_complete,
    ids_by_partition,
    partition_filter,
    partition_key,
    plain_types,
)

if TYPE_CHECKING:
    from ..config import LandingConfig

__all__ = ["CommitRecord", "DataFile", "TableReader", "files_per_partition", "history_complete", "ids_by_partition",
           "open_reader", "partition_filter", "partition_key", "plain_types"]


def open_reader(config: LandingConfig, channel: str, spark: Any = None) -> TableReader:
    """The reader of ``channel``'s landed table under ``config.root`` in ``config.format``;
    ``spark``: a session whose Hadoop client reads a plain Parquet table on HDFS or S3A (Delta
    and Iceberg tables are read by their own libraries, anywhere)."""
    if config.format == "parquet":
        return ParquetReader(config.root, channel, spark)
    io = table_io(config.root, config.spark.conf).child(channel)
    if config.format == "delta":
        require("deltalake", "reading a Delta table", "tables")
        return DeltaReader(io)
    require("pyiceberg", "reading an Iceberg table", "tables")
    return IcebergReader(io, channel, catalog=config.iceberg_catalog, namespace=config.iceberg_namespace)
