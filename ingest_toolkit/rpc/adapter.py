"""A remote channel that looks like a FileChannel to code that only uses transactions.

``AgentClient.channel(name)`` returns one. It passes the channel conformance suite
(``tests/channel/conformance.py``): same transaction contract, same exception classes. Like
FileChannel it allows one open transaction per thread; ``close()`` ends this adapter only (the
agent's channel stays open) and its open transactions are rolled back by the agent.

Direction: the client imports this module, never the reverse; what the adapter needs of a client
is the :class:`AgentConnection` protocol below.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from ..channel import TxnState
from ..errors import ChannelClosedError, TransactionError
from .remote_txn import RemoteTransaction, TxnStream

__all__ = ["AgentConnection", "RemoteChannel"]


class AgentConnection(Protocol):
    """What a :class:`RemoteChannel` needs of its connection (``AgentClient`` is one)."""

    def stream(self) -> TxnStream: ...

    def status(self, channel: str) -> dict[str, Any]: ...


class RemoteChannel:
    """``transaction()``, ``len()``, ``close()`` of the channel ``name`` behind an agent."""

    def __init__(self, client: AgentConnection, name: str, *, lease_seconds: float = 0.0) -> None:
        self.client, self.name, self.lease_seconds = client, name, lease_seconds
        self._local = threading.local()
        self._guard = threading.Lock()
        self._txns: list[RemoteTransaction] = []
        self.closed = False

    def transaction(self) -> RemoteTransaction:
        """Begin a transaction for the calling thread (opened on the agent at its first operation)."""
        if self.closed:
            raise ChannelClosedError()
        current: RemoteTransaction | None = getattr(self._local, "tx", None)
        if current is not None and current.state is TxnState.OPEN:
            raise TransactionError(
                f"this thread already has an open transaction on {self.name}; commit or roll it back "
                "first (one transaction per thread)")
        tx = RemoteTransaction(self.client.stream, self.name, self.lease_seconds, closed=lambda: self.closed)
        with self._guard:
            self._txns = [t for t in self._txns if t.state is TxnState.OPEN]
            self._txns.append(tx)
        self._local.tx = tx
        return tx

    def __len__(self) -> int:
        """Committed events not yet taken, as the agent sees them now."""
        if self.closed:
            raise ChannelClosedError()
        return int(self.client.status(self.name)["queue_size"])

    @property
    def channel_id(self) -> bytes:
        return bytes.fromhex(self.client.status(self.name)["channel_id"])

    def close(self) -> None:
        """Stop using the channel; open transactions are dropped (the agent rolls them back)."""
        with self._guard:
            self.closed = True
            txns, self._txns = self._txns, []
        for tx in txns:
            tx.discard()
