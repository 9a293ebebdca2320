"""One channel transaction held open on the agent through a ``Transaction`` stream.

The client speaks in lockstep: one request, then the responses that answer it. A request that
fails inside the transaction comes back as a ``Failure`` carrying the error and the state the
transaction is left in, so a refused put (channel full, transaction capacity) leaves the
transaction usable exactly as in-process. Operations on a transaction that is no longer open
fail locally with ``TransactionError``, as FileChannel's do.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from ..channel import Event, EventColumns, TxnState
from ..errors import ChannelClosedError, IngestError, TransactionError
from .errors import AgentUnavailableError, RemoteError, from_rpc_error, rebuild
from .proto import agent_pb2 as pb
from .wire import decode_taken, fill_batch

__all__ = ["RemoteTransaction", "TxnStream"]

_STATES = {pb.TXN_STATE_OPEN: TxnState.OPEN, pb.TXN_STATE_COMMITTED: TxnState.COMMITTED,
           pb.TXN_STATE_ROLLED_BACK: TxnState.ROLLED_BACK, pb.TXN_STATE_UNKNOWN: TxnState.UNKNOWN}


class TxnStream:
    """A ``Transaction`` call: requests go through a queue, responses are read in order.

    A reader thread moves responses into a queue so that :meth:`recv` can give up after
    ``timeout`` seconds: an agent that is alive but stuck (HTTP/2 pings still answered) then
    costs the caller a clear error instead of a hang, and the call is cancelled, which makes the
    agent roll the transaction back.
    """

    def __init__(self, stub: Any, metadata: Sequence[tuple[str, str]], timeout: float | None = None, *,
                 prepare: Callable[[pb.TxnResponse], Any] | None = None) -> None:
        self.timeout = timeout
        self._requests: queue.SimpleQueue[pb.TxnRequest | None] = queue.SimpleQueue()
        self._responses: Any = stub.Transaction(iter(self._requests.get, None), metadata=metadata)
        self._answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=_pump, args=(self._responses, self._answers, prepare), name="txn-stream-reader",
                         daemon=True).start()
        # A transaction dropped without commit or rollback must not leave gRPC's request-feeding
        # thread blocked on the queue forever (the agent rolls back when its lease runs out).
        weakref.finalize(self, self._requests.put, None)

    def send(self, request: pb.TxnRequest) -> None:
        self._requests.put(request)

    def recv(self, what: str) -> pb.TxnResponse:
        """The next response; a broken call raises the toolkit error it stands for."""
        answer: pb.TxnResponse = self.recv_any(what)
        return answer

    def recv_any(self, what: str) -> Any:
        """:meth:`recv` of a stream made with ``prepare``: the next response as ``prepare`` made it
        (on the reader thread, so that work overlaps the caller's)."""
        try:
            answer = self._answers.get(timeout=self.timeout)
        except queue.Empty:
            self.close()
            raise AgentUnavailableError(f"{what}: no answer from the agent within {self.timeout:g} s; the call "
                                        "was cancelled (the agent rolls an open transaction back)") from None
        if answer is None:
            self._answers.put(None)  # the end stays the end for later reads
            raise _StreamEnded(f"{what}: the agent ended the transaction stream unexpectedly")
        if isinstance(answer, grpc.RpcError):
            raise from_rpc_error(answer, what=what)
        return answer

    def recv_or_end(self, what: str) -> pb.TxnResponse | None:
        """:meth:`recv`, but None when the agent ended the stream normally."""
        try:
            return self.recv(what)
        except _StreamEnded:
            return None

    def close(self) -> None:
        """Half-close, and cancel the call if the agent has not ended it (it then rolls back)."""
        self._requests.put(None)
        self._responses.cancel()


class _StreamEnded(RemoteError):
    """The agent ended the stream where an answer was expected."""


def _pump(responses: Any, answers: queue.SimpleQueue[Any],
          prepare: Callable[[pb.TxnResponse], Any] | None = None) -> None:
    """Move the call's responses (each through ``prepare``, if given) into ``answers``; None
    marks the end of the stream."""
    try:
        for response in responses:
            answers.put(response if prepare is None else prepare(response))
    except grpc.RpcError as err:
        answers.put(err)
        return
    answers.put(None)


class RemoteTransaction:
    """A transaction on a remote channel; the stream opens at the first operation."""

    def __init__(self, connect: Callable[[], TxnStream], channel: str, lease_seconds: float = 0.0,
                 closed: Callable[[], bool] = lambda: False) -> None:
        self._connect, self.channel, self._closed = connect, channel, closed
        self.lease_seconds = lease_seconds
        self.channel_id = b""
        self.state = TxnState.OPEN
        self._stream: TxnStream | None = None
        self._lock = threading.Lock()

    # -- operations -----------------------------------------------------------------------
    def put(self, event: Event) -> int:
        return self.put_many([event])[0]

    def put_many(self, events: Sequence[Event]) -> list[int]:
        batch = events if isinstance(events, (list, tuple)) else list(events)
        request = pb.TxnRequest()
        fill_batch(request.put, batch)
        response = self._call(request, "put")
        if response.WhichOneof("result") != "put":
            raise RemoteError(f"put: unexpected answer {response.WhichOneof('result')}")
        return list(range(response.put.first_seq, response.put.first_seq + response.put.count))

    def take(self, max_events: int = 1) -> list[Event]:
        return self.take_columns(max_events).events()

    def take_columns(self, max_events: int = 1) -> EventColumns:
        if max_events < 0:
            raise ValueError("max_events must be >= 0")
        with self._lock:
            self._check_usable()
            self._open()
            return self._take_locked(max_events)

    def begin_with_take(self, max_events: int) -> EventColumns:
        """Open the stream with a take in the same request (one round trip)."""
        with self._lock:
            self._check_usable()
            self._open(take=max_events)
            return self._receive_columns("take")

    def commit_and_take(self, max_events: int) -> tuple[RemoteTransaction, EventColumns] | None:
        """Commit (durable once this returns), then take up to ``max_events`` in a new transaction
        on the same stream (``End.take_next``): one round trip, no new stream. None when the agent
        did not begin one (an agent without the feature, or no free slot): the commit stands and
        the caller opens a new take. The new transaction's events are held for this client."""
        if max_events < 0:
            raise ValueError("max_events must be >= 0")
        with self._lock:
            self._check_usable()
            stream = self._stream
            if stream is None:
                self.state = TxnState.COMMITTED
                return None
            stream.send(pb.TxnRequest(commit=pb.End(take_next=max_events)))
            response = self._answer("commit")
            self.state = _STATES[response.ended.state]
            if self.state is not TxnState.COMMITTED or not max_events:
                stream.close()
                return None
            following = RemoteTransaction(self._connect, self.channel, self.lease_seconds, self._closed)
            try:
                begun = stream.recv_or_end(f"begin transaction on {self.channel}")
            except IngestError:
                stream.close()
                return None
            if begun is None or begun.WhichOneof("result") != "begun":
                stream.close()
                return None
            self._stream = None  # the stream is the next transaction's now
            following._stream, following.channel_id = stream, begun.begun.channel_id
            following.lease_seconds = begun.begun.lease_seconds
        try:
            with following._lock:
                columns = following._receive_columns("take")
        except IngestError:
            following.discard()
            return None
        return following, columns

    def extend(self, lease_seconds: float = 0.0) -> float:
        response = self._call(pb.TxnRequest(extend=pb.Extend(lease_seconds=lease_seconds)), "extend lease")
        self.lease_seconds = response.extended.lease_seconds
        return self.lease_seconds

    def commit(self) -> None:
        self._end("commit")

    def rollback(self) -> None:
        self._end("rollback")

    def discard(self) -> None:
        """Drop the stream without a word; the agent rolls the transaction back."""
        if self._stream is not None:
            self._stream.close()
        if self.state is TxnState.OPEN:
            self.state = TxnState.ROLLED_BACK

    def __enter__(self) -> RemoteTransaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self.state is not TxnState.OPEN:
            return
        if exc_type is None:
            self.commit()
            return
        try:
            self.rollback()
        except IngestError:
            self.discard()  # the original exception matters more; the agent rolls back anyway

    # -- internals ------------------------------------------------------------------------
    def _call(self, request: pb.TxnRequest, what: str) -> pb.TxnResponse:
        with self._lock:
            self._check_usable()
            self._open()
            assert self._stream is not None
            self._stream.send(request)
            return self._answer(what)

    def _end(self, op: str) -> None:
        with self._lock:
            self._check_usable()
            if self._stream is None:  # nothing was sent: nothing to end on the agent
                self.state = TxnState.COMMITTED if op == "commit" else TxnState.ROLLED_BACK
                return
            end = pb.TxnRequest(commit=pb.End()) if op == "commit" else pb.TxnRequest(rollback=pb.End())
            self._stream.send(end)
            response = self._answer(op)
            self.state = _STATES[response.ended.state]
            self._stream.close()  # the agent ended the call; this ends our request feeder thread

    def _open(self, take: int = 0) -> None:
        if self._stream is not None:
            return
        stream = self._connect()
        stream.send(pb.TxnRequest(begin=pb.Begin(channel=self.channel, lease_seconds=self.lease_seconds,
                                                 take=take, payloads=True)))
        try:
            begun = stream.recv(f"begin transaction on {self.channel}")
        except BaseException:
            stream.close()
            self.state = TxnState.ROLLED_BACK
            raise
        self._stream = stream
        self.channel_id, self.lease_seconds = begun.begun.channel_id, begun.begun.lease_seconds

    def _take_locked(self, max_events: int) -> EventColumns:
        assert self._stream is not None
        self._stream.send(pb.TxnRequest(take=pb.Take(max_events=max_events)))
        return self._receive_columns("take")

    def _receive_columns(self, what: str) -> EventColumns:
        columns = EventColumns()
        while True:
            response = self._answer(what)
            columns.extend(decode_taken(response.chunk.events))
            if response.chunk.last:
                return columns

    def _answer(self, what: str) -> pb.TxnResponse:
        assert self._stream is not None
        try:
            response = self._stream.recv(what)
        except IngestError:
            # The call broke: the agent rolls back an open transaction whose stream ends, but a
            # commit in flight may or may not have happened.
            self.state = TxnState.UNKNOWN if what == "commit" else TxnState.ROLLED_BACK
            self._stream.close()
            raise
        if response.WhichOneof("result") == "failure":
            failure = response.failure
            self.state = _STATES.get(failure.state, TxnState.UNKNOWN)
            if self.state is not TxnState.OPEN:
                self._stream.close()
            raise rebuild(failure.code, failure.kind, failure.message, failure.attrs_json)
        return response

    def _check_usable(self) -> None:
        if self._closed():
            raise ChannelClosedError()
        if self.state is not TxnState.OPEN:
            raise TransactionError(f"remote transaction on {self.channel} is already {self.state.value}")

