"""The agent's take window: several take transactions of one stream in flight (``Begin.window``).

With one batch per round trip the agent and its client work in turn: the client decodes while
the agent waits, the agent reads and commits while the client waits. A window keeps up to
``size`` batches taken and sent ahead, so the agent reads and encodes the next batches while the
client works on the current one.

Each batch is its own channel take transaction (``pipelined=True``: one stream thread holds
them all). The window keeps the queue's order (the channel refuses a rollback out of order):

* a commit always ends the *oldest* open batch: commit order = take order, by construction;
* every other end (rollback request, broken stream, expired lease, failed commit) rolls back all
  open batches newest first, so each batch returns to the head in front of the newer ones.

Uncommitted batches are never written to the log (a take is logged by its commit), so an agent
that dies with a full window finds all of them queued, in order, on restart; a checkpoint taken
meanwhile records them by take order (``transaction.take_chunks``).

One lease covers the window: every request renews it; the reaper rolls the whole window back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from ..channel import FileChannel, Transaction, TxnState
from ..errors import ChannelError, IngestError
from .errors import ErrorInfo, InvalidRequestError, LeaseExpiredError, describe
from .proto import agent_pb2 as pb

__all__ = ["MAX_WINDOW", "TakeResponses", "TakeWindow"]

log = logging.getLogger("ingest_toolkit.rpc")

MAX_WINDOW = 16
"""The most batches one stream holds at once (``Begin.window`` is capped to it)."""

Observer = Callable[[str, str, float], None]
"""``(op, channel, seconds)``, as the service's (op ``"take"`` or ``"commit"``)."""

TakeResponses = Callable[[Transaction, int], list[pb.TxnResponse]]
"""Take up to n events into the transaction; the chunks that carry them."""

_STATES = {TxnState.OPEN: pb.TXN_STATE_OPEN, TxnState.COMMITTED: pb.TXN_STATE_COMMITTED,
           TxnState.ROLLED_BACK: pb.TXN_STATE_ROLLED_BACK, TxnState.UNKNOWN: pb.TXN_STATE_UNKNOWN}


class TakeWindow:
    """Up to ``size`` open take transactions of one stream, oldest first, under one lease.

    Leased like :class:`~.leases.RemoteTxn` (the :class:`~.leases.LeaseTable` expires it). The
    stream's thread calls :meth:`fill` and :meth:`serve`; the reaper and the end of the call may
    roll the window back from other threads, which ``lock`` serialises.
    """

    def __init__(self, channel: FileChannel, take: TakeResponses, *,
                 observe: Observer | None = None, name: str, size: int, batch: int,
                 lease_seconds: float, lease_for: Callable[[float], float], peer: str,
                 cancel: Callable[[], None] | None = None) -> None:
        self._channel, self._take, self.channel, self.peer = channel, take, name, peer
        self._lease_for = lease_for  # the lease granted for a request (the agent's cap)
        self._observe = observe
        self._refill = 0  # events to take after the answer to the current commit
        self.batch_limit = channel.config.transaction_capacity
        self.size, self.batch, self.lease_seconds = size, batch, lease_seconds
        self.open: deque[Transaction] = deque()  # oldest first
        self.lock = threading.Lock()
        self.opened = time.monotonic()
        self.deadline = self.opened + lease_seconds
        self.expired_at: float | None = None
        self.expired_events = 0
        self.ended = False  # no batch open and none to come: the stream ends
        self._cancel = cancel

    @property
    def txn_id(self) -> str:
        """The open batches' transaction ids, for log lines (``first-last``)."""
        ids = [tx.txn_id for tx in self.open]
        return f"{ids[0]}-{ids[-1]}" if len(ids) > 1 else str(ids[0]) if ids else "-"

    @property
    def count(self) -> int:
        return sum(tx.count for tx in self.open)

    # -- the stream's thread --------------------------------------------------------------
    def fill(self) -> Iterator[list[pb.TxnResponse]]:
        """The window's first batches, one list of chunks per batch (each taken when asked for,
        so the first is on its way while the next is read)."""
        for _ in range(self.size):
            yield self.refill(self.batch)

    def refill(self, n: int) -> list[pb.TxnResponse]:
        """Take one more batch of up to ``n`` events (the newest): its chunks."""
        with self.lock:
            if (refused := self._refused()) is not None:
                return [refused]
            if self.ended:  # rolled back meanwhile (the call ended): take nothing more
                return []
            try:
                return self._take_one(n)
            except Exception as err:  # the window cannot go on: everything back, in order
                return [self._fail(err)]
            finally:
                self._renew()

    def _take_one(self, n: int) -> list[pb.TxnResponse]:
        tx = self._channel.transaction(pipelined=True)
        self.open.append(tx)
        started = time.perf_counter()
        responses = self._take(tx, n)
        self._timed("take", started)
        return responses

    def serve(self, request: pb.TxnRequest | InvalidRequestError) -> Iterator[list[pb.TxnResponse]]:
        """The answer to one request after the window was filled: ``commit`` (the oldest batch),
        ``rollback`` (all), ``extend``; anything else is refused and leaves the window open.

        In parts, each computed under ``lock`` and sent after it is released (a stream suspended
        in a send must never hold the lock the end of its call needs): a commit's ``ended`` goes
        out as soon as the commit is durable, and the batch that replaces it is read after that,
        while the client already goes on with its next batch."""
        with self.lock:
            first = self._serve_locked(request)
        yield first
        if self._refill:
            n, self._refill = self._refill, 0
            yield self.refill(n)

    def _serve_locked(self, request: pb.TxnRequest | InvalidRequestError) -> list[pb.TxnResponse]:
        if (refused := self._refused()) is not None:
            return [refused]
        try:
            return self._apply(request)
        except InvalidRequestError as err:
            log.warning("refused a request in the take window %s on %s from %s: %s", self.txn_id,
                        self.channel, self.peer, err)
            return [_failure(describe(err), TxnState.OPEN)]
        except Exception as err:
            return [self._fail(err)]
        finally:
            self._renew()

    def _apply(self, request: pb.TxnRequest | InvalidRequestError) -> list[pb.TxnResponse]:
        if isinstance(request, InvalidRequestError):
            raise request
        op = request.WhichOneof("op")
        if op == "commit":
            return self._commit(min(request.commit.take_next, self.batch_limit))
        if op == "rollback":
            self._rollback_all("rolled back")
            return [pb.TxnResponse(ended=pb.Ended(state=pb.TXN_STATE_ROLLED_BACK))]
        if op == "extend":
            if request.extend.lease_seconds:  # 0: keep the current length
                self.lease_seconds = self._lease_for(request.extend.lease_seconds)
            return [pb.TxnResponse(extended=pb.Extended(lease_seconds=self.lease_seconds))]
        raise InvalidRequestError(f"unexpected request {op!r} in a take window: send commit (the oldest "
                                  "batch), rollback (all) or extend")

    def _commit(self, take_next: int) -> list[pb.TxnResponse]:
        """Commit the oldest batch (commit order = take order); ``serve`` then takes ``take_next``
        more in its place, after ``ended`` is sent. (Reading the next batch on another thread
        while the commit syncs gained nothing measurable: both need the GIL, and the sync is the
        shorter part.)"""
        tx, started = self.open[0], time.perf_counter()
        tx.commit()  # a failure raises: _serve_locked ends the window (_fail)
        self._timed("commit", started)
        self.open.popleft()
        _log_end(self, tx, "committed")
        self._refill = take_next
        self.ended = self.ended or (not self.open and not take_next)
        return [pb.TxnResponse(ended=pb.Ended(state=_STATES[tx.state]))]

    def _refused(self) -> pb.TxnResponse | None:
        if self.expired_at is None:
            return None
        self.ended = True
        err = LeaseExpiredError(lease_seconds=self.lease_seconds, events=self.expired_events)
        return _failure(describe(err), TxnState.ROLLED_BACK)

    def _fail(self, err: Exception) -> pb.TxnResponse:
        """End the window after ``err``: every open batch back, newest first. A commit that failed
        has already rolled the oldest back (``Transaction.commit``), ahead of newer batches; a take
        commit fails only when the channel closed or failed, whose queue is rebuilt from the log,
        in order, when it opens again."""
        if not isinstance(err, IngestError):
            log.exception("take window %s on %s failed", self.txn_id, self.channel)
        state = self.open[0].state if self.open and self.open[0].state is not TxnState.OPEN else TxnState.ROLLED_BACK
        self._rollback_all("failed")
        return _failure(describe(err), state)

    def _timed(self, op: str, started: float) -> None:
        if self._observe is not None:
            self._observe(op, self.channel, time.perf_counter() - started)

    # -- any thread -----------------------------------------------------------------------
    def _rollback_all(self, outcome: str) -> None:
        """Roll back every open batch, newest first (call with ``lock`` held)."""
        self.ended = True
        while self.open:
            tx = self.open.pop()
            if tx.state is TxnState.OPEN:
                try:
                    tx.rollback()
                except ChannelError as err:  # the channel closed meanwhile: it rolled back itself
                    log.info("rollback of take %s on %s: %s", tx.txn_id, self.channel, err)
            _log_end(self, tx, outcome)

    def _renew(self) -> None:
        """Start a new lease from now (call with ``lock`` held)."""
        self.deadline = time.monotonic() + self.lease_seconds

    def expire_if_due(self, now: float) -> bool:
        """Roll the window back if the lease ran out and no request is being served."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if self.expired_at is not None or not self.open or now < self.deadline:
                return False
            self.expired_at, self.expired_events = now, self.count
            self._rollback_all("expired")
            return True
        finally:
            self.lock.release()

    def abandon(self) -> None:
        """Roll back whatever is open (the stream ended or broke); safe to call more than once."""
        with self.lock:
            if self.open:
                self._rollback_all("client left")

    def cancel_stream(self) -> None:
        if self._cancel is not None:
            self._cancel()

    def log_fields(self, *, events: int, outcome: str) -> dict[str, object]:
        return {"channel": self.channel, "txn": self.txn_id, "events": events, "outcome": outcome,
                "peer": self.peer, "held_seconds": round(time.monotonic() - self.opened, 3)}


def _log_end(window: TakeWindow, tx: Transaction, outcome: str) -> None:
    level = logging.INFO if tx.count else logging.DEBUG  # an empty batch (an idle channel) at DEBUG
    log.log(level, "take window: %d events of channel %s %s (transaction %s, %s)", tx.count, window.channel,
            outcome, tx.txn_id, window.peer, extra=window.log_fields(events=tx.count, outcome=outcome))


def _failure(info: ErrorInfo, state: TxnState) -> pb.TxnResponse:
    return pb.TxnResponse(failure=pb.Failure(code=info.code.name, kind=info.kind, message=info.message,
                                             attrs_json=info.attrs_json, state=_STATES[state]))
