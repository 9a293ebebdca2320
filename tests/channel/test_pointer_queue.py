"""PointerQueue against collections.deque: same contents, order and sizes for any op sequence."""

from __future__ import annotations

from array import array
from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from ingest_toolkit.channel.pointer_queue import PointerQueue

pointers = st.lists(st.integers(0, 2**64 - 1), max_size=3000)
ops = st.lists(st.one_of(
    st.tuples(st.just("extend"), pointers),
    st.tuples(st.just("extendleft"), pointers),
    st.tuples(st.just("popleft"), st.integers(0, 3500)),
), max_size=40)


@given(ops)
def test_matches_deque(sequence: list[tuple[str, object]]) -> None:
    queue, model = PointerQueue(), deque[int]()
    for step in sequence:
        _apply(queue, model, [step])
        assert len(queue) == len(model)
    assert list(queue) == list(model)


def test_memory_stays_within_16_bytes_per_pointer() -> None:
    queue = PointerQueue()
    for _ in range(100):
        queue.extend(list(range(10_000)))
    assert len(queue) == 1_000_000
    assert queue.nbytes / len(queue) <= 16


@given(pointers, ops, ops)
def test_a_frozen_queue_reads_what_it_held_while_the_queue_changes(start: list[int], before: list[tuple[str, object]],
                                                                     after: list[tuple[str, object]]) -> None:
    """freeze() lends the ring without copying; whatever the live queue does afterwards (appends
    that wrap around, rollbacks over lent slots, empty puts and rollbacks, growth), the lent view
    keeps its contents, and the reader's views, held meanwhile as a checkpoint holds them, never
    stop a write (an exported buffer refuses any assignment that could resize it)."""
    queue, model = PointerQueue(start), deque(start)
    _apply(queue, model, before)
    frozen, held = queue.freeze(), list(model)
    views = frozen.parts()
    _apply(queue, model, after)
    assert b"".join(bytes(part) for part in views) == array("Q", held).tobytes()
    assert b"".join(bytes(part) for part in frozen.parts()) == array("Q", held).tobytes()
    for view in views:
        view.release()
    assert len(frozen) == len(held) and frozen.head() == (held[0] if held else 0)
    frozen.release()
    assert list(queue) == list(model)
    queue.freeze().release()  # one lender at a time, again after a release


def test_empty_puts_and_rollbacks_while_a_checkpoint_holds_the_queue() -> None:
    """A rollback of a take that took nothing, while a checkpoint writes the lent queue, once
    failed with "cannot resize an array that is exporting buffers" in the middle of a rollback."""
    queue = PointerQueue([1, 2, 3])
    views = queue.freeze().parts()
    queue.extendleft([])
    queue.extend([])
    assert list(queue) == [1, 2, 3] and bytes(views[0]) == array("Q", [1, 2, 3]).tobytes()


def _apply(queue: PointerQueue, model: deque[int], sequence: list[tuple[str, object]]) -> None:
    for op, arg in sequence:
        if op == "extend":
            queue.extend(arg)  # type: ignore[arg-type]
            model.extend(arg)  # type: ignore[arg-type]
        elif op == "extendleft":
            queue.extendleft(arg)  # type: ignore[arg-type]
            model.extendleft(reversed(arg))  # type: ignore[call-overload]
        else:
            n = min(arg, len(model))  # type: ignore[call-overload]
            assert queue.popleft(arg) == [model.popleft() for _ in range(n)]  # type: ignore[arg-type]


def test_lending_copies_only_when_a_lent_slot_would_change() -> None:
    """A checkpoint's lent queue costs no copy for appends, takes, or the rollback of the latest
    take (the same pointers back in the same slots); a different rollback copies the ring once."""
    queue = PointerQueue(range(4000))  # a ring of 4096 slots
    assert queue.popleft(3000) == list(range(3000))
    frozen = queue.freeze()  # slots 3000..3999
    lent = queue._buf
    queue.extend(list(range(4000, 4500)))  # wraps around to slots 0..403, none of them lent
    taken = queue.popleft(300)
    queue.extendleft(taken)  # rolled back: the same values in the same slots
    assert queue._buf is lent
    queue.popleft(10)
    queue.extendleft([7] * 10)  # other pointers over lent slots: the live queue moves to a copy
    assert queue._buf is not lent
    assert array("Q", b"".join(bytes(p) for p in frozen.parts())).tolist() == list(range(3000, 4000))
    frozen.release()
