"""The typed columns of a curated batch, read from the parsed body (a VARIANT) with Spark.

For a column of the schema the value at its path is read as the column's type. It *fits* when the
field is there and the read keeps its value: a string that is not a number does not fit a
``long`` column, neither does ``7.5`` (reading it as ``long`` would give 7), nor an object a
``string`` column. A JSON ``null`` is an absent value, not a misfit. What does not fit goes to the
rescued-data column ``_rescued_data``: the JSON text of an object ``{"<column>": <the value as
it was>}``, with the values of fields the contract kept out (``discard_value``) and, for a body that
did not parse at all, ``{"_body": "<the body>"}``. Nothing is dropped in silence: the rows a
contract drops (``discard_row``) are counted, and ``freeze`` fails the run naming the field and
an event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .schema import Column, ColumnType, Mode

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn

__all__ = ["RESCUED", "SPARK_TYPES", "Expressions", "expressions", "json_path"]

RESCUED = "_rescued_data"
SPARK_TYPES: dict[ColumnType, str] = {
    "boolean": "boolean", "long": "bigint", "double": "double", "string": "string", "json": "string",
    "array<boolean>": "array<boolean>", "array<long>": "array<bigint>", "array<double>": "array<double>",
    "array<string>": "array<string>"}


def json_path(path: Sequence[str]) -> str:
    """The variant path of a field (bracket notation: any key but one holding a quote)."""
    return "$" + "".join("['" + part.replace("'", "\\'") + "']" for part in path)


@dataclass(frozen=True)
class Expressions:
    """What the select of a curated batch is made of: each column's value, the rescued data, and
    the condition of the rows to drop (None: none is dropped)."""

    values: dict[str, SparkColumn]
    rescued: SparkColumn
    dropped: SparkColumn | None
    misfits: dict[str, SparkColumn]  # per column: its value is there and does not fit


def _present(value: SparkColumn) -> SparkColumn:
    from pyspark.sql import functions as F

    return value.isNotNull() & ~F.is_variant_null(value)


def _typed(variant: SparkColumn, column: Column) -> tuple[SparkColumn, SparkColumn]:
    """``(value, misfit)`` of ``column`` read from ``variant`` (module docstring)."""
    from pyspark.sql import functions as F

    raw = F.variant_get(variant, json_path(column.path), "variant")
    if column.type == "json":
        return F.to_json(raw), F.lit(False)
    value = F.try_variant_get(variant, json_path(column.path), SPARK_TYPES[column.type])
    misfit = _present(raw) & value.isNull()
    if column.type == "long":  # 7.5 read as long is 7: compare with its reading as a double
        as_double = F.try_variant_get(variant, json_path(column.path), "double")
        misfit = misfit | (_present(raw) & as_double.isNotNull() & (as_double != value.cast("double")))
    return value, misfit


def expressions(variant: SparkColumn, body: SparkColumn, columns: Sequence[Column],
                refused: Mapping[tuple[str, ...], tuple[str, Mode]], data_type: Mode) -> Expressions:
    """The expressions of a batch with the schema's ``columns`` (body columns only), the new
    fields the contract ``refused`` (path -> (column name, mode)) and the contract's mode for
    values that do not fit (``data_type``)."""
    from pyspark.sql import functions as F

    values: dict[str, SparkColumn] = {}
    misfits: dict[str, SparkColumn] = {}
    entries: list[SparkColumn] = []
    for column in columns:
        value, misfit = _typed(variant, column)
        keep = misfit if data_type in ("evolve", "discard_value") else F.lit(False)
        values[column.name] = F.when(~misfit, value) if column.type != "json" else value
        misfits[column.name] = misfit
        entries += [F.lit(column.name), F.when(keep, F.variant_get(variant, json_path(column.path), "variant"))]
    drops: list[SparkColumn] = []
    for path, (name, mode) in sorted(refused.items()):
        raw = F.variant_get(variant, json_path(path), "variant")
        if mode == "discard_value":
            entries += [F.lit(name), F.when(_present(raw), raw)]
        elif mode == "discard_row":
            drops.append(_present(raw))
    if data_type == "discard_row":
        drops += list(misfits.values())
    entries += [F.lit("_body"), F.when(variant.isNull() & body.isNotNull(), body.cast("string").cast("variant"))]
    rescued = F.map_filter(F.create_map(*entries), lambda _k, v: v.isNotNull())
    dropped = None
    for condition in drops:
        dropped = condition if dropped is None else (dropped | condition)
    return Expressions(values, F.when(F.size(rescued) > 0, F.to_json(rescued)), dropped, misfits)
