"""Parsing HTTP request bodies into events, with precise messages for malformed input.

* ``application/json``: an array of ``{"headers": {str: str}, "body": str}`` objects, or
  ``"body_base64"`` instead of ``"body"`` for binary bodies. ``body`` is stored as UTF-8.
* ``application/x-ndjson``: one such object per line (blank lines are skipped).
* ``text/plain``: one event per line, the line's bytes as the body (``\\n`` removed, a final
  newline does not start an empty event).

Any problem rejects the whole request (nothing is stored); the message names the item or line.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ...channel import Event
from ...errors import IngestError

__all__ = ["BadRequestError", "UnsupportedMediaTypeError", "parse_events"]

_KEYS = frozenset({"headers", "body", "body_base64"})
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl",
                          "application/x-jsonlines"})


class BadRequestError(IngestError):
    """Malformed request body (HTTP 400); the message says where and what."""


class UnsupportedMediaTypeError(IngestError):
    """A Content-Type this source does not read (HTTP 415)."""


def parse_events(body: bytes, content_type: str | None) -> list[Event]:
    media = (content_type or "application/json").split(";")[0].strip().lower()
    if media == "application/json":
        return _json_array(body)
    if media in NDJSON_TYPES:
        return _ndjson(body)
    if media == "text/plain":
        lines = body.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        return [Event(line, {}) for line in lines]
    raise UnsupportedMediaTypeError(
        f"Content-Type {media!r} is not supported; use application/json (an array of events), "
        "application/x-ndjson (one event object per line) or text/plain (one event per line)")


def _json_array(body: bytes) -> list[Event]:
    try:
        doc = json.loads(body)
    except UnicodeDecodeError as err:
        raise BadRequestError(f"request body is not UTF-8 (byte offset {err.start})") from None
    except json.JSONDecodeError as err:
        raise BadRequestError(f"invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    if not isinstance(doc, list):
        raise BadRequestError(f"expected a JSON array of events, got {_kind(doc)}")
    return [_event(item, f"item {index}") for index, item in enumerate(doc)]


def _ndjson(body: bytes) -> list[Event]:
    events = []
    for number, line in enumerate(body.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            item = json.loads(line)
        except UnicodeDecodeError as err:
            raise BadRequestError(f"{where}: not UTF-8 (byte {err.start} of the line)") from None
        except json.JSONDecodeError as err:
            raise BadRequestError(f"{where}: invalid JSON at column {err.colno}: {err.msg}") from None
        events.append(_event(item, where))
    return events


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
