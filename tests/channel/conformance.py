"""Conformance suite for the channel transaction contract (ARCHITECTURE.md section 3).

Any channel implementation runs it: subclass :class:`ChannelConformance` in a ``test_*.py``
module (the subclass name must start with ``Test``) and provide the ``open_channel`` fixture::

    class TestMyChannel(ChannelConformance):
        @pytest.fixture
        def open_channel(self, tmp_path: Path) -> Iterator[OpenChannel]:
            ...  # yield a factory; close whatever it opened afterwards

``open_channel(**settings)`` opens *the test's* channel and returns it. The first call of a test
sees an empty channel; every later call reopens the same channel (same storage) after the test
closed the previous instance. ``settings`` are FileChannel configuration keys (``capacity``,
``transaction_capacity``, ``keep_alive``, ``max_event_size``); a remote implementation applies
them to the channel its server hosts. A test that reopens passes the same settings again.

The channel and its transactions are used only through :class:`ChannelLike` and
:class:`TransactionLike`: ``transaction()``, ``put``, ``put_many``, ``take``, ``commit``,
``rollback``, ``state``, the context manager, ``take_columns``, ``len()`` and ``close()``. Errors are the classes
of :mod:`ingest_toolkit.errors`. A thread holds at most one open transaction; tests that need
two open transactions at once open the second on a :class:`Worker` thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Protocol, TypeVar

import pytest

from ingest_toolkit.channel import Event, EventColumns, TxnState
from ingest_toolkit.errors import (
    ChannelClosedError,
    ChannelError,
    ChannelFullError,
    EventTooLargeError,
    TransactionCapacityError,
    TransactionError,
    TransientError,
)

__all__ = ["ChannelConformance", "ChannelLike", "OpenChannel", "TransactionLike", "Worker"]

T = TypeVar("T")

TIMEOUT = 10.0  # seconds any single step of a test may block before it counts as a hang


class TransactionLike(Protocol):
    @property
    def state(self) -> TxnState: ...

    def put(self, event: Event) -> int: ...

    def put_many(self, events: Sequence[Event]) -> list[int]: ...

    def take(self, max_events: int = 1) -> list[Event]: ...

    def take_columns(self, max_events: int = 1) -> EventColumns: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def __enter__(self) -> TransactionLike: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


class ChannelLike(Protocol):
    def transaction(self) -> TransactionLike: ...

    def __len__(self) -> int: ...

    def close(self) -> None: ...


class OpenChannel(Protocol):
    def __call__(self, **settings: Any) -> ChannelLike: ...


class Worker:
    """One dedicated thread; a transaction opened through it lives on that thread."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="conformance-worker")

    def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the worker thread and return its result (or raise its error)."""
        return self._pool.submit(fn).result(TIMEOUT)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        return self._pool.submit(fn)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


# -- helpers ------------------------------------------------------------------------------

def ev(i: int, size: int = 0) -> Event:
    """Event number ``i``: identifiable by body and header, padded to ``size`` bytes."""
    body = f"event-{i:06d}|".encode()
    return Event(body=body.ljust(size, b"."), headers={"i": str(i)})


def evs(start: int, stop: int, size: int = 0) -> list[Event]:
    return [ev(i, size) for i in range(start, stop)]


def ids(events: Sequence[Event]) -> list[int]:
    """The numbers of events made by :func:`ev`, in order."""
    return [int(e.headers["i"]) for e in events]


def put_committed(channel: ChannelLike, events: Sequence[Event]) -> list[int]:
    with channel.transaction() as tx:
        return tx.put_many(events)


def take_committed(channel: ChannelLike, n: int) -> list[Event]:
    with channel.transaction() as tx:
        return tx.take(n)


def drain(channel: ChannelLike, batch: int = 100) -> list[Event]:
    """Take and commit every queued event, in batches of ``batch``."""
    out: list[Event] = []
    while chunk := take_committed(channel, batch):
        out.extend(chunk)
    return out


def content(events: Sequence[Event]) -> list[tuple[bytes, dict[str, str]]]:
    return [(bytes(e.body), dict(e.headers)) for e in events]


def elapsed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.monotonic()
    result = fn()
    return result, time.monotonic() - start


class ChannelConformance:
    """The transaction contract; subclasses provide ``open_channel``."""

    @pytest.fixture
    def open_channel(self) -> OpenChannel:
        raise NotImplementedError("a conformance subclass must provide the open_channel fixture")

    @pytest.fixture
    def new_worker(self) -> Iterator[Callable[[], Worker]]:
        workers: list[Worker] = []

        def make() -> Worker:
            workers.append(Worker())
            return workers[-1]

        yield make
        for worker in workers:
            worker.close()

    # -- one kind per transaction -------------------------------------------------------
    def test_take_in_put_transaction_raises(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        put_committed(ch, evs(0, 2))
        with ch.transaction() as tx:
            tx.put(ev(2))
            with pytest.raises(TransactionError):
                tx.take(1)
            assert tx.state is TxnState.OPEN
        assert ids(drain(ch)) == [0, 1, 2]

    def test_put_in_take_transaction_raises(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        put_committed(ch, evs(0, 3))
        with ch.transaction() as tx:
            assert ids(tx.take(1)) == [0]
            with pytest.raises(TransactionError):
                tx.put(ev(9))
            with pytest.raises(TransactionError):
                tx.put_many([ev(9)])
        assert ids(drain(ch)) == [1, 2]

    # -- ending a transaction -----------------------------------------------------------
    def test_context_exit_commits(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        with ch.transaction() as tx:
            tx.put_many(evs(0, 3))
            assert len(ch) == 0  # uncommitted puts are not queued
        assert tx.state is TxnState.COMMITTED
        assert len(ch) == 3
        with ch.transaction() as tx:
            assert ids(tx.take(2)) == [0, 1]
        assert tx.state is TxnState.COMMITTED
        assert ids(drain(ch)) == [2]

    def test_exception_in_context_rolls_back_puts(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        with pytest.raises(KeyError), ch.transaction() as tx:
            tx.put_many(evs(0, 3))
            raise KeyError("boom")
        assert tx.state is TxnState.ROLLED_BACK
        assert len(ch) == 0
        assert drain(ch) == []

    def test_exception_in_context_rolls_back_takes(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        put_committed(ch, evs(0, 4))
        with pytest.raises(KeyError), ch.transaction() as tx:
            assert ids(tx.take(3)) == [0, 1, 2]
            raise KeyError("boom")
        assert tx.state is TxnState.ROLLED_BACK
        assert len(ch) == 4
        assert ids(drain(ch)) == [0, 1, 2, 3]

    def test_explicit_commit_and_rollback(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        tx = ch.transaction()
        tx.put_many(evs(0, 2))
        tx.commit()
        assert tx.state is TxnState.COMMITTED and len(ch) == 2
        tx = ch.transaction()
        tx.put(ev(5))
        tx.rollback()
        assert tx.state is TxnState.ROLLED_BACK and len(ch) == 2
        tx = ch.transaction()
        assert ids(tx.take(1)) == [0]
        tx.rollback()
        assert len(ch) == 2
        tx = ch.transaction()
        assert ids(tx.take(1)) == [0]
        tx.commit()
        assert ids(drain(ch)) == [1]

    def test_explicit_end_inside_context_is_final(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        with ch.transaction() as tx:
            tx.put(ev(0))
            tx.commit()
        with ch.transaction() as tx:
            tx.put(ev(1))
            tx.rollback()
        assert tx.state is TxnState.ROLLED_BACK
        assert ids(drain(ch)) == [0]

    def test_empty_transactions_end_cleanly(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        with ch.transaction() as tx:
            pass
        assert tx.state is TxnState.COMMITTED
        tx = ch.transaction()
        tx.rollback()
        assert tx.state is TxnState.ROLLED_BACK and len(ch) == 0

    @pytest.mark.parametrize("ending", ["commit", "rollback"])
    def test_operations_after_end_raise(self, open_channel: OpenChannel, ending: str) -> None:
        ch = open_channel()
        put_committed(ch, evs(0, 2))
        for kind in ("put", "take"):
            tx = ch.transaction()
            if kind == "put":
                tx.put(ev(9))
            else:
                tx.take(1)
            getattr(tx, ending)()
            expected = TxnState.COMMITTED if ending == "commit" else TxnState.ROLLED_BACK
            assert tx.state is expected
            self._assert_every_operation_raises(tx)
            assert tx.state is expected

    @staticmethod
    def _assert_every_operation_raises(tx: TransactionLike) -> None:
        operations: list[Callable[[], object]] = [
            lambda: tx.put(ev(100)), lambda: tx.put_many([ev(101)]), lambda: tx.take(1),
            tx.commit, tx.rollback]
        for operation in operations:
            with pytest.raises(TransactionError):
                operation()

    # -- FIFO ---------------------------------------------------------------------------
    def test_fifo_put_order_within_and_across_transactions(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        with ch.transaction() as tx:
            tx.put(ev(0))
            tx.put_many(evs(1, 5))
            tx.put(ev(5))
        put_committed(ch, evs(6, 10))
        assert ids(take_committed(ch, 3)) == [0, 1, 2]
        put_committed(ch, evs(10, 12))
        assert ids(drain(ch, batch=4)) == list(range(3, 12))

    def test_fifo_follows_commit_order_not_open_order(
            self, open_channel: OpenChannel, new_worker: Callable[[], Worker]) -> None:
        ch, other = open_channel(), new_worker()
        other_tx = other.run(ch.transaction)
        other.run(lambda: other_tx.put_many(evs(0, 2)))  # opened and put first ...
        put_committed(ch, [ev(2)])  # ... but committed second
        other.run(other_tx.commit)
        put_committed(ch, [ev(3)])
        assert ids(drain(ch)) == [2, 0, 1, 3]

    # -- takes --------------------------------------------------------------------------
    def test_taken_events_invisible_to_other_takers(
            self, open_channel: OpenChannel, new_worker: Callable[[], Worker]) -> None:
        ch, other = open_channel(), new_worker()
        put_committed(ch, evs(0, 6))
        tx = ch.transaction()
        assert ids(tx.take(4)) == [0, 1, 2, 3]
        assert len(ch) == 2
        assert ids(other.run(lambda: take_committed(ch, 10))) == [4, 5]
        assert other.run(lambda: take_committed(ch, 10)) == []
        assert len(ch) == 0
        tx.rollback()
        assert len(ch) == 4
        assert ids(other.run(lambda: drain(ch))) == [0, 1, 2, 3]

    def test_rollback_of_take_returns_events_to_head_in_order(
            self, open_channel: OpenChannel, new_worker: Callable[[], Worker]) -> None:
        ch, other = open_channel(), new_worker()
        put_committed(ch, evs(0, 5))
        tx = ch.transaction()
        assert ids(tx.take(2)) == [0, 1]
        assert ids(tx.take(2)) == [2, 3]
        other.run(lambda: put_committed(ch, [ev(5)]))  # committed while the take is open
        tx.rollback()
        assert len(ch) == 6
        assert ids(drain(ch, batch=4)) == [0, 1, 2, 3, 4, 5]

    def test_take_returns_shorter_or_empty_lists(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        with ch.transaction() as tx:
            assert tx.take(5) == []
        put_committed(ch, evs(0, 3))
        with ch.transaction() as tx:
            assert tx.take(0) == []
            assert ids(tx.take(10)) == [0, 1, 2]
            assert tx.take(10) == []
        assert len(ch) == 0

    def test_len_counts_committed_untaken_events(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        tx = ch.transaction()
        tx.put_many(evs(0, 4))
        assert len(ch) == 0
        tx.commit()
        assert len(ch) == 4
        tx = ch.transaction()
        tx.take(3)
        assert len(ch) == 1
        tx.commit()
        assert len(ch) == 1

    # -- events -------------------------------------------------------------------------
    def test_headers_and_binary_bodies_round_trip(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        events = _tricky_events()
        put_committed(ch, events)
        with ch.transaction() as tx:
            assert content(tx.take(len(events))) == content(events)
            tx.rollback()
        ch.close()
        ch = open_channel()
        assert content(drain(ch, batch=3)) == content(events)

    def test_take_columns_hold_what_take_returns(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        events = _tricky_events()
        put_committed(ch, events)
        with ch.transaction() as tx:
            columns = tx.take_columns(len(events) + 5)
            assert isinstance(columns, EventColumns) and len(columns) == len(events)
            assert content(columns.events()) == content(events)
            tx.rollback()  # back at the head, in order
        with ch.transaction() as tx:
            taken = tx.take(len(events))
        assert EventColumns.of(taken) == columns
        with ch.transaction() as tx:
            assert tx.take_columns(10) == EventColumns()

    def test_seqs_are_unique_increasing_and_carried_by_taken_events(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        seqs = put_committed(ch, evs(0, 5)) + put_committed(ch, evs(5, 10))
        _assert_strictly_increasing(seqs)
        with ch.transaction() as tx:
            single = tx.put(ev(10))
        seqs.append(single)
        _assert_strictly_increasing(seqs)
        assert [e.seq for e in drain(ch, batch=4)] == seqs

    def test_seqs_keep_increasing_after_reopen(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        first = put_committed(ch, evs(0, 5))
        ch.close()
        ch = open_channel()
        second = put_committed(ch, evs(5, 8))
        assert [e.seq for e in drain(ch)] == first + second  # seqs survive reopen, too
        ch.close()
        ch = open_channel()  # the queue is empty now: seqs still may not repeat
        third = put_committed(ch, evs(8, 10))
        _assert_strictly_increasing(first + second + third)

    # -- capacity -----------------------------------------------------------------------
    def test_capacity_without_keep_alive_fails_fast(self, open_channel: OpenChannel) -> None:
        ch = open_channel(capacity=5, transaction_capacity=5, keep_alive=0)
        put_committed(ch, evs(0, 5))
        with ch.transaction() as tx:
            err = _raises(ChannelFullError, lambda: tx.put(ev(5)))
            assert isinstance(err, TransientError)
            assert tx.state is TxnState.OPEN
        assert len(ch) == 5
        take_committed(ch, 2)
        put_committed(ch, evs(5, 7))
        assert ids(drain(ch, 2)) == [2, 3, 4, 5, 6]

    def test_capacity_counts_uncommitted_puts(
            self, open_channel: OpenChannel, new_worker: Callable[[], Worker]) -> None:
        ch, other = open_channel(capacity=5, transaction_capacity=5, keep_alive=0), new_worker()
        other_tx = other.run(ch.transaction)
        other.run(lambda: other_tx.put_many(evs(0, 3)))
        with ch.transaction() as tx:
            with pytest.raises(ChannelFullError):
                tx.put_many(evs(10, 13))
            tx.put_many(evs(10, 12))
            other.run(other_tx.rollback)  # frees its three slots
            tx.put_many(evs(12, 15))
        assert ids(drain(ch, 2)) == [10, 11, 12, 13, 14]

    def test_capacity_counts_open_takes(self, open_channel: OpenChannel,
                                        new_worker: Callable[[], Worker]) -> None:
        ch, other = open_channel(capacity=5, transaction_capacity=5, keep_alive=0), new_worker()
        put_committed(ch, evs(0, 5))
        tx = ch.transaction()
        tx.take(3)  # a rollback must be able to return them, so they keep their slots
        with pytest.raises(ChannelFullError):
            other.run(lambda: put_committed(ch, [ev(5)]))
        tx.commit()
        other.run(lambda: put_committed(ch, evs(5, 8)))
        assert ids(drain(ch, 2)) == [3, 4, 5, 6, 7]

    def test_full_put_waits_for_a_take_to_commit(
            self, open_channel: OpenChannel, new_worker: Callable[[], Worker]) -> None:
        ch, other = open_channel(capacity=4, transaction_capacity=4, keep_alive=5.0), new_worker()
        put_committed(ch, evs(0, 4))

        def take_later() -> list[Event]:
            time.sleep(0.3)
            return take_committed(ch, 2)

        taken = other.submit(take_later)
        _, waited = elapsed(lambda: put_committed(ch, [ev(4)]))
        assert ids(taken.result(TIMEOUT)) == [0, 1]
        assert 0.2 <= waited < 2.5, f"put returned after {waited:.2f}s; the take committed at 0.3s"
        assert ids(drain(ch, 2)) == [2, 3, 4]

    def test_full_put_gives_up_after_keep_alive(self, open_channel: OpenChannel) -> None:
        ch = open_channel(capacity=2, transaction_capacity=2, keep_alive=0.3)
        put_committed(ch, evs(0, 2))
        with ch.transaction() as tx:
            _, waited = elapsed(lambda: _raises(ChannelFullError, lambda: tx.put(ev(2))))
            assert tx.state is TxnState.OPEN
        assert 0.25 <= waited < 3.0
        assert ids(drain(ch, 2)) == [0, 1]

    # -- transaction capacity -----------------------------------------------------------
    def test_transaction_capacity_limits_puts(self, open_channel: OpenChannel) -> None:
        ch = open_channel(capacity=5, transaction_capacity=5, keep_alive=0)
        with ch.transaction() as tx:
            tx.put_many(evs(0, 4))
            with pytest.raises(TransactionCapacityError):
                tx.put_many(evs(4, 6))
            tx.put(ev(4))
            with pytest.raises(TransactionCapacityError):
                tx.put(ev(5))
        with ch.transaction() as tx:  # a refused batch holds no capacity
            with pytest.raises(TransactionCapacityError):
                tx.put_many(evs(5, 11))
            tx.rollback()
        assert ids(drain(ch, 2)) == [0, 1, 2, 3, 4]
        put_committed(ch, evs(5, 10))
        assert len(ch) == 5

    def test_transaction_capacity_limits_takes_before_taking(self, open_channel: OpenChannel) -> None:
        ch = open_channel(capacity=20, transaction_capacity=5)
        put_committed(ch, evs(0, 5))
        put_committed(ch, evs(5, 10))
        with ch.transaction() as tx:
            with pytest.raises(TransactionCapacityError):
                tx.take(6)
            assert len(ch) == 10  # nothing was taken
            assert ids(tx.take(3)) == [0, 1, 2]
            with pytest.raises(TransactionCapacityError):
                tx.take(3)
            assert len(ch) == 7
            assert ids(tx.take(2)) == [3, 4]
        assert ids(drain(ch, 2)) == [5, 6, 7, 8, 9]

    # -- event size ---------------------------------------------------------------------
    def test_event_too_large_leaves_transaction_usable(self, open_channel: OpenChannel) -> None:
        ch = open_channel(capacity=3, transaction_capacity=3, keep_alive=0, max_event_size=2048)
        with ch.transaction() as tx:
            tx.put(ev(0))
            with pytest.raises(EventTooLargeError):
                tx.put(ev(1, size=4096))
            with pytest.raises(EventTooLargeError):
                tx.put_many([ev(1), ev(2, size=4096)])  # all or nothing
            assert tx.state is TxnState.OPEN
            tx.put_many([ev(1, size=1500), ev(2)])  # the failed calls reserved nothing
        assert ids(drain(ch, 2)) == [0, 1, 2]

    # -- threads and lifecycle ----------------------------------------------------------
    def test_nested_transaction_in_one_thread_raises(
            self, open_channel: OpenChannel, new_worker: Callable[[], Worker]) -> None:
        ch = open_channel()
        tx = ch.transaction()
        tx.put(ev(0))
        with pytest.raises(TransactionError):
            ch.transaction()
        other_tx = new_worker().run(ch.transaction)  # another thread may open one
        assert other_tx.state is TxnState.OPEN
        tx.put(ev(1))
        tx.commit()
        assert ids(drain(ch)) == [0, 1]

    def test_closed_channel_raises(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        put_committed(ch, evs(0, 2))
        ch.close()
        with pytest.raises(ChannelClosedError):
            ch.transaction()
        ch.close()  # closing twice is harmless
        with pytest.raises(ChannelClosedError):
            ch.transaction()

    def test_transaction_open_at_close_cannot_continue(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        put_committed(ch, evs(0, 2))
        tx = ch.transaction()
        tx.take(1)
        ch.close()
        for operation in (lambda: tx.take(1), tx.commit):
            with pytest.raises(ChannelError):
                operation()
        assert tx.state is not TxnState.COMMITTED
        ch = open_channel()
        assert ids(drain(ch)) == [0, 1]

    # -- reopen -------------------------------------------------------------------------
    def test_reopen_keeps_committed_drops_uncommitted_returns_open_takes(
            self, open_channel: OpenChannel, new_worker: Callable[[], Worker]) -> None:
        ch, other = open_channel(), new_worker()
        put_committed(ch, evs(0, 10, size=1500))
        assert ids(take_committed(ch, 3)) == [0, 1, 2]
        put_tx = other.run(ch.transaction)
        other.run(lambda: put_tx.put_many(evs(100, 106, size=3000)))  # large enough to spill
        take_tx = ch.transaction()
        assert ids(take_tx.take(2)) == [3, 4]
        ch.close()
        ch = open_channel()
        assert len(ch) == 7
        assert ids(drain(ch, batch=3)) == [3, 4, 5, 6, 7, 8, 9]

    def test_reopen_many_times_across_many_log_files(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        for start in range(0, 300, 50):
            put_committed(ch, evs(start, start + 50, size=600))
        expected = list(range(300))
        for round_ in range(3):
            assert ids(take_committed(ch, 40)) == expected[:40]
            del expected[:40]
            with ch.transaction() as tx:
                assert ids(tx.take(30)) == expected[:30]
                tx.rollback()
            put_committed(ch, evs(1000 + round_, 1001 + round_))
            expected.append(1000 + round_)
            ch.close()
            ch = open_channel()
            assert len(ch) == len(expected)
        assert ids(drain(ch, batch=64)) == expected


# -- module helpers --------------------------------------------------------------------------

E = TypeVar("E", bound=BaseException)


def _raises(kind: type[E], fn: Callable[[], object]) -> E:
    with pytest.raises(kind) as info:
        fn()
    return info.value


def _assert_strictly_increasing(seqs: Sequence[int]) -> None:
    assert all(a < b for a, b in zip(seqs, seqs[1:], strict=False)), seqs
    assert len(set(seqs)) == len(seqs)


def _tricky_events() -> list[Event]:
    headers: Mapping[str, str] = {"unicode": "h\u00e9llo \u2713 \U0001f600", "empty": "", "": "empty key"}
    return [
        Event(body=bytes(range(256))),
        Event(body=b""),
        Event(body=b"", headers={"only": "headers"}),
        Event(body=bytes(range(256)) * 9, headers=dict(headers)),
        Event(body=b"\x0a\x05hello"),  # looks like an encoded protobuf field
        Event(body=b"\x00" * 127),
        Event(body=b"\xff" * 128),
        Event(body=b"x" * 8000),
        Event(body=b"y" * 14000, headers={"k": "v" * 300}),  # stays under a 16 KB max_event_size
    ]
