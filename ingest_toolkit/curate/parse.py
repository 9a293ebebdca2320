"""Parsers: an event's body as fields, whatever the body's syntax (:class:`ParsedBody`).

Every parser gives one ``VARIANT`` value per row (an object of fields), or NULL when the body does
not parse, whose shape the inference counts; the typed columns read each field's text and convert
it (:mod:`.columns`):

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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

__all__ = ["LOGFMT_PAIR", "ParsedBody", "Parser", "regex_groups"]

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


class ParsedBody:
    """How the curation reads a parser's fields (module docstring).

    * :meth:`variant`: the body as a VARIANT object (NULL when it does not parse): its shape
      (``schema_of_variant``) is what the inference counts, and it is read again only for the
      rare rows whose values are rescued and for ``json`` columns;
    * :meth:`fields`: the row's fields for the typed reads, parsed once per row: the JSON body
      read straight into a struct of strings (``from_json``: each value's text), the logfmt pairs
      as a map, the regex groups as a struct; :meth:`text` is one field's text (or array of
      texts), which a column then converts to its type (``try_cast``).
    """

    def __init__(self, spark: SparkSession, parser: Parser, pattern: str | None = None) -> None:
        if parser == "none":
            raise ValueError("parser \"none\" parses nothing")  # the caller keeps the landed columns
        if parser == "regex" and not pattern:
            raise ConfigError("parser = \"regex\" needs pattern (a regular expression with named groups)",
                              key="pattern")
        self.spark, self.parser, self.pattern = spark, parser, pattern
        if parser == "logfmt":
            spark.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")  # a key given twice keeps its last value

    def _text(self) -> Column:
        from pyspark.sql import functions as F

        return F.col("body").cast("string")

    def _logfmt_map(self) -> Column:
        from pyspark.sql import functions as F

        keys = F.regexp_extract_all(self._text(), F.lit(LOGFMT_PAIR), 1)
        values = F.transform(F.regexp_extract_all(self._text(), F.lit(LOGFMT_PAIR), 2), _unquote)
        return F.when(F.size(keys) > 0, F.map_from_arrays(keys, values))

    def _regex_struct(self) -> Column:
        from pyspark.sql import functions as F

        assert self.pattern is not None
        java = _java_pattern(self.pattern)
        groups = [F.regexp_extract(self._text(), java, i + 1).alias(name)
                  for i, name in enumerate(regex_groups(self.pattern))]
        return F.when(self._text().rlike(java), F.struct(*groups))

    def variant(self) -> Column:
        """The parsed body as a VARIANT (an object for a body that parses)."""
        from pyspark.sql import functions as F

        if self.parser == "json":
            return F.try_parse_json(self._text())
        if self.parser == "logfmt":
            return F.to_variant_object(self._logfmt_map())
        return F.to_variant_object(self._regex_struct())

    def fields(self, paths: Sequence[tuple[str, ...]]) -> Column:
        """The row's fields, for :meth:`text` of these ``paths`` (JSON: those of the struct)."""
        from pyspark.sql import functions as F

        if self.parser == "json":
            return F.from_json(self._text(), _text_struct(paths))
        if self.parser == "logfmt":
            return self._logfmt_map()
        return self._regex_struct()

    def text(self, fields: Column, path: tuple[str, ...], array: bool = False) -> Column:
        """The text of the field at ``path`` in ``fields`` (an array of texts for an array column)."""
        from pyspark.sql import functions as F

        if self.parser == "json":
            value = fields
            for part in path:
                value = value.getField(part)
            return value
        if len(path) != 1:
            return F.lit(None).cast("array<string>" if array else "string")
        if self.parser == "logfmt":
            return fields.getItem(path[0])
        return fields.getField(path[0]) if path[0] in regex_groups(self.pattern or "") else F.lit(None).cast("string")


def _text_struct(paths: Sequence[tuple[str, ...]]) -> Any:
    """A struct of strings holding every path (arrays of strings where ``paths`` marks them with a
    trailing ``[]``): ``from_json`` reads each value's text into it."""
    from pyspark.sql.types import ArrayType, StringType, StructField, StructType

    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        leaf = path[-1]
        node[leaf.removesuffix("[]")] = "array" if leaf.endswith("[]") else "text"

    def build(node: dict[str, Any]) -> StructType:
        return StructType([StructField(name, build(value) if isinstance(value, dict) else
                                       ArrayType(StringType()) if value == "array" else StringType())
                           for name, value in node.items()])

    return build(tree)


def _unquote(value: Column) -> Column:
    from pyspark.sql import functions as F

    quoted = value.startswith('"') & value.endswith('"') & (F.length(value) >= 2)
    inner = F.regexp_replace(F.substring(value, 2, F.length(value) - 2), r'\\(.)', "$1")
    return F.when(quoted, inner).otherwise(value)
