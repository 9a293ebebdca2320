"""Interceptors: per-batch transformations applied before the channel selector.

An interceptor takes the batch's events and returns the events to keep, possibly with changed
headers. Events are never mutated in place (the caller may still hold them, e.g. to retry):
an interceptor that changes headers returns new :class:`Event` objects.

* ``timestamp``: ``header`` (default ``timestamp``) = epoch milliseconds, as Flume does.
* ``host``: ``header`` (default ``host``) = this host's IP address (``use_ip``) or name.
* ``static``: fixed headers.
* ``regex_filter``: keeps events whose body (decoded as UTF-8, undecodable bytes replaced)
  matches ``regex``, or drops them with ``exclude = true``.
* ``event_id``: ``header`` (default ``id``) = a random UUID.

Every header-setting interceptor keeps a value already present unless ``preserve_existing``
is false.
"""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..channel import Event

__all__ = [
    "EventIdInterceptorSettings",
    "HostInterceptorSettings",
    "Interceptor",
    "InterceptorSettings",
    "RegexFilter",
    "RegexFilterInterceptorSettings",
    "SetHeaders",
    "StaticInterceptorSettings",
    "TimestampInterceptorSettings",
    "build_interceptor",
    "build_interceptors",
    "local_host",
]


class Interceptor(Protocol):
    def __call__(self, events: list[Event]) -> list[Event]: ...


class _Base(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TimestampInterceptorSettings(_Base):
    type: Literal["timestamp"]
    header: str = Field(default="timestamp", min_length=1)
    preserve_existing: bool = True


class HostInterceptorSettings(_Base):
    type: Literal["host"]
    header: str = Field(default="host", min_length=1)
    use_ip: bool = True
    preserve_existing: bool = True


class StaticInterceptorSettings(_Base):
    type: Literal["static"]
    headers: dict[str, str] = Field(min_length=1)
    preserve_existing: bool = True


class RegexFilterInterceptorSettings(_Base):
    type: Literal["regex_filter"]
    regex: str
    exclude: bool = False

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as err:
            raise ValueError(f"invalid regular expression: {err}") from None
        return value


class EventIdInterceptorSettings(_Base):
    type: Literal["event_id"]
    header: str = Field(default="id", min_length=1)
    preserve_existing: bool = True


InterceptorSettings = Annotated[
    TimestampInterceptorSettings | HostInterceptorSettings | StaticInterceptorSettings
    | RegexFilterInterceptorSettings | EventIdInterceptorSettings,
    Field(discriminator="type"),
]


class SetHeaders:
    """Sets headers computed per batch (``values()`` is called once per batch)."""

    def __init__(self, values: Callable[[], dict[str, str]], *, preserve_existing: bool) -> None:
        self._values = values
        self._preserve = preserve_existing

    def __call__(self, events: list[Event]) -> list[Event]:
        if not events:
            return events
        values = self._values()
        out = []
        for event in events:
            if self._preserve:
                headers = {**values, **event.headers}
            else:
                headers = {**event.headers, **values}
            out.append(Event(event.body, headers, event.seq))
        return out


class _PerEventHeader:
    """Sets one header to a fresh value per event (event ids)."""

    def __init__(self, header: str, value: Callable[[], str], *, preserve_existing: bool) -> None:
        self._header, self._value, self._preserve = header, value, preserve_existing

    def __call__(self, events: list[Event]) -> list[Event]:
        out = []
        for event in events:
            if self._preserve and self._header in event.headers:
                out.append(event)
            else:
                out.append(Event(event.body, {**event.headers, self._header: self._value()}, event.seq))
        return out


class RegexFilter:
    """Keeps matching events (``exclude=False``) or drops them (``exclude=True``)."""

    def __init__(self, regex: str, *, exclude: bool) -> None:
        self._pattern = re.compile(regex)
        self._exclude = exclude

    def __call__(self, events: list[Event]) -> list[Event]:
        search = self._pattern.search
        return [e for e in events
                if (search(e.body.decode("utf-8", "replace")) is None) == self._exclude]


def local_host(use_ip: bool) -> str:
    """This host's name, or the address it resolves to (the name when it does not resolve)."""
    name = socket.gethostname()
    if not use_ip:
        return name
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name


def _now_millis() -> str:
    return str(time.time_ns() // 1_000_000)


def build_interceptor(settings: InterceptorSettings) -> Interceptor:
    if isinstance(settings, TimestampInterceptorSettings):
        header = settings.header
        return SetHeaders(lambda: {header: _now_millis()}, preserve_existing=settings.preserve_existing)
    if isinstance(settings, HostInterceptorSettings):
        host = {settings.header: local_host(settings.use_ip)}  # resolved once, at build time
        return SetHeaders(lambda: host, preserve_existing=settings.preserve_existing)
    if isinstance(settings, StaticInterceptorSettings):
        static = dict(settings.headers)
        return SetHeaders(lambda: static, preserve_existing=settings.preserve_existing)
    if isinstance(settings, RegexFilterInterceptorSettings):
        return RegexFilter(settings.regex, exclude=settings.exclude)
    return _PerEventHeader(settings.header, lambda: str(uuid.uuid4()),
                           preserve_existing=settings.preserve_existing)


def build_interceptors(settings: Sequence[InterceptorSettings]) -> list[Interceptor]:
    """Interceptors in configuration order (each one sees the output of the previous one)."""
    return [build_interceptor(s) for s in settings]
