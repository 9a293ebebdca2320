"""The check that every log segment the channel still needs is on disk, whole.

Queued events, events in open takes and spilled puts are pointers ``(log id << 32) | offset``
into the segments; the checkpoint's writer position says how far the newest segment reaches.
A segment that is gone (deleted or moved by hand, a restore that missed it) or cut short (a
copy that stopped early, a file system repair) loses those events, and the channel cannot be
opened again: recovery refuses it, naming the file. The other checks judge the checkpoint's
own bookkeeping and pass in that state, so this one compares the checkpoint with the files:
each needed segment exists, and the frame at the highest offset referenced in it ends before
the end of the file. It reads the checkpoint and one frame header per segment, no lock; the
numbers and the verdict are those the agent's status serves for a remote channel
(:mod:`.health_verdicts`).
"""

from __future__ import annotations

from ..channel.tools.health import Need, needed_segments
from . import agent_checks
from .channel_checks import local_health, observed
from .health_verdicts import Where, judge_intact
from .remote import StateSource
from .settings import ChannelSpec, OrchestrationSettings
from .verdict import Verdict

__all__ = ["Need", "needed_segments", "referenced_logs_intact"]


@observed(agent_checks.remote_referenced_logs_intact)
def referenced_logs_intact(spec: ChannelSpec, settings: OrchestrationSettings, *,
                           source: StateSource | None = None) -> Verdict:
    """Every segment that queued or in-flight events (or the writer position) need is present
    and long enough. A finding is judged again against a newer checkpoint if one was written
    meanwhile (it may have released the segment, which is then deleted legitimately)."""
    health = local_health("referenced_logs_intact", spec, settings, "segments")
    return health if isinstance(health, Verdict) else judge_intact(
        settings, health, Where({"checkpoint_dir": spec.checkpoint_dir}))
