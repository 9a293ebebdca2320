"""Sink processors: which sink of a group forwards the next batch.

* ``failover``: the sink of the highest priority that is not set aside. A sink whose put failed
  is set aside for a penalty that doubles with each consecutive failure (``min_penalty`` up to
  ``max_penalty``, with jitter); when it ends the sink is tried again, and if it answers the
  traffic returns to it (it has the higher priority).
* ``load_balance``: ``round_robin`` or ``random`` over the sinks not set aside; a failed sink
  backs off the same way and rejoins when its penalty ends.

A batch pinned to a sink (its put failed in doubt, see :mod:`.forward`) goes to that sink only.
``pick`` returns the sink, or None and the seconds until one is available.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["Candidate", "Failover", "LoadBalance", "Processor", "build_processor"]


class Candidate(Protocol):
    """What a processor needs of a sink: its name and when its penalty ends (``time.monotonic()``)."""

    name: str
    available_at: float


Downstream = TypeVar("Downstream", bound=Candidate)


class Processor(Protocol):
    kind: str

    def pick(self, sinks: Sequence[Downstream], pinned: str | None) -> tuple[Downstream | None, float]: ...

    def failed(self, sink: Candidate) -> None: ...

    def succeeded(self, sink: Candidate) -> None: ...


def _available(sinks: Sequence[Downstream], now: float) -> list[Downstream]:
    return [s for s in sinks if s.available_at <= now]


def _wait(sinks: Sequence[Candidate], now: float) -> float:
    return max(0.0, min(s.available_at for s in sinks) - now) if sinks else 1.0


def _pinned(sinks: Sequence[Downstream], pinned: str, now: float) -> tuple[Downstream | None, float]:
    sink = next((s for s in sinks if s.name == pinned), None)
    if sink is None:  # the configuration no longer has it: nothing to wait for
        return None, 0.0
    return (sink, 0.0) if sink.available_at <= now else (None, sink.available_at - now)


class Failover:
    kind = "failover"

    def __init__(self, priorities: dict[str, int], order: Sequence[str]) -> None:
        self._rank = {name: (-priorities.get(name, 0), i) for i, name in enumerate(order)}

    def pick(self, sinks: Sequence[Downstream], pinned: str | None) -> tuple[Downstream | None, float]:
        now = time.monotonic()
        if pinned is not None and any(s.name == pinned for s in sinks):
            return _pinned(sinks, pinned, now)
        ready = sorted(_available(sinks, now), key=lambda s: self._rank[s.name])
        return (ready[0], 0.0) if ready else (None, _wait(sinks, now))

    def failed(self, sink: Candidate) -> None:
        pass  # the penalty is on the sink

    def succeeded(self, sink: Candidate) -> None:
        pass


class LoadBalance:
    kind = "load_balance"

    def __init__(self, selector: str, seed: int | None = None) -> None:
        self.selector = selector
        self._next = 0
        self._random = random.Random(seed)

    def pick(self, sinks: Sequence[Downstream], pinned: str | None) -> tuple[Downstream | None, float]:
        now = time.monotonic()
        if pinned is not None and any(s.name == pinned for s in sinks):
            return _pinned(sinks, pinned, now)
        ready = _available(sinks, now)
        if not ready:
            return None, _wait(sinks, now)
        if self.selector == "random":
            return self._random.choice(ready), 0.0
        # round robin over the configured order, skipping the sinks set aside
        for step in range(len(sinks)):
            candidate = sinks[(self._next + step) % len(sinks)]
            if candidate in ready:
                self._next = (self._next + step + 1) % len(sinks)
                return candidate, 0.0
        return ready[0], 0.0

    def failed(self, sink: Candidate) -> None:
        pass

    def succeeded(self, sink: Candidate) -> None:
        pass


def build_processor(kind: str, *, priorities: dict[str, int], order: Sequence[str], selector: str) -> Processor:
    if kind == "failover":
        return Failover(priorities, order)
    return LoadBalance(selector)
