"""Parsers: an event's body as a Spark VARIANT object, whatever the body's syntax.

Every parser gives one ``VARIANT`` value per row (an object of fields), or NULL when the body does
not parse; the columns are then read from it with typed paths (:mod:`.typing`):

* ``json``: the body as JSON (``try_parse_json``): objects, arrays, numbers and booleans as
  they are.
* ``logfmt``: ``key=value`` pairs (a value may be ``"quoted"``, with ``\\"`` inside); every value
  is a string unless ``types`` declares it (``types = {duration_ms = "long"}``); a key given twice
  keeps its last value. A body without any pair does not parse.
* ``regex``: a regular expression with named groups (``(?P<level>\\w+)`` or ``(?<level>\\w+)``),
  matched against the body; each group is a field (a string unless ``types`` says otherwise). A
  body that does not match does not parse.
* ``none``: no parsing; the curated table keeps ``body`` as it is (the landed schema).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from ..errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

__all__ = ["LOGFMT_PAIR", "Parser", "parsed_body", "regex_groups"]

Parser = Literal["json", "logfmt", "regex", "none"]
LOGFMT_PAIR = r'([A-Za-z0-9_.\-]+)=("(?:[^"\\]|\\.)*"|\S*)'
_JAVA_GROUP = re.compile(r"\(\?<(?![=!])")  # a named group as Java writes it (not a lookbehind)


def regex_groups(pattern: str) -> list[str]:
    """The named groups of ``pattern`` in order; a pattern without any, or that does not compile,
    is a ConfigError naming ``pattern``."""
    try:
        compiled = re.compile(_JAVA_GROUP.sub("(?P<", pattern))
    except re.error as err:
        raise ConfigError(f"pattern {pattern!r} does not compile ({err})", key="pattern") from None
    groups = sorted(compiled.groupindex, key=compiled.groupindex.__getitem__)
    if not groups:
        raise ConfigError(f"pattern {pattern!r} has no named group: name each field, e.g. (?P<level>\\w+)",
                          key="pattern")
    return groups


def _java_pattern(pattern: str) -> str:
    """Python's named groups as Java (Spark) writes them."""
    return pattern.replace("(?P<", "(?<")


def parsed_body(spark: SparkSession, parser: Parser, pattern: str | None = None) -> Column:
    """The VARIANT column of the parsed ``body`` (module docstring)."""
    from pyspark.sql import functions as F

    text = F.col("body").cast("string")
    if parser == "json":
        return F.try_parse_json(text)
    if parser == "logfmt":
        spark.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")  # a key given twice keeps its last value
        keys = F.regexp_extract_all(text, F.lit(LOGFMT_PAIR), 1)
        values = F.transform(F.regexp_extract_all(text, F.lit(LOGFMT_PAIR), 2), _unquote)
        return F.when(F.size(keys) > 0, F.to_variant_object(F.map_from_arrays(keys, values)))
    if parser == "regex":
        if not pattern:
            raise ConfigError("parser = \"regex\" needs pattern (a regular expression with named groups)",
                              key="pattern")
        java = _java_pattern(pattern)
        groups = regex_groups(pattern)
        fields = [F.regexp_extract(text, java, i + 1).alias(name) for i, name in enumerate(groups)]
        return F.when(text.rlike(java), F.to_variant_object(F.struct(*fields)))
    raise ValueError(f"parser {parser!r} gives no variant")  # "none" is handled by the caller


def _unquote(value: Column) -> Column:
    from pyspark.sql import functions as F

    quoted = value.startswith('"') & value.endswith('"') & (F.length(value) >= 2)
    inner = F.regexp_replace(F.substring(value, 2, F.length(value) - 2), r'\\(.)', "$1")
    return F.when(quoted, inner).otherwise(value)
