"""Curation benchmark: typed columns from JSON bodies, and what a schema change costs.

Run from the repository root with the project's virtualenv::

    python bench/curation.py                    # 1M events, 100 partitions per format, ~15 minutes here
    python bench/curation.py --quick            # 100k events, 10 partitions: a smoke run
    python bench/curation.py --help             # sizes, repeats, formats, --json

**Parsing** (one landed hour of ``--events`` JSON events of about 250 bytes: 10 fields, 2 of them
nested objects, written as the landing writes it): ``curate_hour`` with ``parser = "json"``
(parse, infer, type, rescue) against ``parser = "none"`` (the same read, deduplication and
replacement, no parsing), alternately in the same Spark session, ``--repeats`` times each; the
figures are medians. The ratio json/none is the price of typed columns (goal: >= 0.5x).

**Schema change** (per ``--formats``): ``--partitions`` hourly partitions are curated (not timed),
then the last hour is landed again with one more field and rebuilt: the timed build adds a column.
It is compared with a rebuild of the same hour without a change, and every data file of the other
hours is checked to be untouched (path, size, modification time): a schema change rewrites no
existing file (goal).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pendulum  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from ingest_toolkit.channel import Event  # noqa: E402
from ingest_toolkit.curate import CuratedSettings, curate_hour, open_curated  # noqa: E402
from ingest_toolkit.land import LandingConfig, SparkSettings, spark_session  # noqa: E402
from ingest_toolkit.land.batches import build_table  # noqa: E402

HOUR = pendulum.datetime(2026, 11, 20, 0, tz="UTC")
_ACTIONS = ("view", "click", "search", "add_to_cart", "checkout", "logout")


def body(rng: random.Random, i: int, extra: bool = False) -> bytes:
    """About 250 bytes of JSON: 10 fields, 2 of them nested objects."""
    record: dict[str, Any] = {
        "n": i, "level": rng.choice(("info", "warn", "error")), "action": rng.choice(_ACTIONS),
        "amount": round(rng.uniform(0, 250), 2), "ok": rng.random() < 0.9, "session": f"s-{rng.getrandbits(48):012x}",
        "path": f"/shop/item/{rng.randrange(10_000)}", "latency_ms": rng.randrange(1, 900),
        "user": {"id": f"user-{rng.randrange(100_000):06d}", "plan": rng.choice(("free", "pro")),
                 "age": rng.randrange(18, 90)},
        "client": {"os": rng.choice(("linux", "macos", "ios", "android")),
                   "version": f"{rng.randrange(9)}.{rng.randrange(20)}", "locale": "fr-FR"}}
    if extra:
        record["campaign"] = "winter"
    return json.dumps(record, separators=(",", ":")).encode()


def land_hour(root: Path, channel: str, hour: pendulum.DateTime, events: int, seed: int, extra: bool = False,
              start_seq: int = 1) -> None:
    """``events`` events of ``hour`` as the landing writes a Parquet hour (one file per 100k rows)."""
    rng = random.Random(seed)
    base_ms = int(hour.timestamp() * 1000)
    target = root / channel / f"event_date={hour.format('YYYY-MM-DD')}" / f"event_hour={hour.format('HH')}"
    target.mkdir(parents=True, exist_ok=True)
    for chunk, first in enumerate(range(0, events, 100_000)):
        count = min(100_000, events - first)
        batch = [Event(body(rng, first + i, extra), {"timestamp": str(base_ms + (first + i) * 3_599_000 // events)})
                 for i in range(count)]
        table = build_table(batch, channel_id=b"\x07" * 16, batch_id=f"b{seed}-{chunk}",
                            ingest_time_us=int(time.time() * 1e6))
        seqs = pa.array(range(start_seq + first, start_seq + first + count), pa.int64())
        table = table.set_column(table.schema.get_field_index("seq"), "seq", seqs)
        ids = pa.array([f"{'07' * 16}-{s:020d}" for s in seqs.to_pylist()], pa.string())
        table = table.set_column(table.schema.get_field_index("event_id"), "event_id", ids)
        pq.write_table(table.drop_columns(["event_date", "event_hour"]), target / f"part-{seed}-{chunk}.parquet")


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def parsing(spark: Any, work: Path, events: int, repeats: int) -> dict[str, Any]:
    landing = LandingConfig.build(root=str(work / "landing"))
    land_hour(work / "landing", "events", HOUR, events, seed=1)
    runs: dict[str, list[float]] = {"json": [], "none": []}
    last: dict[str, Any] = {}
    for parser in ("json", "none"):  # warm-up: JVM code generation in neither figure
        curate_hour(spark, landing, str(work / f"warm-{parser}"), "events", HOUR, HOUR.add(hours=1),
                    CuratedSettings(parser=parser).for_channel("events"))
    for repeat in range(repeats):
        for parser in (("json", "none") if repeat % 2 == 0 else ("none", "json")):
            root = work / f"curated-{parser}-{repeat}"
            seconds, result = timed(lambda p=parser, r=root: curate_hour(  # type: ignore[misc]
                spark, landing, str(r), "events", HOUR, HOUR.add(hours=1), CuratedSettings(parser=p).for_channel(
                    "events")))
            assert result.rows == events, result
            runs[parser].append(seconds)
            last[parser] = result
            shutil.rmtree(root, ignore_errors=True)
    medians = {parser: statistics.median(values) for parser, values in runs.items()}
    typed = last["json"]
    return {"events": events, "seconds": medians, "events_per_s": {p: events / s for p, s in medians.items()},
            "ratio_json_over_none": medians["none"] / medians["json"], "columns": typed.columns,
            "rescued_rows": typed.rescued_rows, "runs": runs}


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*.parquet")}


def schema_change(spark: Any, work: Path, table_format: str, partitions: int, per_hour: int) -> dict[str, Any]:
    root = work / f"change-{table_format}"
    raw = root / "raw"  # the landed hours as plain Parquet: the curation reads them in the landing's format
    hours = [HOUR.add(hours=h) for h in range(partitions)]
    for h, hour in enumerate(hours):
        land_hour(raw, "events", hour, per_hour, seed=100 + h, start_seq=1 + h * per_hour)
    catalog = {"iceberg_catalog": f"sqlite:///{root / 'catalog.db'}"} if table_format == "iceberg" else {}
    source = LandingConfig.build(root=str(raw), **catalog)  # the curated Iceberg table goes in its catalog
    curation = CuratedSettings(format=table_format).for_channel("events")
    curated = str(root / "curated")
    started = time.perf_counter()
    for hour in hours:
        curate_hour(spark, source, curated, "events", hour, hour.add(hours=1), curation)
    build_all = time.perf_counter() - started
    table = open_curated(table_format, curated, "events", source)
    others = {path for path in table.data_files() if f"event_hour={hours[-1].format('HH')}" not in path
              or f"event_date={hours[-1].format('YYYY-MM-DD')}" not in path}
    before = {k: v for k, v in _files(Path(curated)).items() if str(Path(curated) / k) in others}
    plain_s, _ = timed(lambda: curate_hour(spark, source, curated, "events", hours[-1], hours[-1].add(hours=1),
                                           curation))
    shutil.rmtree(raw / "events" / f"event_date={hours[-1].format('YYYY-MM-DD')}" /
                  f"event_hour={hours[-1].format('HH')}")
    land_hour(raw, "events", hours[-1], per_hour, seed=100 + partitions - 1, extra=True,
              start_seq=1 + (partitions - 1) * per_hour)
    change_s, result = timed(lambda: curate_hour(spark, source, curated, "events", hours[-1], hours[-1].add(hours=1),
                                                 curation, run_id="bench"))
    assert result.columns_added == ["campaign"], result
    after = _files(Path(curated))
    rewritten = sorted(k for k, v in before.items() if after.get(k) != v)
    return {"format": table_format, "partitions": partitions, "events_per_hour": per_hour,
            "build_all_s": build_all, "rebuild_without_change_s": plain_s, "rebuild_with_new_column_s": change_s,
            "ratio_change_over_plain": change_s / plain_s, "files_of_other_hours": len(before),
            "files_rewritten": len(rewritten)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--per-hour", type=int, default=1000)
    parser.add_argument("--formats", default="parquet,delta,iceberg")
    parser.add_argument("--quick", action="store_true", help="100k events, 10 partitions, 1 repeat")
    parser.add_argument("--skip-parsing", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    if args.quick:
        args.events, args.partitions, args.repeats = 100_000, 10, 1
    spark = spark_session(SparkSettings(master="local[2]", app_name="bench-curation",
                                        conf={"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "4g"}))
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bench-curation-"))
    figures: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                                          f"{platform.python_version()}, Spark {spark.version}"}
    try:
        print(figures["machine"])
        if not args.skip_parsing:
            found = parsing(spark, work, args.events, args.repeats)
            figures["parsing"] = found
            eps = found["events_per_s"]
            print(f"parsing {found['events']:,} JSON events (~250 B, 10 fields, 2 nested), median of {args.repeats}: "
                  f"json {eps['json']:,.0f} events/s ({found['seconds']['json']:.1f} s, {found['columns']} columns), "
                  f"none {eps['none']:,.0f} events/s ({found['seconds']['none']:.1f} s): ratio json/none "
                  f"{found['ratio_json_over_none']:.2f}x (goal >= 0.5x)")
        figures["schema_change"] = []
        for table_format in [f for f in args.formats.split(",") if f]:
            change = schema_change(spark, work, table_format, args.partitions, args.per_hour)
            figures["schema_change"].append(change)
            print(f"schema change, {table_format}, {change['partitions']} hourly partitions of "
                  f"{change['events_per_hour']} events: rebuild of the last hour "
                  f"{change['rebuild_without_change_s']:.2f} s "
                  f"without a change, {change['rebuild_with_new_column_s']:.2f} s adding a column (ratio "
                  f"{change['ratio_change_over_plain']:.2f}x); files of the other hours rewritten: "
                  f"{change['files_rewritten']} of {change['files_of_other_hours']} (goal 0); building all "
                  f"{change['partitions']} took {change['build_all_s']:.0f} s")
        if args.json:
            print(json.dumps(figures, indent=1, default=str))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
