"""The channel as the landing sees it: one take transaction at a time.

Two implementations satisfy :class:`TakeSource`: :class:`InProcessSource` (this process owns
the channel directories) and ``ingest_toolkit.rpc.client.RemoteSource`` (a leased take through
the agent's gRPC API). The landing only relies on what the protocols state.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..channel import Event, EventColumns, FileChannel, Transaction
from ..channel.columnar import ArrowColumns

__all__ = ["InProcessSource", "InProcessTake", "TakeBatch", "TakeSource"]


@runtime_checkable
class TakeBatch(Protocol):
    """One open take transaction. ``columns`` holds its events oldest first, each with its
    ``seq`` (Arrow arrays in process, lists from a remote take); the batch ends in exactly one
    ``commit`` (the events are gone) or ``rollback`` (they are back at the head of the channel,
    in order). Plain attributes satisfy the read-only properties."""

    @property
    def channel_id(self) -> bytes: ...  # the channel's 16-byte identity, part of every event id

    @property
    def columns(self) -> ArrowColumns | EventColumns: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


@runtime_checkable
class TakeSource(Protocol):
    """A channel seen from the landing."""

    @property
    def name(self) -> str: ...

    def open_take(self, max_events: int) -> TakeBatch: ...

    def backlog(self) -> int: ...


class InProcessTake:
    """A :class:`TakeBatch` over a :class:`~ingest_toolkit.channel.Transaction`.

    The channel binds a transaction to the thread that opened it: commit or roll back from that
    thread (the landing does).
    """

    def __init__(self, channel_id: bytes, tx: Transaction, columns: ArrowColumns) -> None:
        self.channel_id = channel_id
        self.columns = columns
        self._tx = tx

    @property
    def events(self) -> list[Event]:
        return self.columns.events()

    def commit(self) -> None:
        self._tx.commit()

    def rollback(self) -> None:
        self._tx.rollback()


class InProcessSource:
    """Takes from a :class:`FileChannel` this process has open.

    A take asks for at most the channel's ``transaction_capacity`` events, whatever
    ``max_events`` says, so a large landing batch never fails with TransactionCapacityError.
    """

    def __init__(self, channel: FileChannel, name: str) -> None:
        self.channel = channel
        self.name = name

    def open_take(self, max_events: int) -> InProcessTake:
        limit = min(max_events, self.channel.config.transaction_capacity)
        tx = self.channel.transaction()
        try:
            columns = tx.take_arrow(limit)  # Arrow arrays straight from the log: no object per event
        except BaseException:
            tx.rollback()
            raise
        return InProcessTake(self.channel.channel_id, tx, columns)

    def backlog(self) -> int:
        return len(self.channel)
