"""Rules the stages share when they hand batches to a channel or take them out of one.

A leaf module: it imports only :mod:`ingest_toolkit.errors`, so every stage may import it and
none has to import another for these rules. The collect pipeline and the gRPC put handler both
store client batches under batch ids (``rpc`` sits below ``collect``: the agent serves gRPC, the
gRPC layer never imports the pipeline); the landing and the gRPC client both open takes whose
size a channel may refuse.

* :class:`PutResult`: what storing one batch reports.
* :func:`hold_batch_id`: the process-wide lock of a batch id, held from the ``find_tag`` check to
  the commit, so two concurrent retries of one batch cannot both store it. Process-wide because
  pipelines of different sources and the gRPC put handler may share channels.
* :func:`take_within_capacity`: a take that asks for more than the channel's
  ``transaction_capacity`` is asked again for what the channel allows.

The batch id's own rule (1 to 128 bytes of UTF-8: it becomes the channel's commit tag) is the
channel's: :func:`ingest_toolkit.channel.tags.check_tag`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TypeVar

from .errors import TransactionCapacityError

__all__ = ["PutResult", "hold_batch_id", "take_within_capacity"]

T = TypeVar("T")


@dataclass(frozen=True)
class PutResult:
    """``accepted``: events of the batch (after interceptors) that are now stored in their
    required channels, by this call or by an earlier one with the same batch id.
    ``duplicate``: every required channel already held the batch id (nothing was written to
    them). ``channels``: the channels this call committed to."""

    accepted: int
    duplicate: bool
    channels: tuple[str, ...]


class _TagLocks:
    """One lock per batch id, created on demand and dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, tag: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(tag, (threading.Lock(), 0))
            self._locks[tag] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[tag]
                if users == 1:
                    del self._locks[tag]
                else:
                    self._locks[tag] = (lock, users - 1)


_TAG_LOCKS = _TagLocks()


def hold_batch_id(batch_id: str) -> AbstractContextManager[None]:
    """The process-wide lock of ``batch_id``: hold it from the ``find_tag`` check to the commit,
    so that two concurrent retries of one batch cannot both store it."""
    return _TAG_LOCKS.hold(batch_id)


def take_within_capacity(open_take: Callable[[int], T], max_events: int, *,
                         learned: Callable[[int], None] | None = None) -> T:
    """``open_take(max_events)``; if the channel refuses with a ``TransactionCapacityError`` whose
    ``capacity`` is below ``max_events`` (a remote channel: its limit is not known beforehand),
    ``learned(capacity)`` is told and ``open_take(capacity)`` is the answer. Any other refusal,
    and a second one, is raised."""
    try:
        return open_take(max_events)
    except TransactionCapacityError as err:
        capacity = getattr(err, "capacity", None)
        if not isinstance(capacity, int) or not 0 < capacity < max_events:
            raise
    if learned is not None:
        learned(capacity)
    return open_take(capacity)
