"""Parsing HTTP request bodies into events, with precise messages for malformed input.

* ``application/json``: an array of ``{"headers": {str: str}, "body": str}`` objects, or
  ``"body_base64"`` instead of ``"body"`` for binary bodies. ``body`` is stored as UTF-8.
* ``application/x-ndjson``: one such object per line (blank lines are skipped).
* ``text/plain``: one event per line, the line's bytes as the body (``\\n`` removed, a final
  newline does not start an empty event).

Any problem rejects the whole request (nothing is stored); the message names the item or line.

Limits, so that no body can make the parser itself fail (RecursionError, ValueError, or a C stack
overflow in a process whose recursion limit was raised): JSON may nest at most ``max_depth``
arrays and objects (default :data:`DEFAULT_MAX_JSON_DEPTH`; the event format itself needs 3:
array, event, headers), checked by a linear scan before parsing; a number of more digits than
Python converts (``sys.get_int_max_str_digits()``, 4300) is refused as such. The body's size is
the HTTP source's ``max_request_bytes``, checked before the body is read.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from typing import Any

from ...channel import Event
from ..errors import BadRequestError, UnsupportedMediaTypeError

__all__ = ["DEFAULT_MAX_JSON_DEPTH", "MAX_JSON_DEPTH", "MIN_JSON_DEPTH", "nesting_depth", "parse_events"]

DEFAULT_MAX_JSON_DEPTH = 32
MIN_JSON_DEPTH = 3  # an array of event objects whose headers are an object
MAX_JSON_DEPTH = 512  # well inside the parser's recursion limit (1000 frames, some already in use)

_KEYS = frozenset({"headers", "body", "body_base64"})
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl",
                          "application/x-jsonlines"})


def parse_events(body: bytes, content_type: str | None, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> list[Event]:
    """The events of one request body; raises BadRequestError (400) or UnsupportedMediaTypeError
    (415), never another exception, whatever the bytes."""
    media = (content_type or "application/json").split(";")[0].strip().lower()
    if media == "application/json":
        return _json_array(body, max_depth)
    if media in NDJSON_TYPES:
        return _ndjson(body, max_depth)
    if media == "text/plain":
        lines = body.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        return [Event(line, {}) for line in lines]
    raise UnsupportedMediaTypeError(
        f"Content-Type {media!r} is not supported; use application/json (an array of events), "
        "application/x-ndjson (one event object per line) or text/plain (one event per line)")


def _json_array(body: bytes, max_depth: int) -> list[Event]:
    _check_depth(body, max_depth, "")
    try:
        doc = json.loads(body)
    except UnicodeDecodeError as err:
        raise BadRequestError(f"request body is not UTF-8 (byte offset {err.start})") from None
    except json.JSONDecodeError as err:
        raise BadRequestError(f"invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except (ValueError, RecursionError) as err:
        raise BadRequestError(_beyond_the_parser(err, max_depth)) from None
    if not isinstance(doc, list):
        raise BadRequestError(f"expected a JSON array of events, got {_kind(doc)}")
    return [_event(item, f"item {index}") for index, item in enumerate(doc)]


def _ndjson(body: bytes, max_depth: int) -> list[Event]:
    events = []
    for number, line in enumerate(body.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"line {number}"
        _check_depth(line, max_depth, f"{where}: ")
        try:
            item = json.loads(line)
        except UnicodeDecodeError as err:
            raise BadRequestError(f"{where}: not UTF-8 (byte {err.start} of the line)") from None
        except json.JSONDecodeError as err:
            raise BadRequestError(f"{where}: invalid JSON at column {err.colno}: {err.msg}") from None
        except (ValueError, RecursionError) as err:
            raise BadRequestError(f"{where}: {_beyond_the_parser(err, max_depth)}") from None
        events.append(_event(item, where))
    return events


def _beyond_the_parser(err: ValueError | RecursionError, max_depth: int) -> str:
    """The reason for an input the JSON parser refuses without a position (one line)."""
    if isinstance(err, RecursionError):  # only if the recursion limit is far lower than usual
        return f"JSON nested deeper than the parser can follow (max_json_depth={max_depth})"
    if "digits" in str(err):
        return (f"a number of more than {sys.get_int_max_str_digits()} digits; events carry text: "
                "send long numbers as strings")
    return "invalid JSON: " + " ".join(str(err).split())


# -- nesting depth, without parsing -----------------------------------------------------------
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_STRING = re.compile(rb'"[^"]*"')  # in the skeleton: a string and the brackets it holds
_INNERMOST = re.compile(rb"\[\]|\{\}")  # one pass removes exactly one level of nesting
_OPEN_RUN = re.compile(rb"[\[{]+")


def _check_depth(data: bytes, max_depth: int, where: str) -> None:
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return  # cannot nest deeper than it has brackets: the common case costs two counts
    encoding = json.detect_encoding(data)
    if not encoding.startswith("utf-8"):  # UTF-16/32, which json.loads reads too: scan it as UTF-8
        try:
            data = data.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        except UnicodeError:
            return  # the parser refuses it with the offset
    if nesting_depth(data, stop_above=max_depth) > max_depth:
        raise BadRequestError(f"{where}JSON nested deeper than max_json_depth={max_depth} (events nest "
                              f"{MIN_JSON_DEPTH} levels: array, event object, headers object)")


def nesting_depth(data: bytes, *, stop_above: int | None = None) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``data`` (UTF-8), brackets
    inside strings not counted, without parsing: every step runs in C over the whole text.

    Escapes are removed first (``\\\\`` pairs, then ``\\"``), so every quote left delimits a
    string; the skeleton keeps only quotes and brackets; strings (with the brackets they hold)
    go; then each pass removes the innermost empty pairs, one level per pass. Exact for valid
    JSON; for invalid JSON (a pass that removes nothing from what is left: unbalanced brackets)
    at least the deepest the parser would recurse before refusing it. With ``stop_above``, at
    most that many passes plus one: the answer is then ``stop_above + 1``."""
    skeleton = _STRING.sub(b"", data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE))
    depth = 0
    while skeleton:
        if stop_above is not None and depth > stop_above:
            return depth
        skeleton, removed = _INNERMOST.subn(b"", skeleton)
        if not removed:
            break
        depth += 1
    # Unbalanced (invalid JSON): the parser would recurse through a run of openers before it
    # finds the text invalid, so the longest run left counts as depth too.
    return max(depth, max((len(run) for run in _OPEN_RUN.findall(skeleton)), default=0))


def _event(item: Any, where: str) -> Event:
    if not isinstance(item, dict):
        raise BadRequestError(f"{where}: expected an object with 'body' or 'body_base64', got {_kind(item)}")
    unknown = sorted(set(item) - _KEYS)
    if unknown:
        raise BadRequestError(f"{where}: unknown key {unknown[0]!r} (allowed: body, body_base64, headers)")
    return Event(_body(item, where), _headers(item.get("headers"), where))


def _body(item: dict[str, Any], where: str) -> bytes:
    if ("body" in item) == ("body_base64" in item):
        raise BadRequestError(f"{where}: needs exactly one of 'body' (text) and 'body_base64' (binary)")
    if "body" in item:
        text = item["body"]
        if not isinstance(text, str):
            raise BadRequestError(f"{where}: 'body' must be a string, got {_kind(text)} "
                                  "(send binary data as 'body_base64')")
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequestError(f"{where}: 'body' contains a lone surrogate escape; not valid Unicode") from None
    encoded = item["body_base64"]
    if not isinstance(encoded, str):
        raise BadRequestError(f"{where}: 'body_base64' must be a string, got {_kind(encoded)}")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as err:
        raise BadRequestError(f"{where}: 'body_base64' is not valid base64 ({err})") from None


def _headers(headers: Any, where: str) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, dict):
        raise BadRequestError(f"{where}: 'headers' must be an object of strings, got {_kind(headers)}")
    for key, value in headers.items():
        if not isinstance(value, str):
            raise BadRequestError(f"{where}: header {key!r} must be a string, got {_kind(value)}")
        try:
            (key + value).encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequestError(f"{where}: header {key!r} contains a lone surrogate escape") from None
    return dict(headers)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)
