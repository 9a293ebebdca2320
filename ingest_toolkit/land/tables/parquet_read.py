"""Reading a plain Parquet landed table (:class:`~.reading.TableReader`): the manifests are its
commits and name its files; the rows are whatever the partition directories hold (a file copied
in by hand is read too, which is what the duplicate check must see). A version is a commit
number; there is no time travel (:meth:`ParquetReader.read` refuses an older version).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..manifest import Manifest, read_manifests
from ..storage import Location, locate
from .base import TableFormat
from .records import CommitRecord, DataFile

__all__ = ["ParquetReader"]


class ParquetReader:
    """The Parquet table ``<root>/<channel>`` (module docstring); ``spark``: a session whose
    Hadoop client reaches a root on HDFS or S3A."""

    format: TableFormat = "parquet"

    def __init__(self, root: str, channel: str, spark: Any = None) -> None:
        self.root, self.channel, self.spark = root.rstrip("/"), channel, spark
        self.uri = f"{self.root}/{channel}"

    def manifests(self) -> list[Manifest]:
        return read_manifests(self.root, self.channel, spark=self.spark,
                              storage="auto" if self.spark is not None else "arrow")

    def location(self) -> Location:
        return locate(self.uri, self.spark)

    def version(self) -> int | None:
        manifests = self.manifests()
        return manifests[-1].commit if manifests else None

    def commits(self) -> list[CommitRecord]:
        numbers: dict[str, int] = {}
        records = []
        for m in self.manifests():
            numbers[m.channel_id] = numbers.get(m.channel_id, 0) + 1
            created = calendar.timegm(time.strptime(m.created, "%Y-%m-%dT%H:%M:%SZ")) * 1000
            records.append(CommitRecord(m.commit, created, m.channel_id, m.batch_id, numbers[m.channel_id], m.count))
        return records

    def batch_number(self, channel_id: str) -> int:
        return sum(1 for m in self.manifests() if m.channel_id == channel_id)

    def files(self) -> list[DataFile]:
        return [DataFile(f"{self.uri}/{f.path}", f.path.rpartition("/")[0], f.rows, f.bytes)
                for m in self.manifests() for f in m.files]

    def event_ids(self) -> Iterator[tuple[str, pa.Array]]:
        table = self.location()
        for path in table.files():
            partition = "/".join(path[len(table.path):].strip("/").split("/")[:-1]) or "."
            yield partition, pq.read_table(path, columns=["event_id"], filesystem=table.fs).column("event_id")

    def read(self, *, version: int | None = None, partition: str | None = None,
             columns: list[str] | None = None) -> pa.Table:
        if version is not None and version != self.version():
            raise ValueError("a plain Parquet table has no time travel: read it as it is now")
        table = self.location()
        where = table.child(*partition.split("/")) if partition else table
        paths = where.files()
        if not paths:
            return pa.table({})
        import pyarrow.dataset as ds

        schema = None if partition else pa.schema([("event_date", pa.string()), ("event_hour", pa.string())])
        dataset = ds.dataset(paths, filesystem=table.fs, format="parquet",
                             partitioning=ds.partitioning(schema, flavor="hive") if schema else None,
                             partition_base_dir=table.path)
        return dataset.to_table(columns=columns)

    def version_of_batch(self, batch_id: str) -> int | None:
        return next((m.commit for m in self.manifests() if m.batch_id == batch_id), None)
