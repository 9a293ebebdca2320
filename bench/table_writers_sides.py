"""The children of bench/table_writers.py: one writer or reader each, in the process the driver
measures. The Spark side runs under PySpark 4.1 (a separate virtualenv): nothing here imports
ingest_toolkit except the Arrow side and the Spark 4.3 reader, which run in the project's."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

CHANNEL_ID = "ab" * 16
APP = f"ingest-toolkit/{CHANNEL_ID}"
TABLE = "ingest.ingest.events"  # Spark: catalog "ingest" (the name PyIceberg's catalog rows carry), namespace, table


def _batches(path: str, batch: int) -> list[Any]:
    import pyarrow.parquet as pq

    rows = pq.read_table(path)
    return [rows.slice(at, batch) for at in range(0, rows.num_rows, batch)]


def arrow_write(args: Any, s3: dict[str, str]) -> dict[str, Any]:
    """The table layer's commits (delta-rs, PyIceberg), each after its redelivery check."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ingest_toolkit.land import LandingConfig, SparkSettings
    from ingest_toolkit.land.batches import seq_ranges
    from ingest_toolkit.land.tables import Batch, open_landed

    def commit(root: str, chunks: list[Any]) -> None:
        catalog = f"{args.catalog}.warm" if root.endswith("-warm") else args.catalog  # a table of its own
        config = LandingConfig.build(root=root, format=args.format, iceberg_catalog=f"sqlite:///{catalog}",
                                     spark=SparkSettings(conf=s3))
        table = open_landed(config, "events")
        for i, chunk in enumerate(chunks):
            ranges = tuple(seq_ranges(chunk.column("seq").combine_chunks()))
            landed = table.landed(bytes.fromhex(CHANNEL_ID), ranges[0][0], ranges[-1][1])
            table.commit(Batch("events", bytes.fromhex(CHANNEL_ID), f"b{i}", chunk, ranges), landed,
                         phase=lambda _p: None, before_commit=lambda: None)

    return _timed(args, lambda root, chunks: commit(root, chunks), 0.0)


def _timed(args: Any, write: Any, start_s: float) -> dict[str, Any]:
    """A warm-up batch into a table of its own, then every batch into ``<root>`` (timed)."""
    chunks = _batches(args.input, args.batch)
    write(f"{args.root}-warm", [chunks[0].slice(0, 10_000)])
    started = time.perf_counter()
    write(args.root, chunks)
    seconds = time.perf_counter() - started
    rows = sum(c.num_rows for c in chunks)
    return {"rows": rows, "batches": len(chunks), "seconds": round(seconds, 3),
            "events_per_s": round(rows / seconds), "start_s": round(start_s, 2)}


def _spark41(args: Any, s3: dict[str, str], catalog_root: str) -> Any:
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("writers")
               .config("spark.jars", args.jars).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "3g")
               .config("spark.sql.shuffle.partitions", "8")  # as the landing's session (land/config.py)
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension,"
                                               "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
               .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
               # Delta rebuilds its snapshot with a Spark job of 50 tasks by default: 2 on local[2] (2x faster)
               .config("spark.databricks.delta.snapshotPartitions", "2")
               .config("spark.sql.catalog.ingest", "org.apache.iceberg.spark.SparkCatalog")
               .config("spark.sql.catalog.ingest.type", "jdbc")
               .config("spark.sql.catalog.ingest.uri", f"jdbc:sqlite:{args.catalog}")
               .config("spark.sql.catalog.ingest.jdbc.schema-version", "V1")  # Iceberg 1.12 asks for it
               .config("spark.sql.catalog.ingest.warehouse", catalog_root))
    for key, value in s3.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_write(args: Any, s3: dict[str, str]) -> dict[str, Any]:
    """delta-spark with txnAppId/txnVersion; Iceberg's Spark writer with a snapshot property, after
    reading the snapshots' summaries (Spark cannot commit a table property with the append)."""
    started = time.perf_counter()
    spark = _spark41(args, s3, f"{args.root}-wh")
    start_s = time.perf_counter() - started

    def write(root: str, chunks: list[Any]) -> None:
        table = f"{TABLE}_warm" if root.endswith("-warm") else TABLE
        for n, chunk in enumerate(chunks, 1):
            frame = spark.createDataFrame(chunk)
            if args.format == "parquet":  # Spark 4.1's plain write: the baseline of the connectors
                frame.write.mode("append").partitionBy("event_date", "event_hour").parquet(f"{root}/events")
                continue
            if args.format == "delta":
                (frame.write.format("delta").mode("append").partitionBy("event_date", "event_hour")
                 .option("txnAppId", APP).option("txnVersion", n).save(f"{root}/events"))
                continue
            if spark.catalog.tableExists(table):
                seen = spark.sql(f"SELECT summary['ingest.batch'] AS b FROM {table}.snapshots").collect()
                if any(row.b == str(n) for row in seen):
                    continue
                frame.writeTo(table).option("snapshot-property.ingest.batch", str(n)).append()
            else:
                from pyspark.sql.functions import col

                (frame.writeTo(table).partitionedBy(col("event_date"), col("event_hour"))
                 .tableProperty("commit.retry.num-retries", "0")
                 .option("snapshot-property.ingest.batch", str(n)).create())

    return _timed(args, write, start_s)


def spark43_write(args: Any, _s3: dict[str, str]) -> dict[str, Any]:
    """The project's own Spark writer (PySpark 4.3, ``write_parquet``: the plain Parquet landing's
    write, without its manifest and moves), on the same rows."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ingest_toolkit.land import LandingConfig, SparkSettings, spark_session
    from ingest_toolkit.land.spark import write_parquet

    started = time.perf_counter()
    config = LandingConfig.build(root=args.root, spark=SparkSettings(master="local[2]",
                                                                    conf={"spark.driver.memory": "3g"}))
    spark = spark_session(config.spark)
    start_s = time.perf_counter() - started

    def write(root: str, chunks: list[Any]) -> None:
        for n, chunk in enumerate(chunks):
            write_parquet(spark, chunk, f"{root}/events/batch-{n}", config)

    return _timed(args, write, start_s)


def spark43_read(args: Any, _s3: dict[str, str]) -> dict[str, Any]:
    """Spark 4.3 without connectors on an Arrow-written table: a directory scan against the table
    layer's file list, and the row count the format's library reads."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pyspark.sql import SparkSession

    from ingest_toolkit.land import LandingConfig
    from ingest_toolkit.land.tables.reading import open_reader

    config = LandingConfig.build(root=args.root, format=args.format, iceberg_catalog=f"sqlite:///{args.catalog}")
    reader = open_reader(config, "events")
    truth = sum(len(ids) for _p, ids in reader.event_ids())
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    directory = f"{config.root}/events" + ("/data" if args.format == "iceberg" else "")
    scanned = spark.read.parquet(directory)
    files = [f.uri if "://" in f.uri else f"file://{f.uri}" for f in reader.files()]
    listed = spark.read.option("basePath", directory).parquet(*files)
    return {"truth": truth, "directory_scan_rows": scanned.count(), "file_list_rows": listed.count(),
            "event_hour_type": dict(scanned.dtypes).get("event_hour", "missing")}


def spark41_read(args: Any, s3: dict[str, str]) -> dict[str, Any]:
    """Spark 4.1 with the connectors on an Arrow-written table: rows now, and time travel to the
    first batch's version."""
    spark = _spark41(args, s3, args.root)
    if args.format == "delta":
        path = f"{args.root}/events"
        now = spark.read.format("delta").load(path).count()
        first = spark.read.format("delta").option("versionAsOf", 1).load(path).count()
    else:
        now = spark.table(TABLE).count()
        snapshots = spark.sql(f"SELECT snapshot_id, summary['ingest.batch'] AS b FROM {TABLE}.snapshots").collect()
        sid = next(row.snapshot_id for row in snapshots if row.b == "1")
        first = spark.sql(f"SELECT count(*) AS n FROM {TABLE} VERSION AS OF {sid}").collect()[0].n
    return {"rows": now, "first_batch_version_rows": first}


def arrow_read(args: Any, _s3: dict[str, str]) -> dict[str, Any]:
    """delta-rs and PyIceberg on the Spark-written tables."""
    if args.format == "delta":
        import pyarrow as pa
        from deltalake import DeltaTable

        table = DeltaTable(f"{args.root}/events")
        rows = pa.RecordBatchReader.from_stream(table.scan(columns=["event_id"])).read_all().num_rows
        return {"rows": rows, "protocol": str(table.protocol())}
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("ingest", uri=f"sqlite:///{args.catalog}")
    return {"rows": catalog.load_table(("ingest", "events")).scan(selected_fields=("event_id",)).to_arrow().num_rows}
