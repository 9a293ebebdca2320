"""apply_in_order: the three-thread loop under the put stream. Order, the first failure ending
the stream, a broken read, how far it reads ahead, and no thread left behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ingest_toolkit.rpc.ordered import ItemFailed, apply_in_order
from tests.rpc.conftest import wait_threads_gone


def test_every_request_is_applied_once_in_order_and_answered_after_it() -> None:
    applied: list[int] = []

    def apply(x: int) -> int:
        applied.append(x)
        return x * 10

    answers = []
    for answer in apply_in_order(iter(range(200)), apply, name="t-order"):
        assert applied[len(answers)] * 10 == answer  # the request of each answer was applied before it
        answers.append(answer)
    assert answers == [x * 10 for x in range(200)] and applied == list(range(200))
    wait_threads_gone("t-order")


def test_the_first_failure_ends_the_stream_and_nothing_read_after_it_is_applied() -> None:
    applied: list[int] = []

    def apply(x: int) -> int:
        if x == 5:
            raise ValueError("no room for 5")
        applied.append(x)
        return x

    answers = []
    with pytest.raises(ItemFailed) as failed:
        for answer in apply_in_order(iter(range(50)), apply, read_ahead=4, name="t-fail"):
            answers.append(answer)
    assert answers == [0, 1, 2, 3, 4]
    assert failed.value.item == 5 and isinstance(failed.value.error, ValueError)
    time.sleep(0.3)  # what the reader had read ahead stays unapplied
    assert applied == [0, 1, 2, 3, 4]
    wait_threads_gone("t-fail")


def test_a_broken_read_is_raised_after_the_answers_of_what_was_read() -> None:
    def requests() -> Iterator[int]:
        yield from range(3)
        raise ConnectionError("the call was cancelled")

    answers = []
    with pytest.raises(ConnectionError, match="cancelled"):
        for answer in apply_in_order(requests(), lambda x: x, name="t-broken"):
            answers.append(answer)
    assert answers == [0, 1, 2]
    wait_threads_gone("t-broken")


def test_it_reads_no_further_ahead_than_asked() -> None:
    read, release = [], threading.Event()

    def requests() -> Iterator[int]:
        for i in range(20):
            read.append(i)
            yield i

    def apply(x: int) -> int:
        release.wait(5)  # the first request is being applied until released
        return x

    answers = apply_in_order(requests(), apply, read_ahead=3, name="t-ahead")
    taker = threading.Thread(target=lambda: next(answers))
    taker.start()
    time.sleep(0.3)
    # one being applied, 3 waiting, and the reader holding the next one until there is room
    assert len(read) <= 1 + 3 + 1, read
    release.set()
    taker.join(5)
    assert list(answers) == list(range(1, 20))
    wait_threads_gone("t-ahead")


def test_a_consumer_that_stops_stops_the_threads_after_the_request_being_applied() -> None:
    applied: list[int] = []

    def endless() -> Iterator[int]:
        i = 0
        while True:
            yield i
            i += 1

    def apply(x: int) -> int:
        applied.append(x)
        time.sleep(0.01)
        return x

    answers = apply_in_order(endless(), apply, read_ahead=2, name="t-stop")
    assert [next(answers) for _ in range(3)] == [0, 1, 2]
    answers.close()
    wait_threads_gone("t-stop")
    assert applied == list(range(len(applied))) and len(applied) <= 3 + 1 + 2  # answered, applying, read ahead


def test_read_ahead_must_be_positive() -> None:
    with pytest.raises(ValueError, match="read_ahead"):
        next(apply_in_order(iter([1]), lambda x: x, read_ahead=0))
