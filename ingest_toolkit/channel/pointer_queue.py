"""FIFO of event pointers, 8 bytes per queued event.

A ring buffer over ``array('Q')`` whose capacity is a power of two and doubles when full, so
resident memory stays at most 16 bytes per queued event (8 when the ring is full). Batches move
in and out as slices, never as one Python call per event. Not thread-safe: the channel's lock
guards it.

:meth:`PointerQueue.freeze` lends the queue as it is now to a reader that works without the
channel's lock (a checkpoint writing its queue file): no copy is made. Until the reader releases
it, a write that would change one of the lent slots first moves the live queue to a fresh
buffer (copy on write). Puts append after the tail and takes only move the head, so that copy
happens only when a rollback puts taken events back over lent slots or the ring wraps around
onto them while the reader is still busy.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

__all__ = ["FrozenPointers", "PointerQueue"]

_MIN_CAPACITY = 1024


class FrozenPointers:
    """The pointers a queue held when it was frozen, head first, readable without its lock.

    ``parts()`` are byte views of the queue's own buffer (one, or two when the ring wraps); they
    stay valid and unchanged until :meth:`release`, which the reader calls when it is done."""

    __slots__ = ("_owner", "_buf", "_start", "_size")

    def __init__(self, owner: PointerQueue | None, buf: array[int], start: int, size: int) -> None:
        self._owner, self._buf, self._start, self._size = owner, buf, start, size

    @classmethod
    def of(cls, pointers: Sequence[int]) -> FrozenPointers:
        """A frozen copy of ``pointers`` that belongs to no queue."""
        return cls(None, array("Q", pointers), 0, len(pointers))

    def __len__(self) -> int:
        return self._size

    def head(self) -> int:
        return self._buf[self._start] if self._size else 0

    def parts(self) -> list[memoryview]:
        cap, end = len(self._buf), self._start + self._size
        view = memoryview(self._buf)
        pieces = [view[self._start:min(end, cap)]] + ([view[: end - cap]] if end > cap else [])
        return [piece.cast("B") for piece in pieces if len(piece)]

    def release(self) -> None:
        """The reader is done: the queue may write these slots again."""
        if self._owner is not None:
            self._owner._thaw(self)
            self._owner = None


class PointerQueue:
    __slots__ = ("_buf", "_head", "_size", "_mask", "_lent")

    def __init__(self, pointers: Iterable[int] = ()) -> None:
        self._buf = array("Q", bytes(8 * _MIN_CAPACITY))
        self._head = 0
        self._size = 0
        self._mask = _MIN_CAPACITY - 1
        self._lent: FrozenPointers | None = None  # slots a reader without the lock still reads
        self.extend(list(pointers))

    def freeze(self) -> FrozenPointers:
        """Lend the queue as it is now (no copy); see the module docstring. One at a time."""
        if self._lent is not None:
            raise RuntimeError("the queue is already lent to a reader; release it first")
        self._lent = FrozenPointers(self, self._buf, self._head, self._size)
        return self._lent

    def _thaw(self, frozen: FrozenPointers) -> None:
        if self._lent is frozen:
            self._lent = None

    def _protect(self, start: int, block: array[int]) -> None:
        """Before writing ``block`` at slot ``start`` (mod capacity): if that changes a lent
        slot, the live queue moves to a copy of its buffer and the reader keeps the old one."""
        lent, n = self._lent, len(block)
        if lent is None or not n:
            return
        if lent._buf is not self._buf:  # the queue grew into a new buffer: nothing to protect
            self._lent = None
            return
        cap = len(self._buf)
        distance = (start - lent._start) % cap  # where the write begins, seen from the lent head
        if distance >= lent._size and distance + n <= cap:
            return  # no lent slot is written
        if start + n <= cap and self._buf[start:start + n] == block:
            return  # the same values again: the rollback of the latest take puts its events back where they were
        self._buf = self._buf[:]  # the reader keeps the old buffer; nothing writes it again
        self._lent = None

    def __len__(self) -> int:
        return self._size

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.peek(self._size))

    @property
    def nbytes(self) -> int:
        """Bytes held by the ring (its capacity, not its size)."""
        return self._buf.itemsize * len(self._buf)

    def extend(self, pointers: Sequence[int]) -> None:
        """Append at the tail, in order."""
        n = len(pointers)
        self._reserve(n)
        self._write((self._head + self._size) & self._mask, pointers)
        self._size += n

    def extendleft(self, pointers: Sequence[int]) -> None:
        """Put ``pointers`` back at the head so that ``pointers[0]`` is the new head."""
        n = len(pointers)
        self._reserve(n)
        self._head = (self._head - n) & self._mask
        self._write(self._head, pointers)
        self._size += n

    def popleft(self, n: int) -> list[int]:
        """Remove and return up to ``n`` pointers from the head."""
        out = self.peek(n)
        self._head = (self._head + len(out)) & self._mask
        self._size -= len(out)
        return out

    def peek(self, n: int) -> list[int]:
        n = min(n, self._size)
        start, cap = self._head, len(self._buf)
        end = start + n
        if end <= cap:
            return self._buf[start:end].tolist()
        return self._buf[start:].tolist() + self._buf[: end - cap].tolist()

    def to_array(self) -> array[int]:
        """A copy of the queue, head first, made with C-level slice copies (no Python ints)."""
        start, cap = self._head, len(self._buf)
        end = start + self._size
        if end <= cap:
            return self._buf[start:end]
        return self._buf[start:] + self._buf[: end - cap]

    def _write(self, start: int, pointers: Sequence[int]) -> None:
        cap, n = len(self._buf), len(pointers)
        if not n:  # an empty slice assignment counts as a resize: refused while a reader holds views
            return
        first = min(n, cap - start)
        block = pointers if isinstance(pointers, array) else array("Q", pointers)
        if self._lent is not None:
            self._protect(start, block)
        self._buf[start : start + first] = block[:first]
        if first < n:
            self._buf[: n - first] = block[first:]

    def _reserve(self, extra: int) -> None:
        need = self._size + extra
        cap = len(self._buf)
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        items = self.to_array()
        self._buf = array("Q", bytes(8 * cap))
        self._buf[: len(items)] = items
        self._head, self._mask = 0, cap - 1
