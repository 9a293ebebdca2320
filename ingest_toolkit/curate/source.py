"""What the landed table holds per UTC hour, in each format, without reading the rows.

The curation reads the landed hours it builds from; the checks ask which hours hold events and
how many. Each format answers from its own metadata:

* ``parquet``: the hour directories ``<root>/<channel>/event_date=D/event_hour=H`` and their data
  files (row counts from the Parquet footers);
* ``delta``: the table's current add actions (path, partition values, ``numRecords``), so files
  a commit removed (a compaction's inputs) or no commit names (a killed write) are never read;
* ``iceberg``: the files a scan of the current snapshot plans, filtered on the partition.

Only the table's *current* state counts in every format: what a reader sees is what is curated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pendulum

from ..errors import CurationError
from ..land.storage import Location, locate
from ..land.tables.io import TableIO, table_io

if TYPE_CHECKING:
    from ..land.config import LandingConfig

__all__ = ["HourFiles", "LandedSource", "landed_source"]


@dataclass
class HourFiles:
    """The data files of one landed UTC hour (as Spark reads them) and the events they hold."""

    hour: pendulum.DateTime
    files: list[str] = field(default_factory=list)
    events: int = 0


def _hour(date: str, hour: str) -> pendulum.DateTime | None:
    try:
        day = pendulum.parse(date, tz="UTC")
        value = int(hour)
    except (ValueError, TypeError, pendulum.parsing.exceptions.ParserError):
        return None
    if not isinstance(day, pendulum.DateTime) or not 0 <= value <= 23:
        return None  # Spark's directory of rows without a date, for one
    return day.add(hours=value)


class LandedSource:
    """One channel's landed table, as the curation reads it (module docstring)."""

    def __init__(self, config: LandingConfig, channel: str, spark: Any = None) -> None:
        self.config, self.channel, self.format = config, channel, config.format
        self._spark = spark

    @property
    def uri(self) -> str:
        return f"{self.config.root.rstrip('/')}/{self.channel}"

    def hours(self, wanted: Iterable[pendulum.DateTime] | None = None, *, counts: bool = True) -> dict[str, HourFiles]:
        """The landed hours (ISO key of the UTC hour -> files and events), only ``wanted`` ones
        when given; ``counts`` False skips the per-file row counts of a Parquet table."""
        keys = None if wanted is None else {h.in_timezone("UTC").start_of("hour").isoformat() for h in wanted}
        if self.format == "delta":
            found = self._delta(keys)
        elif self.format == "iceberg":
            found = self._iceberg(keys)
        else:
            found = self._parquet(keys, counts)
        return dict(sorted(found.items()))

    # -- parquet ------------------------------------------------------------------------------------
    def _parquet(self, keys: set[str] | None, counts: bool) -> dict[str, HourFiles]:
        import pyarrow.parquet as pq

        table = locate(self.uri, self._spark)
        found: dict[str, HourFiles] = {}
        if not table.is_dir():
            return found
        for day in table.subdirs():
            if not day.startswith("event_date="):
                continue
            for name in table.child(day).subdirs():
                hour = _hour(day.removeprefix("event_date="), name.removeprefix("event_hour=")) \
                    if name.startswith("event_hour=") else None
                if hour is None or (keys is not None and hour.isoformat() not in keys):
                    continue
                directory: Location = table.child(day, name)
                entry = found.setdefault(hour.isoformat(), HourFiles(hour))
                for path in directory.files():
                    entry.files.append(f"{directory.uri.rstrip('/')}/{path[len(directory.path):].lstrip('/')}")
                    if counts:
                        with table.fs.open_input_file(path) as handle:
                            entry.events += pq.read_metadata(handle).num_rows
        return found

    # -- delta --------------------------------------------------------------------------------------
    def _io(self) -> TableIO:
        return table_io(self.config.root, self.config.spark.conf).child(self.channel)

    def _delta(self, keys: set[str] | None) -> dict[str, HourFiles]:
        import pyarrow as pa
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        io = self._io()
        try:
            table = DeltaTable(io.uri, storage_options=io.delta_options or None)
        except TableNotFoundError:
            return {}
        actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
        found: dict[str, HourFiles] = {}
        for path, date, hour_text, records in zip(actions["path"], actions["partition.event_date"],
                                                  actions["partition.event_hour"], actions["num_records"],
                                                  strict=True):
            hour = _hour(str(date), str(hour_text))
            if hour is None or (keys is not None and hour.isoformat() not in keys):
                continue
            entry = found.setdefault(hour.isoformat(), HourFiles(hour))
            where = path if "://" in path or path.startswith("/") else f"{io.uri.rstrip('/')}/{path}"
            entry.files.append(io.to_spark(where))
            entry.events += int(records or 0)
        return found

    # -- iceberg ------------------------------------------------------------------------------------
    def _iceberg(self, keys: set[str] | None) -> dict[str, HourFiles]:
        from ..land.tables.iceberg import IcebergLanded

        io = self._io()
        table = IcebergLanded(io, self.channel, catalog=self.config.iceberg_catalog,
                              namespace=self.config.iceberg_namespace).load()
        found: dict[str, HourFiles] = {}
        if table is None or table.current_snapshot() is None:
            return found
        for task in table.scan().plan_files():
            if task.delete_files:
                raise CurationError(f"the landed Iceberg table {'.'.join(table.name())} has row deletes (delete "
                                   "files); the curation reads whole data files only: rewrite the table's data "
                                   "files (compaction) before curating")
            data = task.file
            hour = _hour(str(data.partition[0]), str(data.partition[1]))
            if hour is None or (keys is not None and hour.isoformat() not in keys):
                continue
            entry = found.setdefault(hour.isoformat(), HourFiles(hour))
            entry.files.append(io.to_spark(data.file_path))
            entry.events += int(data.record_count)
        return found


def landed_source(config: LandingConfig, channel: str, spark: Any = None) -> LandedSource:
    """The landed table of ``channel`` under ``config`` (``spark``: the session whose Hadoop client
    lists a Parquet table on HDFS or S3A)."""
    return LandedSource(config, channel, spark)
