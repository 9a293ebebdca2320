"""Whether each channel of the agent can take puts: a full disk must show, not only refuse.

A channel refuses every put once its volume is below ``min_free_bytes`` (``DiskSpaceError``),
and the sources back off and retry, which is right, but silent: the agent used to log nothing,
``/healthz`` stayed ``ok`` and ``ingest_agent_up`` 1. :class:`Writability` watches both signals:

* a put refused for disk space (reported by the pipelines through :meth:`Writability.refused`):
  the channel counts as not writable until a put succeeds again (:meth:`Writability.accepted`);
* the free space of the directory the channel writes to, measured when asked (a scrape, a
  health probe), so an idle channel on a full disk shows too.

It logs one WARNING per channel per ``warn_every`` seconds while puts are refused (with the count
refused since the previous one) and an INFO line when puts are accepted again. The agent turns
:meth:`Writability.problems` into ``/healthz`` 503 ``{"status": "degraded"}`` and the gauge
``ingest_channel_writable``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..channel import FileChannel
from ..errors import DiskSpaceError
from .metrics import Family, Sample

__all__ = ["Writability", "free_bytes"]

log = logging.getLogger("ingest_toolkit.collect.agent")

def free_bytes(directory: str) -> int:
    """Bytes an unprivileged writer may still use on the volume of ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


@dataclass
class _Refusals:
    since: float  # monotonic time of the first refusal since puts were last accepted
    message: str
    count: int = 0
    unreported: int = 0  # refusals since the last WARNING
    warned_at: float | None = None


class Writability:
    """Per channel: refused puts and free space; thread-safe (pipelines report from many threads)."""

    def __init__(self, channels: Mapping[str, FileChannel], *, warn_every: float = 60.0,
                 free: Callable[[str], int] = free_bytes, clock: Callable[[], float] = time.monotonic) -> None:
        self._channels, self._warn_every, self.free, self._clock = channels, warn_every, free, clock
        self._lock = threading.Lock()
        self._refused: dict[str, _Refusals] = {}
        self._low_space_warned: dict[str, float] = {}

    def refused(self, err: DiskSpaceError) -> None:
        """A put was refused for disk space (``err.path`` is one of a channel's directories)."""
        name = self._owner(err.path)
        now = self._clock()
        with self._lock:
            refusals = self._refused.setdefault(name, _Refusals(now, str(err)))
            refusals.count += 1
            refusals.unreported += 1
            refusals.message = str(err)
            if refusals.warned_at is not None and now - refusals.warned_at < self._warn_every:
                return
            refusals.warned_at, unreported, refusals.unreported = now, refusals.unreported, 0
        log.warning("channel %s refuses puts for lack of disk space (%d refused since the last warning): %s", name,
                    unreported, err, extra={"channel": name, "refused": unreported})

    def accepted(self, channels: Iterable[str]) -> None:
        """Puts were committed to ``channels``: they are writable again."""
        with self._lock:
            ended = [(name, self._refused.pop(name)) for name in channels if name in self._refused]
        for name, refusals in ended:
            log.info("channel %s accepts puts again after %d refused for lack of disk space", name, refusals.count,
                     extra={"channel": name, "refused": refusals.count})

    def problems(self) -> dict[str, str]:
        """``{channel: why it cannot take puts}`` for every channel that cannot."""
        found = {}
        for name in self._channels:
            problem = self.problem(name)
            if problem is not None:
                found[name] = problem
        return found

    def problem(self, name: str) -> str | None:
        """Why channel ``name`` cannot take puts now, or None."""
        low = self._low_space(name)
        if low is not None:
            return low
        with self._lock:
            refusals = self._refused.get(name)
            if refusals is None:
                return None
            age = self._clock() - refusals.since
            return (f"not writable: {refusals.count} puts refused for lack of disk space in the last {age:.0f} s "
                    f"({refusals.message})")

    def free_space(self, name: str) -> tuple[str, int] | None:
        """``(directory, free bytes)`` of the directory channel ``name`` writes to (None: closed)."""
        channel = self._channels[name]
        try:
            writing = int(channel.stats()["writing"])
        except Exception:  # a closed or failed channel: its health reports that
            return None
        directory = channel.config.data_dirs[writing % len(channel.config.data_dirs)]
        return directory, self.free(directory)

    def _low_space(self, name: str) -> str | None:
        space = self.free_space(name)
        if space is None:
            return None
        directory, free = space
        minimum = self._channels[name].config.min_free_bytes
        if free > minimum:
            with self._lock:
                self._low_space_warned.pop(name, None)
            return None
        problem = (f"not writable: {free:,} bytes free in {directory}, min_free_bytes = {minimum:,} must stay free; "
                   "puts are refused until space is freed" + self._drain_hint(name))
        now = self._clock()
        with self._lock:
            due = now - self._low_space_warned.get(name, now - self._warn_every) >= self._warn_every
            if due:
                self._low_space_warned[name] = now
        if due:
            log.warning("channel %s: %s", name, problem, extra={"channel": name, "free_bytes": free})
        return problem

    def _drain_hint(self, name: str) -> str:
        if len(self._channels[name]):
            return " (or the channel drained)"
        return " (the channel is empty: draining frees nothing)"

    def _owner(self, path: str) -> str:
        real = os.path.realpath(path)
        for name, channel in self._channels.items():
            dirs = (channel.config.checkpoint_dir, *channel.config.data_dirs)
            if any(os.path.realpath(d) == real for d in dirs):
                return name
        return path  # not a channel directory: still reported, under its path

    def families(self) -> list[Family]:
        """``ingest_channel_writable`` and ``ingest_channel_free_bytes`` per channel."""
        writable, free = [], []
        for name in self._channels:
            writable.append(Sample("ingest_channel_writable", {"channel": name}, 0 if self.problem(name) else 1))
            space = self.free_space(name)
            if space is not None:
                free.append(Sample("ingest_channel_free_bytes", {"channel": name}, space[1]))
        return [("ingest_channel_writable", "gauge", "1 when the channel can take puts (disk space above "
                 "min_free_bytes, no put refused for disk space since the last accepted one), else 0.", writable),
                ("ingest_channel_free_bytes", "gauge", "Free bytes on the volume of the directory the channel "
                 "writes to.", free)]
