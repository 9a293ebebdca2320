"""An ordered request stream served on three threads: one reads, one applies, one answers.

grpcio's synchronous server hands every message it receives, and every answer it sends, through
its completion queue and its polling thread: a handler that reads a request, applies it and
yields the answer waits for two such hand-offs per request, doing nothing meanwhile. On the
agent's put stream (batches of 1000 events of 256 B, one fsync each) that was about 0.4 ms of a
2 ms batch. Here the stream's handler thread only sends answers, a reader thread receives the
next requests while the current one is applied, and one applying thread keeps the requests in
stream order, so the waits overlap the work and nothing is reordered. The put stream carried
1.15-1.2x the events per second in an alternating A/B (docs/benchmarks.md, the fifth run of
``bench/peers.py``).

Order and failure: requests are applied one at a time in the order read, and each answer is
yielded only after its request was applied. The first request whose ``apply`` raises ends the
stream: :class:`ItemFailed` is raised after the answers before it, and nothing read after it is
applied. A failure to read (the call was cancelled or broke) is raised as it is, after the
answers of the requests applied before it. When the consumer stops (closes the generator), the
threads stop after the request being applied, if any.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import suppress
from typing import Generic, TypeVar

__all__ = ["ItemFailed", "apply_in_order"]

R = TypeVar("R")
A = TypeVar("A")

_POLL = 0.1  # how often a blocked thread looks whether the consumer stopped, in seconds


class ItemFailed(Exception, Generic[R]):
    """``apply`` raised ``error`` for ``item``; the requests after it were not applied."""

    def __init__(self, item: R, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.item, self.error = item, error


class _End:
    """The reader's last message to the applier: the stream ended (``error``: how it broke)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


def apply_in_order(requests: Iterator[R], apply: Callable[[R], A], *, read_ahead: int = 2,
                   name: str = "stream") -> Generator[A, None, None]:
    """``apply(request)`` of each request, in order, each yielded once applied: see the module.

    ``read_ahead``: how many requests may wait, read, for the one being applied. ``name`` names
    the threads (``<name>-read``, ``<name>-apply``)."""
    if read_ahead < 1:
        raise ValueError(f"read_ahead must be >= 1, got {read_ahead}")
    stopped = threading.Event()
    inbox: queue.Queue[R | _End] = queue.Queue(maxsize=read_ahead)
    outbox: queue.SimpleQueue[A | ItemFailed[R] | _End] = queue.SimpleQueue()

    def offer(item: R | _End) -> bool:
        while not stopped.is_set():
            with suppress(queue.Full):
                inbox.put(item, timeout=_POLL)
                return True
        return False

    def read() -> None:
        try:
            for request in requests:
                if not offer(request):
                    return
        except BaseException as err:  # the call broke: the applier passes it on after the answers before
            offer(_End(err))
            return
        offer(_End())

    def work() -> None:
        while not stopped.is_set():
            try:
                item = inbox.get(timeout=_POLL)
            except queue.Empty:
                continue
            if isinstance(item, _End):
                outbox.put(item)
                return
            try:
                outbox.put(apply(item))
            except Exception as err:
                outbox.put(ItemFailed(item, err))
                return

    threads = [threading.Thread(target=read, name=f"{name}-read", daemon=True),
               threading.Thread(target=work, name=f"{name}-apply", daemon=True)]
    for thread in threads:
        thread.start()
    try:
        while True:
            answer = outbox.get()
            if isinstance(answer, ItemFailed):
                raise answer
            if isinstance(answer, _End):
                if answer.error is not None:
                    raise answer.error
                return
            yield answer
    finally:
        stopped.set()
