"""The curated table's typed columns: inferred from the data, evolved under a contract, recorded.

**Columns.** Every field of a parsed body becomes a column. Nested objects are *flattened*: the
field ``user.id`` is the column ``user__id`` (two underscores between levels, at most
``max_depth`` levels; deeper objects are one ``json`` column holding their text). A name is made
of letters, digits and ``_`` (anything else becomes ``_``); a field whose name is a column of the
landed schema (``event_id``, ``headers``, ...) gets the prefix ``body_``.

**Types.** What JSON gives: ``boolean``, ``long`` (integers), ``double`` (any number with a
fraction or an exponent), ``string``, arrays of one of those (``array<long>``...), and ``json``
(the text of a mixed array or a too deep object). A field seen with several types in one batch
takes the type most of its values have (``long`` and ``double`` together are ``double``; a tie is
``string``); the values of the other types do not fit and go to the rescued-data column.

**Evolution.** A column's type never changes once it exists (no file is rewritten): a later
value that does not fit it is rescued. A field not seen before is a new, nullable column, unless
the contract says otherwise (:class:`Contract`, dlt's modes): ``evolve`` adds it, ``freeze``
fails the run naming the field and an event that has it, ``discard_row`` drops the rows that
have it, ``discard_value`` keeps the rows and puts the field's value in the rescued-data column.
The same modes apply to values that do not fit their column's type (``evolve`` and
``discard_value`` rescue them). A schema file (a JSON Schema, or a list of columns and types)
fixes the columns instead of inferring them: fields it does not name follow the contract, whose
``columns`` mode then defaults to ``discard_value``.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError

__all__ = ["COLUMN_TYPES", "RESERVED", "Column", "ColumnType", "Contract", "CuratedSchema", "Evolution", "Mode",
           "Observed", "column_name", "evolve", "fields_of", "load_schema_file", "observe", "parse_variant_type"]

ColumnType = Literal["boolean", "long", "double", "string", "json", "array<boolean>", "array<long>",
                     "array<double>", "array<string>"]
COLUMN_TYPES: tuple[ColumnType, ...] = ("boolean", "long", "double", "string", "json", "array<boolean>",
                                        "array<long>", "array<double>", "array<string>")
Mode = Literal["evolve", "freeze", "discard_row", "discard_value"]
MODES: tuple[Mode, ...] = ("evolve", "freeze", "discard_row", "discard_value")

# Columns every curated table has (the landed schema's, the rescued data): a body field may not take them.
RESERVED = frozenset({"event_id", "batch_id", "event_time", "ingest_time", "headers", "body", "seq", "event_date",
                      "event_hour", "_rescued_data"})
_NAME_BAD = re.compile(r"[^A-Za-z0-9_]")
_SCALARS: dict[str, ColumnType] = {"BOOLEAN": "boolean", "BIGINT": "long", "INT": "long", "SMALLINT": "long",
                                   "TINYINT": "long", "DOUBLE": "double", "FLOAT": "double", "DECIMAL": "double",
                                   "STRING": "string", "DATE": "string", "TIMESTAMP": "string",
                                   "TIMESTAMP_NTZ": "string", "BINARY": "string"}


@dataclass(frozen=True)
class Column:
    """One typed column: its ``name``, ``type``, and the ``path`` of the field it is read from
    (``source``: the parsed ``body``, or a ``header``)."""

    name: str
    type: ColumnType
    path: tuple[str, ...]
    source: Literal["body", "header"] = "body"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "path": list(self.path), "source": self.source}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Column:
        return cls(str(doc["name"]), doc["type"], tuple(doc.get("path") or (doc["name"],)),
                   doc.get("source", "body"))


@dataclass(frozen=True)
class CuratedSchema:
    """The columns a curated table has beyond the landed ones, in the order they were added."""

    columns: tuple[Column, ...] = ()

    def named(self) -> dict[str, Column]:
        return {c.name: c for c in self.columns}

    def by_path(self) -> dict[tuple[str, ...], Column]:
        return {c.path: c for c in self.columns if c.source == "body"}

    def plus(self, added: Sequence[Column]) -> CuratedSchema:
        return CuratedSchema((*self.columns, *added))

    def to_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.columns]

    @classmethod
    def from_json(cls, docs: Iterable[Mapping[str, Any]]) -> CuratedSchema:
        return cls(tuple(Column.from_json(d) for d in docs))


@dataclass(frozen=True)
class Contract:
    """What a batch may change (module docstring). ``column_patterns``: the mode of new fields whose
    column name matches a glob (``"debug__*" = "discard_value"``), before ``columns``."""

    columns: Mode = "evolve"
    data_type: Mode = "evolve"
    column_patterns: Mapping[str, Mode] = field(default_factory=dict)

    def for_new(self, name: str) -> Mode:
        for pattern, mode in self.column_patterns.items():
            if fnmatch.fnmatchcase(name, pattern):
                return mode
        return self.columns


@dataclass
class Observed:
    """A field seen in a batch: the rows that hold each type of value (JSON null not counted)."""

    path: tuple[str, ...]
    types: dict[ColumnType, int] = field(default_factory=dict)

    def add(self, column_type: ColumnType, rows: int) -> None:
        self.types[column_type] = self.types.get(column_type, 0) + rows

    def chosen(self) -> ColumnType:
        """The type most of its values have (module docstring)."""
        counts = dict(self.types)
        if "long" in counts and "double" in counts:
            counts["double"] += counts.pop("long")
        ranked = sorted(counts.items(), key=lambda item: -item[1])
        if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
            return "string"
        return ranked[0][0]


@dataclass(frozen=True)
class Evolution:
    """What a batch does to the schema: the columns it adds, the new fields the contract keeps out
    (name -> the mode that refused them: ``freeze``, ``discard_row`` or ``discard_value``)."""

    schema: CuratedSchema
    added: tuple[Column, ...]
    refused: Mapping[tuple[str, ...], tuple[str, Mode]]


def column_name(path: Sequence[str]) -> str:
    """The column of a field path (module docstring)."""
    name = "__".join(_NAME_BAD.sub("_", part) or "_" for part in path)
    if name[0].isdigit():
        name = f"_{name}"
    return f"body_{name}" if name in RESERVED else name


# -- the schemas of parsed bodies -------------------------------------------------------------------
def parse_variant_type(text: str) -> Any:
    """A Spark variant schema (``schema_of_variant``: ``OBJECT<a: BIGINT, u: OBJECT<id: STRING>>``)
    as nested Python values: ``{"a": "BIGINT", ...}`` for objects, ``["ARRAY", element]`` for
    arrays, the scalar's name otherwise."""
    value, end = _parse_type(text.strip(), 0)
    if end != len(text.strip()):
        raise ValueError(f"unexpected text at {end} of variant schema {text!r}")
    return value


def _parse_type(text: str, pos: int) -> tuple[Any, int]:
    if text.startswith("OBJECT<", pos):
        fields: dict[str, Any] = {}
        pos += len("OBJECT<")
        while text[pos] != ">":
            name, pos = _parse_name(text, pos)
            if text[pos] != ":":
                raise ValueError(f"expected ':' at {pos} of {text!r}")
            value, pos = _parse_type(text, pos + 1 + (text[pos + 1] == " "))
            fields[name] = value
            if text[pos] == ",":
                pos += 2 if text[pos + 1] == " " else 1
        return fields, pos + 1
    if text.startswith("ARRAY<", pos):
        element, pos = _parse_type(text, pos + len("ARRAY<"))
        return ["ARRAY", element], pos + 1
    match = re.compile(r"[A-Z_]+(\(\d+,\s*\d+\))?").match(text, pos)
    if match is None:
        raise ValueError(f"unknown type at {pos} of variant schema {text!r}")
    return match.group(0).split("(")[0], match.end()


def _parse_name(text: str, pos: int) -> tuple[str, int]:
    if text[pos] == "`":
        out, pos = [], pos + 1
        while True:
            if text[pos] == "`" and text[pos + 1: pos + 2] == "`":
                out.append("`")
                pos += 2
            elif text[pos] == "`":
                return "".join(out), pos + 1
            else:
                out.append(text[pos])
                pos += 1
    end = text.index(":", pos)
    return text[pos:end], end


def observe(signatures: Iterable[tuple[str | None, int]], max_depth: int = 3) -> dict[tuple[str, ...], Observed]:
    """The fields of a batch from its rows' variant schemas (``(schema, rows)`` pairs: the
    distinct ``schema_of_variant`` of the parsed bodies and how many rows have each), flattened
    to ``max_depth`` levels."""
    found: dict[tuple[str, ...], Observed] = {}
    for text, rows in signatures:
        if not text or text == "NULL":
            continue
        value = parse_variant_type(text)
        if isinstance(value, dict):
            _walk(value, (), rows, max_depth, found)
    return found


def _walk(fields: Mapping[str, Any], prefix: tuple[str, ...], rows: int, depth: int,
          found: dict[tuple[str, ...], Observed]) -> None:
    for name, value in fields.items():
        path = (*prefix, name)
        if isinstance(value, dict) and depth > 1:
            _walk(value, path, rows, depth - 1, found)
            continue
        column_type = _type_of(value)
        if column_type is not None:
            found.setdefault(path, Observed(path)).add(column_type, rows)


def fields_of(shape: str, max_depth: int = 3) -> dict[tuple[str, ...], str | None]:
    """Every field of one row's shape (its ``schema_of_variant``), flattened like :func:`observe`,
    with its column type (None: JSON null), and every nested object on the way as ``"object"``
    (a column of that path may exist from older rows: an object does not fit it)."""
    found: dict[tuple[str, ...], str | None] = {}
    value = parse_variant_type(shape) if shape and shape != "NULL" else None
    if isinstance(value, dict):
        _fields(value, (), max_depth, found)
    return found


def _fields(fields: Mapping[str, Any], prefix: tuple[str, ...], depth: int,
            found: dict[tuple[str, ...], str | None]) -> None:
    for name, value in fields.items():
        path = (*prefix, name)
        if isinstance(value, dict) and depth > 1:
            found[path] = "object"
            _fields(value, path, depth - 1, found)
        else:
            found[path] = _type_of(value)


def _type_of(value: Any) -> ColumnType | None:
    """The column type of one variant type (None: JSON null, says nothing)."""
    if isinstance(value, dict):
        return "json"
    if isinstance(value, list):
        element = _type_of(value[1])
        if element in ("boolean", "long", "double", "string"):
            return f"array<{element}>"  # type: ignore[return-value]
        return "json"
    if value == "NULL":
        return None
    if value == "VARIANT":
        return "json"
    return _SCALARS.get(value, "string")


# -- evolution under the contract -------------------------------------------------------------------
def evolve(schema: CuratedSchema, observed: Mapping[tuple[str, ...], Observed], contract: Contract,
           fixed: bool = False, declared: Mapping[str, ColumnType] | None = None) -> Evolution:
    """The schema after a batch with ``observed`` fields (module docstring). ``fixed``: the schema
    comes from a schema file; new fields never become columns then. ``declared``: types that a
    new column takes instead of the inferred one (keyed by column name or dotted field path)."""
    declared = declared or {}
    known, names = schema.by_path(), {name.lower() for name in schema.named()}  # Spark's names ignore case
    added: list[Column] = []
    refused: dict[tuple[str, ...], tuple[str, Mode]] = {}
    for path in sorted(observed):
        if path in known:
            continue
        name = column_name(path)
        mode = contract.for_new(name)
        if fixed and mode == "evolve":
            mode = "discard_value"
        if mode != "evolve" or name.lower() in names:  # a name another path took: never two fields in one column
            refused[path] = (name, "discard_value" if mode == "evolve" else mode)
            continue
        column_type = declared.get(name) or declared.get(".".join(path)) or observed[path].chosen()
        added.append(Column(name, column_type, path))
        names.add(name.lower())
    return Evolution(schema.plus(added), tuple(added), refused)


# -- schema files -----------------------------------------------------------------------------------
def load_schema_file(path: str | Path, max_depth: int = 3) -> CuratedSchema:
    """The columns a schema file fixes: a JSON Schema (``{"type": "object", "properties": {...}}``;
    nested objects are flattened like inferred ones) or ``{"columns": [{"name": ..., "type": ...,
    "path": [...]}]}`` (types of :data:`COLUMN_TYPES`). A bad file is a ConfigError naming it."""
    where = Path(path)
    try:
        doc = json.loads(where.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"schema_file {where}: cannot be read as JSON ({err})", key="schema_file") from None
    try:
        if isinstance(doc, dict) and "columns" in doc:
            return _columns_file(doc["columns"])
        if isinstance(doc, dict) and doc.get("type") == "object":
            columns: list[Column] = []
            _json_schema(doc.get("properties", {}), (), max_depth, columns)
            return CuratedSchema(tuple(columns))
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"schema_file {where}: {err}", key="schema_file") from None
    raise ConfigError(f"schema_file {where}: neither a JSON Schema of an object nor {{\"columns\": [...]}}",
                      key="schema_file")


def _columns_file(entries: Any) -> CuratedSchema:
    columns = []
    for entry in entries:
        path = tuple(entry.get("path") or str(entry["name"]).split("__"))
        if entry["type"] not in COLUMN_TYPES:
            raise ValueError(f"column {entry['name']!r}: type {entry['type']!r} is not one of "
                             f"{', '.join(COLUMN_TYPES)}")
        columns.append(Column(column_name(path) if "path" in entry else str(entry["name"]), entry["type"], path))
    return CuratedSchema(tuple(columns))


_JSON_TYPES: dict[str, ColumnType] = {"boolean": "boolean", "integer": "long", "number": "double",
                                      "string": "string"}


def _json_schema(properties: Mapping[str, Any], prefix: tuple[str, ...], depth: int, out: list[Column]) -> None:
    for name, spec in properties.items():
        path = (*prefix, name)
        kind = spec.get("type")
        if isinstance(kind, list):  # ["string", "null"]: the nullable form
            kind = next((k for k in kind if k != "null"), "string")
        if kind == "object" and depth > 1 and "properties" in spec:
            _json_schema(spec["properties"], path, depth - 1, out)
        elif kind == "array":
            element = _JSON_TYPES.get((spec.get("items") or {}).get("type", ""))
            out.append(Column(column_name(path), f"array<{element}>" if element else "json", path))  # type: ignore[arg-type]
        else:
            out.append(Column(column_name(path), _JSON_TYPES.get(kind or "", "json"), path))
