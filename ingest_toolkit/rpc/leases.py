"""Leases of remote transactions: a transaction nobody talks to is rolled back.

Each transaction opened over gRPC is a :class:`RemoteTxn`, owned by the server thread that runs
its stream. The lease is an idle timeout: every request on the stream renews it for the lease
length, and an ``extend`` request changes that length. One :class:`LeaseTable` thread checks the
deadlines; a transaction whose deadline passed is rolled back *at once* (its taken events go
back to the head of the queue, in order), whether or not the client ever comes back. A client
that comes back later is told ``LeaseExpiredError`` (FAILED_PRECONDITION). A client that
disconnects does not wait for the lease: the stream's end rolls the transaction back.

Why a lock per transaction: the reaper and the stream's thread may both end the transaction;
the reaper only tries the lock (a transaction in the middle of a request is, by definition, not
idle), so it never waits behind a slow take.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..channel import Transaction, TxnState
from ..errors import ChannelError

__all__ = ["LeaseTable", "Leased", "RemoteTxn"]

log = logging.getLogger("ingest_toolkit.rpc")


class Leased(Protocol):
    """What the :class:`LeaseTable` needs of a leased holder: a :class:`RemoteTxn`, or a take
    window (:class:`~.window.TakeWindow`) holding several take transactions under one lease."""

    channel: str
    peer: str
    lease_seconds: float
    expired_at: float | None
    expired_events: int

    @property
    def txn_id(self) -> int | str: ...

    def expire_if_due(self, now: float) -> bool: ...

    def cancel_stream(self) -> None: ...

    def log_fields(self, *, events: int, outcome: str) -> dict[str, object]: ...


class RemoteTxn:
    """One remote transaction: the channel transaction, its lease and who holds it."""

    def __init__(self, tx: Transaction, *, channel: str, lease_seconds: float, peer: str,
                 cancel: Callable[[], None] | None = None, payloads: bool = False) -> None:
        self.tx, self.channel, self.peer = tx, channel, peer
        self.payloads = payloads  # takes answer with payloads as stored (Begin.payloads)
        self.lease_seconds = lease_seconds
        self.opened = time.monotonic()
        self.lock = threading.Lock()
        self.deadline = time.monotonic() + lease_seconds
        self.expired_at: float | None = None  # monotonic time the lease ran out (None: it did not)
        self.expired_events = 0
        self._cancel = cancel

    @property
    def txn_id(self) -> int:
        return self.tx.txn_id

    def renew(self, lease_seconds: float | None = None) -> None:
        """Start a new lease from now (call with ``lock`` held)."""
        if lease_seconds is not None:
            self.lease_seconds = lease_seconds
        self.deadline = time.monotonic() + self.lease_seconds

    def expire_if_due(self, now: float) -> bool:
        """Roll back if the lease ran out and no request is being served; True if it did."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if self.expired_at is not None or self.tx.state is not TxnState.OPEN or now < self.deadline:
                return False
            self.expired_at, self.expired_events = now, self.tx.count
            self._end_quietly()
            return True
        finally:
            self.lock.release()

    def abandon(self) -> None:
        """Roll back if still open (stream ended or broke); safe to call more than once."""
        with self.lock:
            self._end_quietly()

    def log_fields(self, *, events: int, outcome: str) -> dict[str, object]:
        """Structured fields of a log line about this transaction (the agent logs them as keys)."""
        return {"channel": self.channel, "txn": self.tx.txn_id, "events": events, "outcome": outcome,
                "peer": self.peer, "held_seconds": round(time.monotonic() - self.opened, 3)}

    def cancel_stream(self) -> None:
        if self._cancel is not None:
            self._cancel()

    def _end_quietly(self) -> None:
        if self.tx.state is TxnState.OPEN:
            try:
                self.tx.rollback()
            except ChannelError as err:  # e.g. the channel closed meanwhile: it rolled back itself
                log.info("rollback of remote transaction %s on %s: %s", self.tx.txn_id, self.channel, err)


class LeaseTable:
    """The open remote transactions and the thread that expires their leases."""

    def __init__(self, *, default_lease: float, max_lease: float, cancel_after: float = 30.0,
                 tick: float = 0.02) -> None:
        if not 0 < default_lease <= max_lease:
            raise ValueError(f"need 0 < default_lease ({default_lease}) <= max_lease ({max_lease})")
        self.default_lease, self.max_lease = default_lease, max_lease
        self._cancel_after, self._tick = cancel_after, tick
        self._txns: set[Leased] = set()
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.expired_total = 0

    def lease_for(self, requested: float) -> float:
        """The lease granted for a request of ``requested`` seconds (0: the default)."""
        if not (math.isfinite(requested) and requested >= 0):  # the service checked it (.edge)
            raise ValueError(f"lease_seconds must be a finite number >= 0, got {requested}")
        return min(requested or self.default_lease, self.max_lease)

    def add(self, txn: Leased, *, limit: int | None = None) -> bool:
        """Register ``txn``; with ``limit``, only while fewer than ``limit`` are registered (the
        check and the add are one step under the lock, so concurrent begins cannot overshoot)."""
        with self._guard:
            if limit is not None and len(self._txns) >= limit:
                return False
            self._txns.add(txn)
            return True

    def remove(self, txn: Leased) -> None:
        with self._guard:
            self._txns.discard(txn)

    def __len__(self) -> int:
        return len(self._txns)

    def stats(self) -> dict[str, Any]:
        with self._guard:
            txns = list(self._txns)
        return {"open": len(txns), "expired_total": self.expired_total,
                "by_channel": {name: sum(1 for t in txns if t.channel == name) for name in {t.channel for t in txns}}}

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rpc-lease-reaper", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.wait(self._tick):
            now = time.monotonic()
            with self._guard:
                txns = list(self._txns)
            for txn in txns:
                self._check(txn, now)

    def _check(self, txn: Leased, now: float) -> None:
        if txn.expire_if_due(now):
            self.expired_total += 1
            log.warning("lease of %.3gs expired: rolled back remote transaction %s on channel %s "
                        "(%d events back at the head) held by %s", txn.lease_seconds, txn.txn_id,
                        txn.channel, txn.expired_events, txn.peer,
                        extra=txn.log_fields(events=txn.expired_events, outcome="expired"))
        elif txn.expired_at is not None and now - txn.expired_at > self._cancel_after:
            self.remove(txn)
            txn.cancel_stream()  # the client never came back: free the stream's server thread
