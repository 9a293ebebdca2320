"""Pipelined remote takes: a window of leased batches in flight on one stream (``Begin.window``).

The agent takes ``window`` batches ahead and sends them; the client's stream reader decodes each
batch as it arrives. A commit ends the oldest batch, and the agent then takes one more, so while
the caller works on batch N the agent reads batch N + window and the reader decodes the ones
between: the agent and the client no longer wait for each other per batch.

What stays as with one take: a batch's events leave the channel only when that batch commits;
``commit`` is durable once it returns; commits go in take order (a batch whose elder is not
committed refuses to commit); a rollback, a closed pipeline, a dead client or an expired lease
put every uncommitted batch back at the head of the queue, in order (the agent rolls them back
newest first).
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..channel import Event, EventColumns, TxnState
from ..errors import IngestError, TransactionError
from .errors import rebuild
from .proto import agent_pb2 as pb
from .remote_txn import TxnStream
from .wire import decode_taken

__all__ = ["PipelinedTake", "TakePipeline"]

_STATES = {pb.TXN_STATE_OPEN: TxnState.OPEN, pb.TXN_STATE_COMMITTED: TxnState.COMMITTED,
           pb.TXN_STATE_ROLLED_BACK: TxnState.ROLLED_BACK, pb.TXN_STATE_UNKNOWN: TxnState.UNKNOWN}


def decoded(response: pb.TxnResponse) -> pb.TxnResponse | tuple[EventColumns, bool]:
    """A chunk as ``(columns, last)``, decoded on the stream's reader thread; others as they are."""
    if response.WhichOneof("result") != "chunk":
        return response
    try:
        return decode_taken(response.chunk.events), response.chunk.last
    except IngestError:
        return response  # decoded again, and raised, on the caller's thread


class PipelinedTake:
    """One batch of a :class:`TakePipeline` (a ``TakeBatch``, like :class:`~.client.RemoteTake`):
    ``columns`` (``events``) oldest first, each with its ``seq``; ``index`` counts the batches of
    the pipeline from 0. ``commit`` only after every older batch committed; ``rollback`` ends the
    whole pipeline (this batch and the newer ones go back to the head, in order)."""

    def __init__(self, pipeline: TakePipeline, index: int, columns: EventColumns) -> None:
        self._pipeline, self.index, self.columns = pipeline, index, columns
        self.channel_id: bytes = pipeline.channel_id
        self.state = TxnState.OPEN

    @functools.cached_property
    def events(self) -> list[Event]:
        """``columns`` as Event objects, made on first use."""
        return self.columns.events()

    def commit(self) -> None:
        """Commit this batch (durable once this returns); refused while an older one is open.
        A connection that breaks while the answer is awaited leaves it ``UNKNOWN`` (the newer
        batches are rolled back by the agent)."""
        self._pipeline.commit(self)

    def rollback(self) -> None:
        """Roll back every uncommitted batch of the pipeline (it ends)."""
        self._pipeline.close()

    def __len__(self) -> int:
        return len(self.columns)


class TakePipeline:
    """Iterate to get the batches in take order; :meth:`PipelinedTake.commit` each, in order.

    ``window`` batches of up to ``max_events`` are in flight (the agent caps it; an agent without
    take windows serves one at a time). A batch may be empty (the channel held nothing when it
    was taken); the pipeline goes on taking until :meth:`close` (or the end of a ``with`` block),
    which rolls back every batch not committed. Not for several threads at once.
    """

    def __init__(self, connect: Callable[[], TxnStream], channel: str, max_events: int, *, window: int,
                 lease_seconds: float = 0.0) -> None:
        if max_events < 1 or window < 1:
            raise ValueError(f"max_events and window must be >= 1, got {max_events} and {window}")
        self.channel, self.max_events = channel, max_events
        self._lock = threading.Lock()
        self._ready: deque[EventColumns] = deque()  # received, not yet handed out
        self._held: deque[PipelinedTake] = deque()  # handed out, not committed (oldest first)
        self._parts: list[EventColumns] = []  # chunks of the batch being received
        self._coming = 0  # batches asked of the agent, not yet received whole
        self._handed = 0
        self._broken = False
        self._stream: TxnStream | None = connect()
        self._stream.send(pb.TxnRequest(begin=pb.Begin(channel=channel, lease_seconds=lease_seconds,
                                                       take=max_events, payloads=True, window=window)))
        try:
            begun = self._recv("begin take window")
        except BaseException:
            self._drop()
            raise
        if not isinstance(begun, pb.TxnResponse) or begun.WhichOneof("result") != "begun":
            self._drop()
            raise TransactionError(f"begin take window on {channel}: unexpected first answer")
        self.channel_id, self.lease_seconds = begun.begun.channel_id, begun.begun.lease_seconds
        self.window = begun.begun.window or 1  # 0: an agent without windows took one batch
        self._coming = self.window

    # -- batches --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[PipelinedTake]:
        return self

    def __next__(self) -> PipelinedTake:
        with self._lock:
            if self._stream is None and not self._ready:
                raise StopIteration
            while not self._ready:
                if not self._coming:
                    raise TransactionError(
                        f"all {len(self._held)} batches of the take window on {self.channel} are handed out and "
                        "not committed: commit the oldest before asking for another")
                self._receive_one("take")
            batch = PipelinedTake(self, self._handed, self._ready.popleft())
            self._handed += 1
            self._held.append(batch)
            return batch

    def commit(self, batch: PipelinedTake) -> None:
        """Commit ``batch``, the oldest uncommitted one; the agent takes the next in its place."""
        with self._lock:
            if batch.state is not TxnState.OPEN:
                raise TransactionError(f"batch {batch.index} of the take window on {self.channel} is already "
                                       f"{batch.state.value}")
            if self._stream is None:
                raise TransactionError(f"the take window on {self.channel} is closed; batch {batch.index} was "
                                       "rolled back")
            if self._held[0] is not batch:
                raise TransactionError(
                    f"batch {batch.index} of the take window on {self.channel} cannot commit before batch "
                    f"{self._held[0].index}: commit batches in the order they were taken")
            self._stream.send(pb.TxnRequest(commit=pb.End(take_next=self.max_events)))
            self._coming += 1  # the agent takes one more after the commit
            try:
                batch.state = self._ended("commit")
            except IngestError:
                if self._broken:  # the answer was lost: the commit may or may not have happened
                    batch.state = TxnState.UNKNOWN
                raise
            self._held.popleft()
            if batch.state is not TxnState.COMMITTED:  # the agent rolled the window back
                self._finish(TxnState.ROLLED_BACK)
                raise TransactionError(f"commit of batch {batch.index} on {self.channel} ended {batch.state.value}")

    def close(self) -> None:
        """Roll back every batch not committed (the agent: newest first, so they return in order)."""
        with self._lock:
            if self._stream is None:
                return
            try:
                self._stream.send(pb.TxnRequest(rollback=pb.End()))
                self._ended("rollback")
            except IngestError:
                pass  # the stream broke: the agent rolls back when it ends
            self._finish(TxnState.ROLLED_BACK)

    def __enter__(self) -> TakePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the stream -----------------------------------------------------------------------
    def _ended(self, what: str) -> TxnState:
        """Read up to the answer ``ended`` (chunks before it belong to batches in flight)."""
        while True:
            answer = self._recv(what)
            if isinstance(answer, tuple) or answer.WhichOneof("result") == "chunk":
                self._add_chunk(answer)
                continue
            if answer.WhichOneof("result") == "ended":
                return _STATES[answer.ended.state]
            if answer.WhichOneof("result") != "begun":  # begun: an agent without windows, after take_next
                raise TransactionError(f"{what} on {self.channel}: unexpected answer {answer.WhichOneof('result')}")

    def _receive_one(self, what: str) -> None:
        """Read until one more batch is whole."""
        ready = len(self._ready)
        while len(self._ready) == ready:
            answer = self._recv(what)
            if isinstance(answer, pb.TxnResponse) and answer.WhichOneof("result") == "begun":
                continue
            if isinstance(answer, pb.TxnResponse) and answer.WhichOneof("result") != "chunk":
                raise TransactionError(f"{what} on {self.channel}: unexpected answer {answer.WhichOneof('result')}")
            self._add_chunk(answer)

    def _add_chunk(self, answer: pb.TxnResponse | tuple[EventColumns, bool]) -> None:
        if isinstance(answer, pb.TxnResponse):  # the reader could not decode it: raise here
            answer = decode_taken(answer.chunk.events), answer.chunk.last
        columns, last = answer
        if not last:
            self._parts.append(columns)
            return
        if self._parts:
            whole = EventColumns()
            for part in (*self._parts, columns):
                whole.extend(part)
            self._parts, columns = [], whole
        self._ready.append(columns)
        self._coming -= 1

    def _recv(self, what: str) -> Any:
        assert self._stream is not None
        try:
            answer = self._stream.recv_any(what)
        except IngestError:
            self._broken = True
            self._finish(TxnState.ROLLED_BACK)  # the stream broke: the agent rolls back what is open
            raise
        if isinstance(answer, pb.TxnResponse) and answer.WhichOneof("result") == "failure":
            failure = answer.failure
            self._finish(TxnState.ROLLED_BACK)
            raise rebuild(failure.code, failure.kind, failure.message, failure.attrs_json)
        return answer

    def _finish(self, state: TxnState) -> None:
        """The window is over: every batch still held or in flight ended in ``state``."""
        for batch in self._held:
            if batch.state is TxnState.OPEN:
                batch.state = state
        self._held.clear()
        self._ready.clear()
        self._coming = 0
        self._drop()

    def _drop(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
