"""Put and take transactions of a :class:`~ingest_toolkit.channel.FileChannel`.

A transaction holds puts only or takes only and ends in exactly one commit or rollback. Puts
are framed (sequence number, checksum) as they arrive and buffered; past ``spill_bytes`` they are
written to the log ahead of the commit (without a sync), which bounds memory for large
transactions. Takes pop pointers from the queue head, which hides them from other takers until
the transaction ends.

A transaction knows its channel only through :class:`TransactionHost`, the few calls it makes
(capacity and sequence numbers, spilling, taking, ending): this module does not import the
channel, which imports it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from ..errors import EventTooLargeError, TransactionCapacityError, TransactionError
from . import format as fmt
from .codec import (
    SMALL_VARINTS,
    Event,
    EventColumns,
    encode_put,
    encode_puts_columns,
    header_entry,
    varint,
)
from .crypto import Placement, run_limit
from .tags import TagRecord

if TYPE_CHECKING:
    from .columnar import ArrowColumns
    from .config import ChannelConfig
    from .crypto import Sealer

__all__ = ["Transaction", "TransactionHost", "TxnKind", "TxnState", "take_chunks"]

_PUT = int(fmt.FrameType.PUT)


class TxnKind(enum.Enum):
    PUT = "put"
    TAKE = "take"


class TxnState(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"
    UNKNOWN = "unknown"  # the commit was written but its sync failed


class TransactionHost(Protocol):
    """What a transaction needs of its channel (:class:`~ingest_toolkit.channel.FileChannel`).

    Each call takes the channel's lock itself; a transaction holds no lock between calls.
    """

    @property
    def config(self) -> ChannelConfig: ...

    @property
    def sealer(self) -> Sealer | None:
        """Encrypts PUT frames when the channel writes with an encryption key (else None)."""
        ...

    def txn_reserve(self, n: int) -> int:
        """Take ``n`` capacity slots and sequence numbers (waiting for room); the first one."""
        ...

    def txn_spill(self, tx: Transaction) -> None:
        """Write ``tx.frames`` to the log ahead of the commit and move their pointers to ``tx.spilled``."""
        ...

    def txn_take_columns(self, tx: Transaction, n: int) -> EventColumns:
        """Pop up to ``n`` events into ``tx`` and read them as columns."""
        ...

    def txn_take_payloads(self, tx: Transaction, n: int) -> tuple[list[bytes], list[int]]:
        """Pop up to ``n`` events into ``tx``; their PUT payloads as stored, and their seqs."""
        ...

    def txn_take_arrow(self, tx: Transaction, n: int) -> ArrowColumns:
        """Pop up to ``n`` events into ``tx`` and read them as an Arrow table."""
        ...

    def txn_commit(self, tx: Transaction) -> None:
        """Make ``tx`` durable and visible (or raise, leaving it open or unknown)."""
        ...

    def txn_rollback(self, tx: Transaction) -> None:
        """Undo ``tx`` (no-op when it is no longer open)."""
        ...


class Transaction:
    """Use as a context manager: commit on normal exit, roll back on an exception."""

    def __init__(self, channel: TransactionHost, txn_id: int, tag: str | None = None) -> None:
        self._channel = channel
        self.txn_id = txn_id
        self.tag = tag  # validated by FileChannel.transaction; puts only
        self.tag_record: TagRecord | None = None  # set when the COMMIT frame is built
        self.kind: TxnKind | None = None
        self.state = TxnState.OPEN
        self.count = 0  # events put or taken so far
        self.frames: list[bytes] = []  # PUT frames (open RUN frames when encrypting) not yet written
        self.runs: list[Placement] = []  # encrypting: per RUN frame in ``frames``, where its PUT frames are
        self.buffered_bytes = 0
        self.first_seq = 0
        self.last_seq = 0
        self.spilled: list[int] = []  # pointers of PUT frames already written
        self.taken: list[int] = []  # pointers this transaction took
        self.take_chunks: list[tuple[int, int]] = []  # (channel-wide pop order, index in taken)
        self.appended = False  # the COMMIT frame reached the log
        self.pipelined = False  # may stay open beside other takes of its thread (FileChannel.transaction)

    # -- puts -----------------------------------------------------------------------------
    def put(self, event: Event) -> int:
        """Add one event; returns its sequence number."""
        self._begin(TxnKind.PUT, 1)
        payload = _payload(event)
        limit = self._channel.config.max_event_size
        if len(payload) > limit:
            raise EventTooLargeError(size=len(payload), limit=limit)
        seq = self._channel.txn_reserve(1)
        if self._channel.sealer is not None:
            self._seal(seq, [payload])
            return seq
        frame = fmt.encode_frame(_PUT, self.txn_id, seq, payload)
        self.frames.append(frame)
        self._added(seq, seq, 1, len(frame))
        return seq

    def put_many(self, events: Iterable[Event]) -> list[int]:
        """Add events in order; returns their sequence numbers."""
        batch = events if isinstance(events, (list, tuple)) else list(events)
        self._begin(TxnKind.PUT, len(batch))
        return self._put_payloads(_payloads(batch))

    def put_columns(self, columns: EventColumns) -> list[int]:
        """:meth:`put_many` for events given as columns (``seqs`` are ignored): the same frames,
        without an :class:`Event` per event (the agent's gRPC put decodes batches to columns)."""
        self._begin(TxnKind.PUT, len(columns))
        return self._put_payloads(_column_payloads(columns))

    def _put_payloads(self, payloads: list[bytes]) -> list[int]:
        limit = self._channel.config.max_event_size
        largest = max(map(len, payloads), default=0)
        if largest > limit:
            raise EventTooLargeError(size=largest, limit=limit)
        first = self._channel.txn_reserve(len(payloads))
        if self._channel.sealer is not None:
            self._seal(first, payloads)
        else:
            frames = fmt.encode_frames(_PUT, self.txn_id, first, payloads)
            self.frames.extend(frames)
            self._added(first, first + len(payloads) - 1, len(payloads), sum(map(len, frames)))
        return list(range(first, first + len(payloads)))

    def _seal(self, first: int, payloads: list[bytes]) -> None:
        """Encrypting channel: the PUT frames of ``payloads`` in open runs, which the log writer
        seals (one AEAD call per run) where it writes them: a run is bound to its place."""
        channel = self._channel
        assert channel.sealer is not None
        runs, offsets = channel.sealer.put_runs(self.txn_id, first, payloads, run_limit(channel.config.max_file_size))
        self.frames.extend(runs)
        self.runs.extend(offsets)
        self._added(first, first + len(payloads) - 1, len(payloads), sum(map(len, runs)))

    def _added(self, first: int, last: int, count: int, nbytes: int) -> None:
        self.first_seq = self.first_seq or first
        self.last_seq = last
        self.count += count
        self.buffered_bytes += nbytes
        if self.buffered_bytes >= self._channel.config.spill_bytes:
            self._channel.txn_spill(self)

    # -- takes ----------------------------------------------------------------------------
    def take(self, max_events: int = 1) -> list[Event]:
        """Take up to ``max_events`` committed events from the head, oldest first.

        Returns fewer (possibly none) when the queue holds fewer. Taken events are invisible to
        other takers until this transaction commits (they are gone) or rolls back (they return
        to the head in their original order).
        """
        return self.take_columns(max_events).events()

    def take_columns(self, max_events: int = 1) -> EventColumns:
        """:meth:`take`, returning the events as :class:`EventColumns` (bodies, seqs, headers as
        flat lists) without an object per event: for code that handles whole batches."""
        if max_events < 0:
            raise ValueError("max_events must be >= 0")
        self._begin(TxnKind.TAKE, max_events)
        return self._channel.txn_take_columns(self, max_events)

    def take_payloads(self, max_events: int = 1) -> tuple[list[bytes], list[int]]:
        """:meth:`take`, returning each event's PUT payload as the channel stores it (a
        ``channel.v1.Put`` message: body and headers; ``codec.decode_puts`` decodes a list of
        them) and the seqs, without decoding: for code that passes events on (the agent's
        remote take). Every frame is verified (checksum, authentication) as by :meth:`take`."""
        if max_events < 0:
            raise ValueError("max_events must be >= 0")
        self._begin(TxnKind.TAKE, max_events)
        return self._channel.txn_take_payloads(self, max_events)

    def take_arrow(self, max_events: int = 1) -> ArrowColumns:
        """:meth:`take`, returning the events as :class:`~ingest_toolkit.channel.columnar.ArrowColumns`
        (an Arrow table: seq, body, header map), decoded from the read buffer with numpy and
        pyarrow over whole runs of frames, without a Python object per event. Same transaction
        semantics and the same errors as :meth:`take`."""
        if max_events < 0:
            raise ValueError("max_events must be >= 0")
        self._begin(TxnKind.TAKE, max_events)
        return self._channel.txn_take_arrow(self, max_events)

    # -- ending ---------------------------------------------------------------------------
    def commit(self) -> None:
        """Make the transaction durable (per the channel's durability) and visible."""
        self._check_open()
        try:
            self._channel.txn_commit(self)
        except BaseException:
            if self.state is TxnState.OPEN:
                self.pipelined = False  # the commit's own error is the one to raise, not the rollback order's
                self._channel.txn_rollback(self)
            raise

    def rollback(self) -> None:
        """Undo the transaction: puts are discarded, taken events go back to the head."""
        self._check_open()
        self._channel.txn_rollback(self)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.state is not TxnState.OPEN:
            return
        if exc_type is None:
            self.commit()
        else:
            self._channel.txn_rollback(self)

    def _begin(self, kind: TxnKind, more: int) -> None:
        self._check_open()
        if kind is TxnKind.TAKE and self.tag is not None:
            raise TransactionError(
                f"transaction {self.txn_id} carries commit tag {self.tag!r}: tags mark put batches only; "
                "begin take transactions without a tag")
        if self.kind is None:
            self.kind = kind
        elif self.kind is not kind:
            raise TransactionError(
                f"transaction {self.txn_id} already holds {self.kind.value}s; a transaction holds "
                "puts only or takes only: commit it and start another")
        capacity = self._channel.config.transaction_capacity
        if self.count + more > capacity:
            raise TransactionCapacityError(capacity=capacity, requested=self.count + more)

    def _check_open(self) -> None:
        if self.state is not TxnState.OPEN:
            raise TransactionError(f"transaction {self.txn_id} is already {self.state.value}")

    def __repr__(self) -> str:
        kind = self.kind.value if self.kind else "empty"
        tag = f" tag={self.tag!r}" if self.tag is not None else ""
        return f"<Transaction {self.txn_id} {kind} {self.state.value} events={self.count}{tag}>"


def take_chunks(txns: list[Transaction]) -> list[tuple[int, list[int]]]:
    """The pointers of open takes as (txn id, chunk) in the order they left the queue head."""
    chunks = []
    for tx in txns:
        if tx.kind is TxnKind.TAKE and tx.taken:
            bounds = [start for _order, start in tx.take_chunks] + [len(tx.taken)]
            for (order, start), end in zip(tx.take_chunks, bounds[1:], strict=True):
                chunks.append((order, tx.txn_id, tx.taken[start:end]))
    return [(txn, pointers) for _order, txn, pointers in sorted(chunks)]


def _payload(event: Event) -> bytes:
    body = event.body
    if type(body) is not bytes:
        body = _as_bytes(body)
    return encode_put(body, event.headers)


def _column_payloads(columns: EventColumns) -> list[bytes]:
    """PUT payloads of ``columns``: header-less bodies inline, others through encode_puts_columns."""
    if not columns.header_keys:
        return [b"\x0a" + (SMALL_VARINTS[n] if n < 16384 else varint(n)) + body if (n := len(body)) else b""
                for body in columns.bodies]
    return encode_puts_columns(columns.bodies, columns.header_counts, columns.header_keys, columns.header_values)


def _payloads(batch: Sequence[Event]) -> list[bytes]:
    """``_payload`` of each event, with header-less events encoded inline (the hot path) and each
    distinct header (key, value) encoded once per batch (headers repeat across a batch)."""
    out: list[bytes] = []
    append, join = out.append, b"".join
    entries: dict[tuple[str, str], bytes] = {}  # the cache of codec.header_entries, its loop inlined:
    for event in batch:  # a call per event costs 0.15 us, a quarter of put_many's encoding with 2 headers
        body, headers = event.body, event.headers
        if type(body) is not bytes:
            body = _as_bytes(body)
        n = len(body)
        head = b"\x0a" + (SMALL_VARINTS[n] if n < 16384 else varint(n)) + body if n else b""
        if not headers:
            append(head)
            continue
        parts = [head]
        try:
            for pair in headers.items():
                entry = entries.get(pair)
                if entry is None:
                    entry = header_entry(*pair)
                    if entry is None:
                        break
                    entries[pair] = entry
                parts.append(entry)
            else:
                append(join(parts))
                continue
        except (AttributeError, TypeError, UnicodeEncodeError):
            pass
        append(encode_put(body, headers))  # long, non-string or unencodable: protobuf and its errors
    return out


def _as_bytes(body: object) -> bytes:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError(f"event body must be bytes, not {type(body).__name__}")
    return bytes(body)
