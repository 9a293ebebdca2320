"""Per-channel and per-source parts of the agent's ``/status`` document that are not a component's
own ``stats()``: what ``ingest-toolkit status`` shows besides the counters.

* ``disk`` of a channel: the bytes of its log segments now (``log_bytes``, summed from the
  files, not from ``checkpoint.meta``), the free bytes of the volume it writes to
  (``free_bytes``, ``free_dir``), its ``min_free_bytes``, and whether it takes puts
  (``writable_problem``: None, or why not);
* ``oldest_event_age_seconds``: the age of the oldest event not yet taken for good, live
  (``FileChannel.stats()["oldest_commit_unix_ns"]``), on the agent's clock; None when empty;
* ``type`` of a source, from the configuration.

Each is computed when asked; a part that fails is None, never a failed status.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..channel import FileChannel
from ..channel.tools.health import observe_channel
from .agent_metrics import safe_stats
from .writability import Writability

__all__ = ["channel_status", "source_status"]


def channel_status(name: str, channel: FileChannel, writability: Writability) -> dict[str, Any]:
    """The ``/status`` entry of channel ``name``: its stats, checkpoint and segment health, disk and
    live backlog age."""
    stats = safe_stats(channel.stats)
    observed = observe_channel(channel.config.checkpoint_dir, channel.config.data_dirs)
    return {**stats, **observed, "disk": _disk(name, channel, stats, writability),
            "oldest_event_age_seconds": _age(stats.get("oldest_commit_unix_ns"))}


def source_status(settings: Any, stats: dict[str, Any]) -> dict[str, Any]:
    """A source's ``stats()`` with its ``type`` from the configuration."""
    return {"type": getattr(settings, "type", None), **stats}


def _disk(name: str, channel: FileChannel, stats: dict[str, Any], writability: Writability) -> dict[str, Any]:
    space = _quietly(lambda: writability.free_space(name))
    return {"log_bytes": _log_bytes(stats), "free_bytes": space[1] if space else None,
            "free_dir": space[0] if space else None, "min_free_bytes": channel.config.min_free_bytes,
            "writable_problem": _quietly(lambda: writability.problem(name))}


def _log_bytes(stats: dict[str, Any]) -> int | None:
    """Bytes of the segment files now; a file a checkpoint deleted meanwhile counts as 0."""
    files = stats.get("log_files")
    if not isinstance(files, dict):
        return None
    total = 0
    for info in files.values():
        try:
            total += os.stat(info["path"]).st_size
        except (OSError, KeyError, TypeError):
            continue
    return total


def _age(unix_ns: Any) -> float | None:
    return round(max(0.0, (time.time_ns() - unix_ns) / 1e9), 3) if isinstance(unix_ns, int) and unix_ns else None


def _quietly(step: Any) -> Any:
    try:
        return step()
    except Exception:
        return None
