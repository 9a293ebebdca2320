"""The rules of the curated schema without Spark: field shapes, types, names, evolution under
each contract mode, schema files, the curated settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from ingest_toolkit.curate import (
    Column,
    Contract,
    CuratedSchema,
    CuratedSettings,
    column_name,
    evolve,
    load_schema_file,
)
from ingest_toolkit.curate.parse import regex_groups
from ingest_toolkit.curate.schema import Observed, observe, parse_variant_type
from ingest_toolkit.errors import ConfigError


def test_variant_schemas_are_read_as_nested_values() -> None:
    text = "OBJECT<`a b`: BIGINT, ok: BOOLEAN, tags: ARRAY<STRING>, u: OBJECT<id: STRING, `x``y`: DECIMAL(3,1)>>"
    assert parse_variant_type(text) == {"a b": "BIGINT", "ok": "BOOLEAN", "tags": ["ARRAY", "STRING"],
                                        "u": {"id": "STRING", "x`y": "DECIMAL"}}
    with pytest.raises(ValueError, match="unknown type"):
        parse_variant_type("OBJECT<a: ?>")


def test_fields_are_flattened_to_max_depth_and_typed() -> None:
    found = observe([("OBJECT<n: BIGINT, u: OBJECT<id: STRING, geo: OBJECT<lat: DOUBLE>>, mix: ARRAY<VARIANT>>", 3),
                     ("OBJECT<n: DOUBLE, none: NULL>", 1), ("NULL", 5), ("ARRAY<BIGINT>", 2)], max_depth=2)
    assert {path: dict(o.types) for path, o in found.items()} == {
        ("n",): {"long": 3, "double": 1}, ("u", "id"): {"string": 3}, ("u", "geo"): {"json": 3},
        ("mix",): {"json": 3}}
    assert found[("n",)].chosen() == "double"  # long and double together are double


def test_a_field_seen_with_several_types_takes_the_majority_and_a_tie_is_string() -> None:
    assert Observed(("a",), {"long": 7, "string": 3}).chosen() == "long"
    assert Observed(("a",), {"boolean": 2, "string": 2}).chosen() == "string"


def test_column_names_are_safe_and_never_take_a_landed_column() -> None:
    assert column_name(("user", "id")) == "user__id"
    assert column_name(("http-status",)) == "http_status"
    assert column_name(("9lives",)) == "_9lives"
    assert column_name(("event_id",)) == "body_event_id" and column_name(("_rescued_data",)) == "body__rescued_data"


def _observed(**types: str) -> dict[tuple[str, ...], Observed]:
    return {tuple(name.split(".")): Observed(tuple(name.split(".")), {kind: 1}) for name, kind in types.items()}  # type: ignore[dict-item]


def test_evolve_adds_new_fields_and_never_retypes_a_column() -> None:
    schema = CuratedSchema((Column("n", "long", ("n",)),))
    result = evolve(schema, _observed(n="string", **{"user.plan": "string"}), Contract())
    assert [c.name for c in result.schema.columns] == ["n", "user__plan"]
    assert result.schema.named()["n"].type == "long" and [c.name for c in result.added] == ["user__plan"]
    assert not result.refused


@pytest.mark.parametrize("mode", ["freeze", "discard_row", "discard_value"])
def test_each_contract_mode_keeps_new_fields_out(mode: str) -> None:
    result = evolve(CuratedSchema(), _observed(a="long"), Contract(columns=mode))  # type: ignore[arg-type]
    assert not result.added and result.refused == {("a",): ("a", mode)}


def test_column_patterns_decide_before_the_columns_mode() -> None:
    contract = Contract(columns="freeze", column_patterns={"debug__*": "discard_value", "keep_*": "evolve"})
    result = evolve(CuratedSchema(), _observed(**{"debug.trace": "string", "keep_me": "long", "other": "long"}),
                    contract)
    assert [c.name for c in result.added] == ["keep_me"]
    assert result.refused == {("debug", "trace"): ("debug__trace", "discard_value"), ("other",): ("other", "freeze")}


def test_two_fields_that_would_share_a_column_keep_the_first() -> None:
    result = evolve(CuratedSchema(), _observed(**{"a-b": "long", "a_b": "string"}), Contract())
    assert [(c.name, c.path) for c in result.added] == [("a_b", ("a-b",))]
    assert result.refused == {("a_b",): ("a_b", "discard_value")}
    cased = evolve(CuratedSchema(), _observed(User="string", user="long"), Contract())  # Spark ignores case
    assert [c.name for c in cased.added] == ["User"] and cased.refused == {("user",): ("user", "discard_value")}


def test_declared_types_win_over_inference() -> None:
    result = evolve(CuratedSchema(), _observed(status="string", **{"u.n": "string"}), Contract(),
                    declared={"status": "long", "u.n": "double"})
    assert {c.name: c.type for c in result.added} == {"status": "long", "u__n": "double"}


def test_a_fixed_schema_never_grows_from_the_data() -> None:
    result = evolve(CuratedSchema((Column("a", "long", ("a",)),)), _observed(b="long"), Contract(), fixed=True)
    assert not result.added and result.refused == {("b",): ("b", "discard_value")}


def test_schema_files_json_schema_and_column_lists(tmp_path: Path) -> None:
    schema = tmp_path / "events.json"
    schema.write_text(json.dumps({"type": "object", "properties": {
        "n": {"type": "integer"}, "price": {"type": ["number", "null"]}, "tags": {"type": "array", "items": {
            "type": "string"}}, "user": {"type": "object", "properties": {"id": {"type": "string"}}}}}))
    assert [(c.name, c.type, c.path) for c in load_schema_file(schema).columns] == [
        ("n", "long", ("n",)), ("price", "double", ("price",)), ("tags", "array<string>", ("tags",)),
        ("user__id", "string", ("user", "id"))]
    listed = tmp_path / "columns.json"
    listed.write_text(json.dumps({"columns": [{"name": "user__id", "type": "string"},
                                              {"name": "ok", "type": "boolean"}]}))
    assert [(c.name, c.path) for c in load_schema_file(listed).columns] == [("user__id", ("user", "id")),
                                                                            ("ok", ("ok",))]
    listed.write_text(json.dumps({"columns": [{"name": "x", "type": "int"}]}))
    with pytest.raises(ConfigError, match=r"columns.json: column 'x': type 'int' is not one of boolean, long"):
        load_schema_file(listed)
    with pytest.raises(ConfigError, match="cannot be read as JSON"):
        load_schema_file(tmp_path / "absent.json")


def test_settings_resolve_per_channel_and_name_bad_keys() -> None:
    settings = CuratedSettings(parser="logfmt", types={"ms": "long"}, contract={"columns": "freeze"},
                               channels={"web": {"parser": "regex", "pattern": r"(?P<ip>\S+) (?P<status>\d+)",
                                                 "types": {"status": "long"},
                                                 "contract": {"data_type": "discard_row"}}})
    web = settings.for_channel("web")
    assert (web.parser, web.types, web.contract.columns, web.contract.data_type) == (
        "regex", {"ms": "long", "status": "long"}, "freeze", "discard_row")
    other = settings.for_channel("other")
    assert (other.parser, other.contract.columns, other.contract.data_type) == ("logfmt", "freeze", "evolve")
    assert other.table_format("delta") == "delta" and CuratedSettings(format="iceberg").for_channel("x").table_format(
        "parquet") == "iceberg"
    with pytest.raises(ValidationError, match="channels.web.parser = \"regex\" needs channels.web.pattern"):
        CuratedSettings(channels={"web": {"parser": "regex"}})
    with pytest.raises(ValidationError, match="types.n: 'int' is not one of"):
        CuratedSettings(types={"n": "int"})
    with pytest.raises(ValidationError, match="has no named group"):
        CuratedSettings(parser="regex", pattern=r"\d+")


def test_regex_groups_accept_python_and_java_names() -> None:
    assert regex_groups(r"(?P<a>\w+) (?<b>\d+) (?<=x)") == ["a", "b"]
    with pytest.raises(ConfigError, match="does not compile"):
        regex_groups("(?P<a>")
