"""The typed columns of a curated batch, read from the parsed body (a VARIANT) with Spark.

For a column of the schema the value at its path is read as the column's type. It *fits* when the
field is there and the read keeps its value. What fits is decided once per **shape** (the
``schema_of_variant`` of a row's body: the few distinct shapes of a batch, not each row), so the
per-row work is one typed read per column:

* the same type fits; a ``long`` value fits a ``double`` column; a boolean, number or string fits
  a ``string`` column; anything fits a ``json`` column; an array fits an array column whose
  elements take its elements (``array<long>`` into ``array<double>``, anything into
  ``array<string>``);
* a string fits a ``long``, ``double`` or ``boolean`` column when it converts (``"42"``): that
  one is decided per row (logfmt and regex values are strings, ``types`` makes them numbers);
* nothing else fits: a number with a fraction or an exponent (``7.5``, ``1e3``) never fits a
  ``long`` column, an object or an array never fits a scalar column, a scalar never an array one.

A JSON ``null`` is an absent value, not a misfit. What does not fit goes to the rescued-data
column ``_rescued_data``: the JSON text of an object ``{"<column>": <the value as it was>}``, with
the values of fields the contract kept out (``discard_value``) and, for a body that did not parse
at all, ``{"_body": "<the body>"}``. Nothing is dropped in silence: the rows a contract drops
(``discard_row``) are counted, and ``freeze`` fails the run naming the field and an event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .parse import ParsedBody
from .schema import Column, ColumnType, Mode, fields_of

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["PLAN_COLUMNS", "RESCUED", "SPARK_TYPES", "Expressions", "ShapePlan", "expressions", "fit", "json_path",
           "plan_frame", "plan_shapes", "text_paths"]

RESCUED = "_rescued_data"
SPARK_TYPES: dict[ColumnType, str] = {
    "boolean": "boolean", "long": "bigint", "double": "double", "string": "string", "json": "string",
    "array<boolean>": "array<boolean>", "array<long>": "array<bigint>", "array<double>": "array<double>",
    "array<string>": "array<string>"}
PLAN_COLUMNS = ("_misfit", "_check", "_refused", "_drop_new")
_SCALARS = ("boolean", "long", "double", "string")


def json_path(path: Sequence[str]) -> str:
    """The variant path of a field (bracket notation: any key but one holding a quote)."""
    return "$" + "".join("['" + part.replace("'", "\\'") + "']" for part in path)


def fit(column: ColumnType, value: str | None) -> str:
    """Whether a value of type ``value`` (a column type, ``"object"``, or None for JSON null) fits
    a ``column``: ``"fits"``, ``"misfit"``, or ``"check"`` (it fits if it converts: per row)."""
    if value is None or column == "json" or value == column:
        return "fits"
    if column == "string":
        return "fits" if value in _SCALARS else "misfit"
    if column in ("long", "double", "boolean"):
        if value == "string":
            return "check"
        return "fits" if (column, value) == ("double", "long") else "misfit"
    element = column.removeprefix("array<").removesuffix(">")  # an array column
    if value == "json":  # a mixed array (or a deep object): each element must convert
        return "check"
    if not value.startswith("array<"):
        return "misfit"
    inner = value.removeprefix("array<").removesuffix(">")
    return "check" if fit(element, inner) == "check" else fit(element, inner)  # type: ignore[arg-type]


@dataclass
class ShapePlan:
    """What the rows of one shape need: the columns whose value does not fit (``misfit``), those
    whose value fits only if it converts (``check``), the refused fields present whose value is
    rescued (``refused``), whether a ``discard_row`` field is present (``drop_new``), and the
    ``freeze`` fields present (``frozen``: decided here, reported by the caller)."""

    shape: str
    misfit: list[str] = field(default_factory=list)
    check: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    drop_new: bool = False
    frozen: list[tuple[str, ...]] = field(default_factory=list)


def plan_shapes(shapes: Iterable[str], columns: Sequence[Column], refused: Mapping[tuple[str, ...], tuple[str, Mode]],
                max_depth: int) -> list[ShapePlan]:
    """The plan of each shape for a schema's body ``columns`` and the new fields the contract
    ``refused`` (path -> (column name, mode))."""
    plans = []
    for shape in shapes:
        fields = fields_of(shape, max_depth) if shape.startswith("OBJECT<") else {}
        plan = ShapePlan(shape)
        for column in columns:
            if column.path not in fields:
                continue
            verdict = fit(column.type, fields[column.path])
            if verdict == "misfit":
                plan.misfit.append(column.name)
            elif verdict == "check":
                plan.check.append(column.name)
        for path, (name, mode) in sorted(refused.items()):
            if fields.get(path) is None:  # absent, or JSON null
                continue
            if mode == "discard_value":
                plan.refused.append(name)
            elif mode == "discard_row":
                plan.drop_new = True
            elif mode == "freeze":
                plan.frozen.append(path)
        plans.append(plan)
    return plans


def plan_frame(spark: SparkSession, plans: Sequence[ShapePlan], key: str) -> DataFrame:
    """The plans as a small frame to join on the shape column ``key`` (broadcast)."""
    rows = [(p.shape, p.misfit, p.check, p.refused, p.drop_new) for p in plans]
    return spark.createDataFrame(rows, f"{key} string, _misfit array<string>, _check array<string>, "
                                       "_refused array<string>, _drop_new boolean")


def text_paths(columns: Sequence[Column]) -> list[tuple[str, ...]]:
    """The paths read as text (:meth:`.parse.ParsedBody.fields`; array columns marked ``[]``):
    every column's but a ``json`` one's, and but one whose path leads on to another column's (a
    field that was a value and later an object: that column reads the VARIANT)."""
    prefixes = {c.path[:i] for c in columns for i in range(1, len(c.path))}
    return [(*c.path[:-1], c.path[-1] + "[]") if c.type.startswith("array<") else c.path
            for c in columns if c.type != "json" and c.path not in prefixes]


@dataclass(frozen=True)
class Expressions:
    """What the select of a curated batch is made of: each column's value, the rescued data, the
    condition of the rows to drop, and per column the condition of a value that does not fit."""

    values: dict[str, Any]
    rescued: Any
    dropped: Any
    misfits: dict[str, Any]


def expressions(parsed: ParsedBody, fields: SparkColumn, shape: SparkColumn, columns: Sequence[Column],
                refused: Mapping[tuple[str, ...], tuple[str, Mode]], data_type: Mode) -> Expressions:
    """The expressions of a batch joined with its shapes' plans (:data:`PLAN_COLUMNS`): ``fields``
    is the row's :meth:`~.parse.ParsedBody.fields` for :func:`text_paths` of ``columns`` (the
    schema's body columns), ``shape`` its shape; ``refused``: the new fields the contract kept out;
    ``data_type``: the contract's mode for values that do not fit."""
    from pyspark.sql import functions as F

    variant = parsed.variant()  # read only where a branch needs it: rescued values, json columns
    by_text = {p[:-1] + (p[-1].removesuffix("[]"),) for p in text_paths(columns)}
    values: dict[str, SparkColumn] = {}
    misfits: dict[str, SparkColumn] = {}
    entries: list[SparkColumn] = []
    rescue_values = data_type in ("evolve", "discard_value")
    for column in columns:
        raw = F.variant_get(variant, json_path(column.path), "variant")
        if column.type == "json":
            values[column.name] = F.to_json(raw)
            continue
        if column.path in by_text:
            text = parsed.text(fields, column.path, array=column.type.startswith("array<"))
            typed = text if column.type == "string" else text.try_cast(SPARK_TYPES[column.type])
        else:
            typed = F.try_variant_get(variant, json_path(column.path), SPARK_TYPES[column.type])
        label = F.lit(column.name)
        # "check": the shape has a (non-null) value there; it fits when the typed read keeps it
        misfit = F.array_contains(F.col("_misfit"), label) | (F.array_contains(F.col("_check"), label)
                                                             & typed.isNull())
        values[column.name], misfits[column.name] = F.when(~misfit, typed), misfit
        if rescue_values:
            entries += [label, F.when(misfit, raw)]
    for path, (name, mode) in sorted(refused.items()):
        if mode == "discard_value":
            entries += [F.lit(name), F.when(F.array_contains(F.col("_refused"), F.lit(name)),
                                            F.variant_get(variant, json_path(path), "variant"))]
    unparsed = ~shape.startswith("OBJECT<") & F.col("body").isNotNull()
    entries += [F.lit("_body"), F.when(unparsed, F.col("body").cast("string").cast("variant"))]
    any_misfit: SparkColumn = F.lit(False)
    for misfit in misfits.values():
        any_misfit = any_misfit | misfit
    wanted = unparsed | (F.size(F.col("_refused")) > 0)
    if rescue_values:
        wanted = wanted | any_misfit
    rescued = F.when(wanted, F.to_json(F.map_filter(F.create_map(*entries), lambda _k, v: v.isNotNull())))
    dropped = F.coalesce(F.col("_drop_new"), F.lit(False))
    if data_type == "discard_row":
        dropped = dropped | any_misfit
    return Expressions(values, rescued, dropped, misfits)
