"""The take-size rule shared by the landing and RemoteSource (ingest_toolkit.handoff)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ingest_toolkit.errors import TransactionCapacityError
from ingest_toolkit.handoff import take_within_capacity


def channel_with_capacity(capacity: int, asked: list[int]) -> Callable[[int], int]:
    """An ``open_take`` of a channel with this transaction_capacity (returns the count it took)."""

    def open_take(n: int) -> int:
        asked.append(n)
        if n > capacity:
            raise TransactionCapacityError(capacity=capacity, requested=n)
        return n

    return open_take


def test_a_take_over_the_capacity_is_asked_again_within_it_and_the_limit_is_learned() -> None:
    asked: list[int] = []
    learned: list[int] = []
    assert take_within_capacity(channel_with_capacity(400, asked), 100_000, learned=learned.append) == 400
    assert asked == [100_000, 400] and learned == [400]
    assert take_within_capacity(channel_with_capacity(400, asked), 10) == 10 and asked[-1] == 10


def test_a_refusal_that_is_not_about_a_smaller_capacity_is_raised() -> None:
    def refuses(n: int) -> int:
        raise TransactionCapacityError(capacity=n, requested=n + 5)  # e.g. the transaction already holds events

    with pytest.raises(TransactionCapacityError):
        take_within_capacity(refuses, 10)
