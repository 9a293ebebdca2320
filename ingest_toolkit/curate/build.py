"""One curated hour: read the landed rows of the window, one row per event, parse, type, replace.

For the window ``[start, end)`` of a curated partition (one hour in the partitions' zone):

1. the landed files of the UTC hours that overlap it are read (:mod:`.source`: the table's
   current files in each format) and the rows whose ``event_time`` is in the window kept;
2. one row per ``event_id`` (the earliest landed: :func:`dedupe_earliest`);
3. the body is parsed (:mod:`.parse`) and the distinct shapes of the parsed bodies give the
   fields, their types and how many rows have each (:func:`.schema.observe`);
4. the table's schema evolves under the contract (:func:`.schema.evolve`); ``freeze`` fails the
   run here, before anything is written, naming the field (or the value) and an event;
5. the rows are typed (:mod:`.columns`): what does not fit goes to ``_rescued_data``, what a
   contract drops is counted;
6. the table's partition of the hour is replaced, with the schema and its change recorded
   (:mod:`.formats`: atomic in each format).

A rebuild of an hour gives the same rows (the same events survive deduplication; the schema only
grows), so re-running a partition is idempotent. Runs of the same partition must not overlap (the
orchestrator's pool ``curated-<channel>``); different partitions may.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pendulum

from ..errors import ConfigError, ContractViolation
from ..land.storage import locate
from .columns import RESCUED, SPARK_TYPES, ShapePlan, expressions, plan_frame, plan_shapes, text_paths
from .parse import ParsedBody
from .schema import Column, CuratedSchema, Evolution, Observed, column_name, evolve, load_schema_file, observe
from .settings import Curation
from .source import landed_source
from .tables import PARTITION_COLUMNS, CuratedTable, SchemaChange, partition_values

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

    from ..land.config import LandingConfig

__all__ = ["ContractViolation", "CuratedResult", "curate_hour", "dedupe_earliest", "landed_schema",
           "open_curated", "utc_hours"]

LANDED_COLUMNS = ("event_id", "batch_id", "event_time", "ingest_time", "headers", "body", "seq")
_SHAPE = "_shape"  # the variant schema of the parsed body (schema_of_variant), "NULL" when it does not parse
_FIELDS = "_fields"  # the row's fields as the typed reads take them (ParsedBody.fields)


@dataclass(frozen=True)
class CuratedResult:
    """What one curated partition holds and how it was built (the materialization's metadata)."""

    path: str
    rows: int
    duplicates_dropped: int
    landed_hours: list[str]
    window_utc: tuple[str, str]
    format: str = "parquet"
    parser: str = "none"
    landed_files: int = 0
    columns: int = 0
    columns_added: list[str] = field(default_factory=list)
    rescued_rows: int = 0
    discarded_rows: int = 0
    unparsed_rows: int = 0
    schema_created: bool = False  # this build created the table's schema (its first columns are no drift)

    @property
    def rescued_share(self) -> float:
        return self.rescued_rows / self.rows if self.rows else 0.0


def landed_schema() -> Any:
    """Columns of the landed table (the landing contract), used when an hour has no files."""
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType([
        StructField("event_id", StringType(), False), StructField("batch_id", StringType(), True),
        StructField("event_time", TimestampType(), True), StructField("ingest_time", TimestampType(), True),
        StructField("headers", MapType(StringType(), StringType()), True), StructField("body", BinaryType(), True),
        StructField("seq", LongType(), True)])


def utc_hours(start: datetime, end: datetime) -> list[pendulum.DateTime]:
    """The UTC hours that overlap ``[start, end)`` (several for a partition in a half-hour zone)."""
    first = pendulum.instance(start).in_timezone("UTC").start_of("hour")
    last = pendulum.instance(end).in_timezone("UTC")
    hours = []
    while first < last:
        hours.append(first)
        first = first.add(hours=1)
    return hours


def dedupe_earliest(frame: DataFrame) -> DataFrame:
    """One row per ``event_id``: the earliest landed (``ingest_time``, then ``batch_id``).

    ``dropDuplicates`` keeps whichever row Spark meets first, which depends on file order and
    task scheduling; a rebuild must keep the same row.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("event_id").orderBy(F.col("ingest_time").asc_nulls_last(),
                                                   F.col("batch_id").asc_nulls_last())
    return frame.withColumn("_rank", F.row_number().over(order)).where(F.col("_rank") == 1).drop("_rank")


def open_curated(table_format: str, curated_root: str, channel: str, landing: LandingConfig,
                 spark: Any = None) -> CuratedTable:
    """The curated table of ``channel`` below ``curated_root`` in ``table_format`` (an Iceberg
    one lives in the landing's catalog, as ``<namespace>.<channel>_curated``)."""
    from .formats import DeltaCurated, IcebergCurated, ParquetCurated

    location = locate(curated_root, spark).child(channel)
    if table_format == "parquet":
        return ParquetCurated(location)
    from ..extras import require
    from ..land.tables.io import table_io

    io = table_io(locate(curated_root, spark).uri, landing.spark.conf).child(channel)
    if table_format == "delta":
        require("deltalake", "a Delta curated table", "tables")
        return DeltaCurated(io, location)
    if table_format == "iceberg":
        require("pyiceberg", "an Iceberg curated table", "tables")
        return IcebergCurated(io, location, landing.iceberg_catalog, landing.iceberg_namespace, channel)
    raise ConfigError(f"curated.format = {table_format!r}: one of parquet, delta, iceberg (or auto: the landing's)",
                      key="curated.format")


def _epoch_us(moment: datetime) -> int:
    instant = pendulum.instance(moment)
    return int(instant.timestamp()) * 1_000_000 + instant.microsecond


def _read_window(spark: SparkSession, files: list[str], start: datetime, end: datetime) -> DataFrame:
    """The landed rows of ``files`` whose ``event_time`` is in ``[start, end)``."""
    from pyspark.sql import functions as F

    if not files:
        return spark.createDataFrame([], landed_schema())
    # The files are listed one by one: no partition discovery (an Iceberg file also holds the
    # partition columns its directory names); the landed columns are selected by name.
    frame = spark.read.option("recursiveFileLookup", "true").parquet(*files).select(*LANDED_COLUMNS)
    micros = F.unix_micros(F.col("event_time"))  # instants as microseconds: no session time zone involved
    return frame.where((micros >= F.lit(_epoch_us(start))) & (micros < F.lit(_epoch_us(end))))


def _header_columns(curation: Curation) -> list[Column]:
    return [Column(column_name(("header", name)).replace("header__", "header_", 1), "string", (name,), "header")
            for name in curation.header_columns]


def _fixed_schema(curation: Curation, recorded: CuratedSchema) -> CuratedSchema:
    """The recorded schema plus the columns of the schema file it does not have yet; a column
    the file types otherwise than the table has it is a ConfigError (types never change)."""
    assert curation.schema_file is not None
    wanted = load_schema_file(curation.schema_file, curation.max_depth)
    have = recorded.named()
    for column in wanted.columns:
        if column.name in have and have[column.name].type != column.type:
            raise ConfigError(
                f"schema_file {curation.schema_file}: column {column.name} is {column.type} there but "
                f"{have[column.name].type} in the table; a column's type never changes (no file is rewritten): "
                "give the new type a new column name", key="schema_file")
    return recorded.plus([c for c in wanted.columns if c.name not in have])


class _Hour:
    """The building of one partition (module docstring), step by step."""

    def __init__(self, spark: SparkSession, table: CuratedTable, curation: Curation, channel: str,
                 hour: pendulum.DateTime) -> None:
        self.spark, self.table, self.curation, self.channel, self.hour = spark, table, curation, channel, hour
        self.shapes: list[str] = []
        self.parsed = ParsedBody(spark, curation.parser, curation.pattern) if curation.parser != "none" else None

    def evolution(self, rows: DataFrame) -> Evolution:
        """The schema after this hour's rows: the columns added to the recorded ones (header
        columns, a schema file's, new fields) and the new fields the contract refused. The
        distinct shapes of the rows are kept (:attr:`shapes`) for :meth:`plans`."""
        from pyspark.sql import functions as F

        recorded = self.table.schema() or CuratedSchema()
        base = recorded
        headers = [c for c in _header_columns(self.curation) if c.name not in recorded.named()]
        base = base.plus(headers)
        if self.curation.schema_file:
            base = _fixed_schema(self.curation, base)
        if self.parsed is None:
            return Evolution(base, tuple(c for c in base.columns if c not in recorded.columns), {})
        counted = rows.groupBy(F.col(_SHAPE).alias("shape")).count().collect()
        self.shapes = [str(r["shape"]) for r in counted]
        observed: Mapping[tuple[str, ...], Observed] = observe(
            ((str(r["shape"]), int(r["count"])) for r in counted if str(r["shape"]).startswith("OBJECT<")),
            self.curation.max_depth)
        found = evolve(base, observed, self.curation.contract, fixed=bool(self.curation.schema_file),
                       declared=self.curation.types)
        added = tuple(c for c in found.schema.columns if c not in recorded.columns)
        return Evolution(found.schema, added, found.refused)

    def plans(self, evolution: Evolution) -> list[ShapePlan]:
        body = [c for c in evolution.schema.columns if c.source == "body"]
        return plan_shapes(self.shapes, body, evolution.refused, self.curation.max_depth)

    def _with_plans(self, rows: DataFrame, plans: list[ShapePlan], columns: list[Column]) -> DataFrame:
        """``rows`` with the plan of their shape (broadcast join) and their parsed fields."""
        from pyspark.sql import functions as F

        assert self.parsed is not None
        joined = rows.join(F.broadcast(plan_frame(self.spark, plans, _SHAPE)), _SHAPE, "left")
        return joined.withColumn(_FIELDS, self.parsed.fields(text_paths(columns)))

    def refuse_frozen(self, rows: DataFrame, evolution: Evolution, plans: list[ShapePlan]) -> None:
        """``freeze``: a new field, or a value that does not fit its column, fails the run
        (before anything is written), naming it and the first event (by id) that has it."""
        from pyspark.sql import functions as F

        for plan in plans:
            for path in plan.frozen:
                name = evolution.refused[path][0]
                shapes = [p.shape for p in plans if path in p.frozen]
                event = rows.where(F.col(_SHAPE).isin(shapes)).agg(F.min("event_id")).collect()[0][0]
                raise ContractViolation(
                    f"channel {self.channel}, hour {self.hour.isoformat()}: field {'.'.join(path)} (column {name}) is "
                    f"not in the table's schema and the contract freezes columns (curated contract.columns = "
                    f"\"freeze\"); first in event {event}. Add the column to the schema file, or let it in "
                    f"(contract.columns = \"evolve\", or a column_patterns entry for {name})")
        if self.curation.contract.data_type != "freeze" or self.parsed is None:
            return
        suspects = [p.shape for p in plans if p.misfit or p.check]
        if not suspects:
            return
        columns = [c for c in evolution.schema.columns if c.source == "body"]
        joined = self._with_plans(rows.where(F.col(_SHAPE).isin(suspects)), plans, columns)
        exprs = expressions(self.parsed, F.col(_FIELDS), F.col(_SHAPE), columns, {}, "freeze")
        names = list(exprs.misfits)
        found = joined.agg(*(F.min(F.when(exprs.misfits[n], F.col("event_id"))).alias(f"m{i}")
                             for i, n in enumerate(names))).collect()[0]
        for i, name in enumerate(names):
            if found[f"m{i}"] is not None:
                column = next(c for c in columns if c.name == name)
                raise ContractViolation(
                    f"channel {self.channel}, hour {self.hour.isoformat()}: a value of field "
                    f"{'.'.join(column.path)} does not fit column {column.name} ({column.type}) and the contract "
                    f"freezes data types (curated contract.data_type = \"freeze\"); first in event "
                    f"{found[f'm{i}']}. Fix the producer, or rescue such values (contract.data_type = "
                    "\"discard_value\" or \"evolve\")")

    def typed(self, rows: DataFrame, schema: CuratedSchema, evolution: Evolution,
              plans: list[ShapePlan]) -> DataFrame:
        """The rows with the schema's columns, and ``_dropped`` (a contract drops the row) and
        ``_unparsed`` (the body did not parse into an object)."""
        from pyspark.sql import functions as F

        values = partition_values(self.hour)
        keep = [c for c in LANDED_COLUMNS if c != "body" or self.curation.keep_body or self.parsed is None]
        selected: list[SparkColumn] = [F.col(c) for c in keep]
        header = [c for c in schema.columns if c.source == "header"]
        selected += [F.col("headers")[c.path[0]].alias(c.name) for c in header]
        unparsed: SparkColumn = F.lit(False)  # parser "none": nothing to parse
        dropped: SparkColumn = F.lit(False)
        if self.parsed is not None:
            body = [c for c in schema.columns if c.source == "body"]
            rows = self._with_plans(rows, plans, body)
            exprs = expressions(self.parsed, F.col(_FIELDS), F.col(_SHAPE), body, evolution.refused,
                                self.curation.contract.data_type)
            selected += [exprs.values[c.name].cast(SPARK_TYPES[c.type]).alias(c.name) for c in body]
            selected.append(exprs.rescued.alias(RESCUED))
            dropped = exprs.dropped
            unparsed = ~F.col(_SHAPE).startswith("OBJECT<") & F.col("body").isNotNull()
        selected += [F.lit(values[name]).alias(name) for name in PARTITION_COLUMNS]
        selected.append(dropped.alias("_dropped"))
        return rows.select(*selected, unparsed.alias("_unparsed"))


def _counts(built: DataFrame, evolution: Evolution) -> dict[str, Any]:
    """Rows, dropped, rescued and unparsed rows of a typed hour, and the first batch (by id) with a
    value of each added column: one pass."""
    from pyspark.sql import functions as F

    kept = ~F.col("_dropped")
    rescued = (F.col(RESCUED).isNotNull() & kept) if RESCUED in built.columns else F.lit(False)
    firsts = [F.min(F.when(F.col(c.name).isNotNull(), F.col("batch_id"))).alias(f"b{i}")
              for i, c in enumerate(evolution.added)]
    found = built.agg(F.count(F.lit(1)).alias("rows"), F.sum(F.col("_dropped").cast("long")).alias("dropped"),
                      F.sum(rescued.cast("long")).alias("rescued"),
                      F.sum((F.col("_unparsed") & kept).cast("long")).alias("unparsed"), *firsts).collect()[0]
    batches = sorted({found[f"b{i}"] for i in range(len(evolution.added)) if found[f"b{i}"] is not None})
    return {"rows": int(found["rows"]), "dropped": int(found["dropped"] or 0), "rescued": int(found["rescued"] or 0),
            "unparsed": int(found["unparsed"] or 0), "batches": batches}


def curate_hour(spark: SparkSession, landing: LandingConfig, curated_root: str, channel: str, start: datetime,
                end: datetime, curation: Curation | None = None, *, run_id: str = "") -> CuratedResult:
    """Build (or rebuild) the curated partition ``[start, end)`` of ``channel`` (module docstring);
    ``run_id``: the orchestrator's run, recorded with a schema change."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    curation = curation or Curation()
    table_format = curation.table_format(landing.format)
    hours = utc_hours(start, end)
    found = landed_source(landing, channel, spark).hours(hours, counts=False)
    files = [f for entry in found.values() for f in entry.files]
    table = open_curated(table_format, curated_root, channel, landing, spark)
    building = _Hour(spark, table, curation, channel, hours[0])

    order = Window.partitionBy("event_id").orderBy(F.col("ingest_time").asc_nulls_last(),
                                                   F.col("batch_id").asc_nulls_last())
    ranked = _read_window(spark, files, start, end).withColumn("_rank", F.row_number().over(order))
    if building.parsed is not None:  # the shape of each kept row, computed once and cached with it
        shape = F.coalesce(F.schema_of_variant(building.parsed.variant()), F.lit("NULL"))
        ranked = ranked.withColumn(_SHAPE, F.when(F.col("_rank") == 1, shape))
    ranked = ranked.persist()
    built = None
    try:
        total = ranked.count()
        rows = ranked.where(F.col("_rank") == 1).drop("_rank")
        created = table.schema() is None
        evolution = building.evolution(rows)
        schema = evolution.schema
        plans = building.plans(evolution) if building.parsed is not None else []
        building.refuse_frozen(rows, evolution, plans)
        built = building.typed(rows, schema, evolution, plans).persist()
        stats = _counts(built, evolution)
        # one file per hour, in event order (one shuffle into one partition and a local sort:
        # no range-partitioning sample job, as orderBy would run)
        kept = (built.where(~F.col("_dropped")).drop("_dropped", "_unparsed").repartition(1)
                .sortWithinPartitions("event_time", "event_id"))
        change = None
        if evolution.added:
            change = SchemaChange(added=[c.to_json() for c in evolution.added],
                                  at=pendulum.now("UTC").isoformat(), run=run_id, hour=hours[0].isoformat(),
                                  batches=stats["batches"])
        path = table.replace_hour(kept, hours[0], schema, change)
    finally:
        for frame in (ranked, built):
            if frame is not None:
                frame.unpersist()
    window = (pendulum.instance(start).in_timezone("UTC").isoformat(),
              pendulum.instance(end).in_timezone("UTC").isoformat())
    kept_rows = stats["rows"] - stats["dropped"]
    return CuratedResult(path, kept_rows, total - stats["rows"], list(found), window, format=table_format,
                         parser=curation.parser, landed_files=len(files), columns=len(schema.columns),
                         columns_added=[c.name for c in evolution.added], rescued_rows=stats["rescued"],
                         discarded_rows=stats["dropped"], unparsed_rows=stats["unparsed"], schema_created=created)
