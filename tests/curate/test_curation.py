"""Curated hours built with Spark from tables the real landing wrote, in every table format:
typed columns inferred from the bodies, the schema grown (never rewritten) by later hours, values
that do not fit rescued, each contract mode, schema files, logfmt and regex bodies."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ingest_toolkit.errors import ContractViolation

from .helpers import HOUR, Tables, json_events

pytestmark = pytest.mark.integration

FORMATS = ("parquet", "delta", "iceberg")


@pytest.fixture
def tables(tmp_path: Path, spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[Tables]:
    made = Tables(tmp_path, getattr(request, "param", "parquet"), spark)
    yield made
    made.close()


def _body(i: int) -> dict[str, object]:
    return {"level": "info" if i % 3 else "warn", "n": i, "latency": i / 4, "ok": i % 2 == 0, "tags": ["a", "b"],
            "user": {"id": f"u{i % 5}", "geo": {"country": "FR"}}}


@pytest.mark.parametrize("tables", FORMATS, indirect=True)
def test_bodies_become_typed_columns_and_later_fields_new_columns_without_rewriting(tables: Tables) -> None:
    batch = tables.land(json_events([_body(i) for i in range(40)] + [b"not json at all"]))
    first = tables.curate(run_id="run-1", header_columns=["host"])
    assert (first.rows, first.unparsed_rows, first.rescued_rows, first.format) == (41, 1, 1, tables.format)
    assert first.columns_added == ["header_host", "latency", "level", "n", "ok", "tags", "user__geo__country",
                                   "user__id"]
    rows = tables.rows()
    assert rows[3]["n"] == 3 and rows[3]["latency"] == 0.75 and rows[3]["ok"] is False
    assert rows[3]["tags"] == ["a", "b"] and rows[3]["user__id"] == "u3" and rows[3]["user__geo__country"] == "FR"
    assert rows[3]["header_host"] == "web-1" and rows[3]["_rescued_data"] is None and "body" not in rows[3]
    assert json.loads(rows[40]["_rescued_data"]) == {"_body": "not json at all"} and rows[40]["n"] is None
    files_before = set(tables.table().data_files())

    later = HOUR.add(hours=1)
    late_batch = tables.land(json_events([{**_body(i), "plan": "pro"} for i in range(10)], later))
    second = tables.curate(later, run_id="run-2")
    assert second.columns_added == ["plan"] and second.columns == 9
    assert files_before <= set(tables.table().data_files())  # the first hour's files are untouched
    everything = tables.rows()
    assert len(everything) == 51 and {r["plan"] for r in everything[:41]} == {None}
    assert {r["plan"] for r in everything[41:]} == {"pro"}
    changes = tables.table().changes()
    assert [(c["run"], c["hour"], c["batches"]) for c in changes] == [
        ("run-1", HOUR.isoformat(), [batch]), ("run-2", later.isoformat(), [late_batch])]
    assert [c["name"] for c in changes[1]["added"]] == ["plan"]

    again = tables.curate(run_id="run-3")  # a rebuild: same rows, no change recorded
    assert (again.rows, again.columns_added) == (41, []) and len(tables.rows()) == 51
    assert len(tables.table().changes()) == 2


def test_a_field_whose_type_changes_halfway_through_a_batch_keeps_one_type_and_rescues_the_rest(
        tables: Tables) -> None:
    bodies = [{"id": i, "amount": i} for i in range(30)] + [{"id": i, "amount": f"{i} EUR"} for i in range(30, 50)]
    tables.land(json_events(bodies))
    result = tables.curate()
    assert tables.table().schema().named()["amount"].type == "long"  # 30 of 50 values are integers
    assert result.rescued_rows == 20 and result.rows == 50
    rows = tables.rows()
    assert [r["amount"] for r in rows[:30]] == list(range(30)) and {r["amount"] for r in rows[30:]} == {None}
    assert json.loads(rows[45]["_rescued_data"]) == {"amount": "45 EUR"}
    # 7.5 does not fit a long column either (it would read as 7), nor an object a string column
    tables.land(json_events([{"id": 1, "amount": 7.5}, {"id": 2, "amount": 8}], HOUR.add(minutes=30)))
    rebuilt = tables.curate()
    by_id = {(r["id"], r["amount"]): r["_rescued_data"] for r in tables.rows() if r["event_time"].minute == 30}
    assert by_id == {(1, None): '{"amount":7.5}', (2, 8): None} and rebuilt.rescued_rows == 21


def test_freeze_fails_the_run_naming_the_field_and_an_event_and_writes_nothing(tables: Tables) -> None:
    tables.land(json_events([{"a": 1}]))
    tables.curate()
    tables.land(json_events([{"a": 2, "b": {"c": True}}], HOUR.add(minutes=5)))
    with pytest.raises(ContractViolation, match=r"field b\.c \(column b__c\) is not in the table's schema and the "
                                                r"contract freezes columns .*first in event [0-9a-f]{32}-\d+"):
        tables.curate(contract={"columns": "freeze"})
    assert [r["a"] for r in tables.rows()] == [1]  # the hour as it was
    tables.land(json_events([{"a": "x"}], HOUR.add(minutes=6)))
    with pytest.raises(ContractViolation, match=r"a value of field a does not fit column a \(long\).*data_type = "
                                                r"\"freeze\""):
        tables.curate(contract={"columns": "discard_value", "data_type": "freeze"})


def test_discard_row_and_discard_value(tables: Tables) -> None:
    tables.land(json_events([{"a": 1}, {"a": 2}]))
    tables.curate()
    tables.land(json_events([{"a": 3, "debug": "x"}, {"a": "four"}, {"a": 5}], HOUR.add(minutes=1)))
    rows_dropped = tables.curate(contract={"columns": "discard_row", "data_type": "discard_row"})
    assert (rows_dropped.rows, rows_dropped.discarded_rows) == (3, 2)
    assert [r["a"] for r in tables.rows()] == [1, 2, 5]
    values_kept = tables.curate(contract={"columns": "discard_value", "data_type": "discard_value"})
    assert (values_kept.rows, values_kept.discarded_rows, values_kept.rescued_rows) == (5, 0, 2)
    assert "debug" not in tables.table().schema().named()
    assert [(r["a"], r["_rescued_data"]) for r in tables.rows()] == [
        (1, None), (2, None), (3, '{"debug":"x"}'), (None, '{"a":"four"}'), (5, None)]


def test_a_schema_file_fixes_the_columns(tables: Tables, tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {
        "status": {"type": "integer"}, "user": {"type": "object", "properties": {"id": {"type": "string"}}}}}))
    tables.land(json_events([{"status": 200, "user": {"id": "u1"}, "extra": 1}, {"status": "oops"}]))
    result = tables.curate(schema_file=str(schema))
    assert [(c.name, c.type) for c in tables.table().schema().columns] == [("status", "long"), ("user__id", "string")]
    assert result.rescued_rows == 2
    assert [(r["status"], r["user__id"], r["_rescued_data"]) for r in tables.rows()] == [
        (200, "u1", '{"extra":1}'), (None, None, '{"status":"oops"}')]


def test_logfmt_and_regex_bodies_with_declared_types(tables: Tables) -> None:
    lines = [b'level=info msg="user logged in" ms=12 user=u1', b'level=warn msg="slow \\"db\\"" ms=250 ms=251',
             b"no pairs here"]
    tables.land(json_events(lines))
    result = tables.curate(parser="logfmt", types={"ms": "long"})
    assert result.unparsed_rows == 1
    rows = tables.rows()
    assert [(r["level"], r["msg"], r["ms"]) for r in rows[:2]] == [("info", "user logged in", 12),
                                                                  ("warn", 'slow "db"', 251)]
    assert rows[0]["user"] == "u1" and rows[1]["user"] is None
    web = Tables(tables.tmp / "web", "parquet", tables.spark, channel="web")
    try:
        web.land(json_events([b'10.0.0.1 "GET /a" 200 512', b'10.0.0.2 "POST /b" 503 0', b"garbage"]))
        pattern = r'(?P<ip>\S+) "(?P<method>[A-Z]+) (?P<path>[^"]+)" (?P<status>\d+) (?P<bytes>\d+)'
        parsed = web.curate(parser="regex", pattern=pattern, types={"status": "long", "bytes": "long"})
        assert parsed.unparsed_rows == 1
        assert [(r["ip"], r["method"], r["path"], r["status"], r["bytes"]) for r in web.rows()[:2]] == [
            ("10.0.0.1", "GET", "/a", 200, 512), ("10.0.0.2", "POST", "/b", 503, 0)]
    finally:
        web.close()


def test_parser_none_keeps_the_landed_columns(tables: Tables) -> None:
    tables.land(json_events([{"a": 1}, b"text"]))
    result = tables.curate(parser="none")
    assert (result.rows, result.columns, result.rescued_rows) == (2, 0, 0)
    rows = tables.rows()
    assert [r["body"] for r in rows] == [b'{"a": 1}', b"text"] and "_rescued_data" not in rows[0]
