"""What every source shares: common settings, counters, batch ids, and retry with backoff.

Sources hand batches to a :class:`~ingest_toolkit.collect.pipeline.Pipeline`. Spool and tail
sources own their commit point: they retry a batch until the pipeline committed it (transient
errors such as ChannelFullError and DiskSpaceError back off exponentially; any other toolkit error
is logged, counted and retried after the longest backoff: a source never drops a batch it read).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ...channel import Event
from ...channel.tags import MAX_TAG_BYTES
from ...errors import IngestError, TransientError
from ...handoff import PutResult
from ..interceptors import InterceptorSettings
from ..pipeline import Pipeline
from ..selectors import ReplicatingSelectorSettings, SelectorSettings

__all__ = ["Counters", "Source", "SourceSettings", "SourceStopped",
           "PollingWorker", "make_batch_id", "put_until_committed", "run_worker"]


class Source(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...

    def stats(self) -> dict[str, Any]: ...


class SourceSettings(BaseModel):
    """Fields every source type has; each type adds its own (and a ``type`` discriminator)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    channels: list[str] = Field(min_length=1)
    selector: SelectorSettings = Field(default_factory=ReplicatingSelectorSettings)
    interceptors: list[InterceptorSettings] = Field(default_factory=list)


class SourceStopped(Exception):  # noqa: N818 - control flow, not an error
    """Raised inside a source's worker when stop() interrupts a retry; nothing was committed."""


class Counters:
    """Thread-safe named counters for ``stats()``."""

    def __init__(self, *names: str) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(names, 0)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for key, delta in deltas.items():
                self._values[key] = self._values.get(key, 0) + delta

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


def make_batch_id(source: str, *parts: object) -> str:
    """``source:part:part...``; hashed when it would exceed the channel's 128-byte tag limit."""
    text = ":".join([source, *map(str, parts)])
    if len(text.encode("utf-8")) <= MAX_TAG_BYTES:
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def put_until_committed(pipeline: Pipeline, events: Sequence[Event], batch_id: str, *,
                        stop: threading.Event, log: logging.Logger, counters: Counters,
                        max_backoff: float) -> PutResult:
    """Put the batch, retrying until it is committed; raises SourceStopped when stopping."""
    delay = min(0.05, max_backoff)
    while True:
        try:
            return pipeline.put_batch(events, batch_id=batch_id)
        except TransientError as err:
            counters.add(retries=1)
            log.warning("batch %s not stored yet, retrying in %.2fs: %s", batch_id, delay, err)
        except IngestError as err:
            counters.add(errors=1)
            delay = max_backoff
            log.error("batch %s failed, retrying in %.2fs: %s", batch_id, delay, err)
        if stop.wait(delay):
            raise SourceStopped(batch_id)
        delay = min(delay * 2, max_backoff)


def run_worker(name: str, step: Callable[[], bool], *, stop: threading.Event, poll_interval: float,
               log: logging.Logger, counters: Counters) -> None:
    """Call ``step`` until stopped; it returns True when it did work (then it runs again at once).

    An unexpected exception is logged and counted, and the loop continues after a pause: a
    worker thread that died silently would stop ingesting without anyone noticing.
    """
    while not stop.is_set():
        try:
            busy = step()
        except SourceStopped:
            return
        except Exception:
            counters.add(errors=1)
            log.exception("source %s: unexpected error; retrying in %.1fs", name, max(poll_interval, 1.0))
            busy = False
            if stop.wait(max(poll_interval, 1.0)):
                return
        if not busy and stop.wait(poll_interval):
            return


class PollingWorker:
    """The one thread of a polling source: :func:`run_worker` over ``step`` until stopped.

    ``stop_event`` is what the source's own waits (``put_until_committed``) watch, so a stop
    also interrupts a batch that is backing off.
    """

    def __init__(self, name: str, step: Callable[[], bool], *, poll_interval: float, log: logging.Logger,
                 counters: Counters) -> None:
        self.name, self._step, self._poll_interval, self._log, self._counters = name, step, poll_interval, log, counters
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self.stop_event.clear()
        self._thread = threading.Thread(target=run_worker, name=f"source-{self.name}", daemon=True,
                                        args=(self.name, self._step), kwargs={
                                            "stop": self.stop_event, "poll_interval": self._poll_interval,
                                            "log": self._log, "counters": self._counters})
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Stop and join; False (logged) when the thread is still busy after ``timeout``: the
        caller must then leave the resources the thread uses open."""
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._log.warning("source %s did not stop within %.1fs", self.name, timeout)
                return False
            self._thread = None
        return True
