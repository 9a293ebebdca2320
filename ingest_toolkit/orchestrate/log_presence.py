"""The check that every log segment the channel still needs is on disk, whole.

Queued events, events in open takes and spilled puts are pointers ``(log id << 32) | offset``
into the segments; the checkpoint's writer position says how far the newest segment reaches.
A segment that is gone (deleted or moved by hand, a restore that missed it) or cut short (a
copy that stopped early, a file system repair) loses those events, and the channel cannot be
opened again: recovery refuses it, naming the file. The other checks judge the checkpoint's
own bookkeeping and pass in that state, so this one compares the checkpoint with the files:
each needed segment exists, and the frame at the highest offset referenced in it ends before
the end of the file. It reads the checkpoint and one frame header per segment, no lock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from ..channel.checkpoint import Checkpoint, read_checkpoint_meta
from ..channel.tools.common import ChannelDirs, segments_of
from ..channel.tools.health import Need, needed_segments, segment_problem
from . import agent_checks
from .channel_checks import LiveCheckpoint, load_live_checkpoint, observed, read_state
from .remote import StateSource
from .settings import ChannelSpec, OrchestrationSettings
from .verdict import TextValue, Verdict, verdict

__all__ = ["Need", "needed_segments", "referenced_logs_intact"]

_CHECK = "referenced_logs_intact"

_ATTEMPTS = 5


def _damage(needs: Iterable[Need], spec: ChannelSpec) -> dict[str, tuple[Need, str]]:
    present = dict(segments_of(ChannelDirs.of(spec.checkpoint_dir, list(spec.data_dirs))))
    dirs = spec.data_dirs
    found = {}
    for need in needs:
        path = present.get(need.log_id)
        problem = segment_problem(need, path)
        if problem is not None:
            found[path or os.path.join(dirs[need.log_id % len(dirs)], f"log-{need.log_id}")] = (need, problem)
    return found


@observed(agent_checks.remote_referenced_logs_intact)
def referenced_logs_intact(spec: ChannelSpec, settings: OrchestrationSettings, *,
                           source: StateSource | None = None) -> Verdict:
    """Every segment that queued or in-flight events (or the writer position) need is present
    and long enough. A finding is judged again against a newer checkpoint if one was written
    meanwhile (it may have released the segment, which is then deleted legitimately)."""
    for attempt in range(1, _ATTEMPTS + 1):
        live = read_state(_CHECK, spec, settings, load_live_checkpoint)
        if isinstance(live, Verdict):
            return live
        if live is None:
            return verdict(_CHECK, settings, passed=True, description="no checkpoint yet: nothing is referenced")
        needs = needed_segments(live.checkpoint)
        damage = _damage(needs.values(), spec)
        current = read_checkpoint_meta(spec.checkpoint_dir)
        if not damage or current is None or current.checkpoint_id == live.checkpoint.meta.checkpoint_id:
            return _result(settings, live.checkpoint, needs, damage, attempt)
        time.sleep(0.05 * attempt)
    assert isinstance(live, LiveCheckpoint)
    return _result(settings, live.checkpoint, needs, damage, _ATTEMPTS)  # the channel checkpoints faster than we read


def _result(settings: OrchestrationSettings, checkpoint: Checkpoint, needs: dict[int, Need],
            damage: dict[str, tuple[Need, str]], attempts: int) -> Verdict:
    lost = sum(need.events for need, _problem in damage.values())
    metadata: dict[str, Any] = {"checkpoint_id": TextValue(checkpoint.meta.checkpoint_id),
                "segments_needed": sorted(f"log-{i}" for i in needs),
                "events_referenced": sum(n.events for n in needs.values()),
                "damaged": {path: problem for path, (_need, problem) in damage.items()},
                "events_in_damaged_segments": lost, "read_attempts": attempts}
    if not damage:
        return verdict(_CHECK, settings, passed=True, metadata=metadata, description=(
            f"all {len(needs)} segments the checkpoint needs are on disk, whole"))
    found = "; ".join(f"{os.path.basename(path)} {problem} ({need.events:,} queued or in-flight events point "
                      "into it)" for path, (need, problem) in sorted(damage.items()))
    return verdict(_CHECK, settings, passed=False, metadata=metadata, description=(
        f"{found}. Those events are lost unless the file is restored, and the channel cannot be opened again "
        "(recovery refuses it): see the runbook"))
