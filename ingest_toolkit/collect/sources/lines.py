"""Incremental splitting of a byte stream into events, with byte offsets for resuming.

Every produced piece carries ``end``: the stream offset just after it (after its newline, or
after the bytes that were cut off). Reading again from any ``end`` produces exactly the pieces
that followed it, which is what makes a position file sufficient to resume.

Lines longer than ``max_bytes`` (newline excluded) follow a policy:

* ``fail``: raise :class:`OversizedLineError` (the caller decides; spool_dir moves the file aside).
* ``truncate``: keep the first ``max_bytes``, drop the rest of the line (counted by the caller).
* ``split``: emit consecutive pieces of ``max_bytes``; the rest of the line follows as more pieces.

Only ``\\n`` ends a line and it is removed; a ``\\r`` before it stays in the body (lossless).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

from ..errors import OversizedLineError

__all__ = ["ChunkSplitter", "LineSplitter", "Oversized", "Piece", "longest_line"]

Oversized = Literal["fail", "truncate", "split"]


class Piece(NamedTuple):
    body: bytes
    start: int  # stream offset of the first byte of the line or piece
    end: int  # stream offset to resume from after this piece
    oversized: bool = False  # truncated, or one part of a split line


class LineSplitter:
    """``feed`` returns complete lines; ``flush`` ends the stream (a last line without newline)."""

    def __init__(self, start: int, max_bytes: int, policy: Oversized) -> None:
        self._buf = bytearray()
        self._base = start  # stream offset of self._buf[0]
        self._max = max_bytes
        self._policy = policy
        self._head: bytes | None = None  # truncated line, waiting for its newline
        self._head_start = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a returned piece (a partial line)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Piece]:
        buf = self._buf
        buf += data
        out: list[Piece] = []
        pos = self._fast(buf, out)
        while True:
            nl = buf.find(b"\n", pos)
            if self._head is not None:  # dropping the rest of a truncated line
                if nl < 0:
                    pos = len(buf)
                    break
                out.append(Piece(self._head, self._head_start, self._base + nl + 1, True))
                self._head, pos = None, nl + 1
                continue
            if (nl if nl >= 0 else len(buf)) - pos > self._max:
                if self._policy == "fail" and out:
                    break  # the lines before it go out first; the next feed or flush raises
                pos = self._oversized(buf, pos, out)
                continue
            if nl < 0:
                break
            out.append(Piece(bytes(buf[pos:nl]), self._base + pos, self._base + nl + 1))
            pos = nl + 1
        del buf[:pos]
        self._base += pos
        return out

    def _fast(self, buf: bytearray, out: list[Piece]) -> int:
        """Split every complete line at once when none is oversized (the common case)."""
        last = buf.rfind(b"\n")
        if self._head is not None or last < 0:
            return 0
        lines = bytes(buf[:last]).split(b"\n")
        if max(map(len, lines)) > self._max:
            return 0
        start = self._base
        new, append = tuple.__new__, out.append  # Piece(...) without the keyword-default wrapper: hot path
        for line in lines:
            end = start + len(line) + 1
            append(new(Piece, (line, start, end, False)))
            start = end
        return last + 1

    def _oversized(self, buf: bytearray, pos: int, out: list[Piece]) -> int:
        start = self._base + pos
        if self._policy == "fail":
            raise OversizedLineError(offset=start, limit=self._max)
        piece = bytes(buf[pos:pos + self._max])
        if self._policy == "split":
            out.append(Piece(piece, start, start + self._max, True))
        else:
            self._head, self._head_start = piece, start
        return pos + self._max

    def flush(self) -> list[Piece]:
        """The stream ended: what is buffered is its last line."""
        # under "fail", what is buffered may still hold an oversized line: feed raises for it
        out = self.feed(b"") if self._policy == "fail" and self._buf else []
        end = self._base + len(self._buf)
        if self._head is not None:
            out.append(Piece(self._head, self._head_start, end, True))
        elif self._buf:
            out.append(Piece(bytes(self._buf), self._base, end))
        self._head = None
        self._buf.clear()
        self._base = end
        return out


class ChunkSplitter:
    """A whole stream as one event (``file`` unit), with the same oversize policies."""

    def __init__(self, start: int, max_bytes: int, policy: Oversized) -> None:
        self._buf = bytearray()
        self._base = self._pos = start
        self._max = max_bytes
        self._policy = policy

    def feed(self, data: bytes) -> list[Piece]:
        out: list[Piece] = []
        self._pos += len(data)
        if self._policy == "truncate":
            room = self._max - len(self._buf)
            self._buf += data[:max(room, 0)]
            return out
        self._buf += data
        if len(self._buf) > self._max:
            if self._policy == "fail":
                raise OversizedLineError(offset=self._base, limit=self._max)
            while len(self._buf) > self._max:
                out.append(Piece(bytes(self._buf[:self._max]), self._base, self._base + self._max, True))
                del self._buf[:self._max]
                self._base += self._max
        return out

    def flush(self) -> list[Piece]:
        truncated = self._policy == "truncate" and self._pos - self._base > self._max
        out = [Piece(bytes(self._buf), self._base, self._pos, truncated)] if self._buf else []
        self._buf.clear()
        self._base = self._pos
        return out


def longest_line(chunks: Iterable[bytes]) -> int:
    """Length of the longest line (newline excluded) in a stream, without building pieces."""
    longest = current = 0
    for data in chunks:
        lines = data.split(b"\n")
        if len(lines) == 1:
            current += len(data)
            continue
        longest = max(longest, current + len(lines[0]), max(map(len, lines[1:-1]), default=0))
        current = len(lines[-1])
    return max(longest, current)
