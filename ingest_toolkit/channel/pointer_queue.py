"""FIFO of event pointers, 8 bytes per queued event.

A ring buffer over ``array('Q')`` whose capacity is a power of two and doubles when full, so
resident memory stays at most 16 bytes per queued event (8 when the ring is full). Batches move
in and out as slices, never as one Python call per event. Not thread-safe: the channel's lock
guards it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

__all__ = ["PointerQueue"]

_MIN_CAPACITY = 1024


class PointerQueue:
    __slots__ = ("_buf", "_head", "_size", "_mask")

    def __init__(self, pointers: Iterable[int] = ()) -> None:
        self._buf = array("Q", bytes(8 * _MIN_CAPACITY))
        self._head = 0
        self._size = 0
        self._mask = _MIN_CAPACITY - 1
        self.extend(list(pointers))

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
        first = min(n, cap - start)
        block = pointers if isinstance(pointers, array) else array("Q", pointers)
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
