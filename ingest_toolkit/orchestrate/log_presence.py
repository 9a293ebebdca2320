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
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..channel import format as fmt
from ..channel.checkpoint import Checkpoint, read_checkpoint_meta
from ..channel.tools.common import ChannelDirs, segments_of
from .channel_checks import LiveCheckpoint, load_live_checkpoint, read_state
from .settings import ChannelSpec, OrchestrationSettings
from .verdict import TextValue, Verdict, verdict

__all__ = ["Need", "needed_segments", "referenced_logs_intact"]

_CHECK = "referenced_logs_intact"

_ATTEMPTS = 5
_OFFSET_MASK = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Need:
    """What the checkpoint needs of one segment: the frame at ``offset`` must be whole (or, for
    the segment being written, ``min_size`` bytes must be there); ``events`` point into it."""

    log_id: int
    events: int
    offset: int | None  # the highest offset an event points at (None: no event, the writer only)
    min_size: int = 0


def needed_segments(checkpoint: Checkpoint) -> dict[int, Need]:
    """Every segment the checkpoint refers to: by queued, taken and spilled events, and its
    writer position (``log_id`` / ``log_offset``)."""
    extra = [p for _txn, pointers in (*checkpoint.takes, *checkpoint.puts) for p in pointers]
    pointers = np.concatenate([np.frombuffer(checkpoint.queue, dtype=np.int64), np.array(extra, dtype=np.int64)])
    ids, offsets = pointers >> 32, pointers & _OFFSET_MASK
    order = np.lexsort((offsets, ids))
    ids, offsets = ids[order], offsets[order]
    unique, first, counts = np.unique(ids, return_index=True, return_counts=True)
    last = offsets[first + counts - 1]  # sorted by offset within each log id: the highest
    needs = {int(i): Need(int(i), int(n), int(o)) for i, n, o in zip(unique, counts, last, strict=True)}
    meta = checkpoint.meta
    if meta.log_id:  # the segment being written at the checkpoint reaches at least log_offset
        known = needs.get(meta.log_id, Need(meta.log_id, 0, None))
        needs[meta.log_id] = Need(meta.log_id, known.events, known.offset, meta.log_offset)
    return needs


def _problem(need: Need, path: str | None) -> str | None:
    if path is None:
        return "missing"
    size = os.path.getsize(path)
    if size < need.min_size:
        return f"truncated: {size:,} bytes, the checkpoint's write position is byte {need.min_size:,}"
    if need.offset is None:
        return None
    with open(path, "rb") as f:
        f.seek(need.offset)
        head = f.read(fmt.FRAME_HEADER.size)
    if len(head) < fmt.FRAME_HEADER.size:
        return f"truncated: {size:,} bytes, an event's frame starts at byte {need.offset:,}"
    magic, _kind, _flags, length, _txn, _seq = fmt.FRAME_HEADER.unpack(head)
    if magic != fmt.FRAME_MAGIC:
        return f"no frame where an event points (byte {need.offset:,}): the file was replaced or overwritten"
    if size < need.offset + length:
        return f"truncated: {size:,} bytes, an event's frame ends at byte {need.offset + length:,}"
    return None


def _damage(needs: Iterable[Need], spec: ChannelSpec) -> dict[str, tuple[Need, str]]:
    present = dict(segments_of(ChannelDirs.of(spec.checkpoint_dir, list(spec.data_dirs))))
    dirs = spec.data_dirs
    found = {}
    for need in needs:
        path = present.get(need.log_id)
        problem = _problem(need, path)
        if problem is not None:
            found[path or os.path.join(dirs[need.log_id % len(dirs)], f"log-{need.log_id}")] = (need, problem)
    return found


def referenced_logs_intact(spec: ChannelSpec, settings: OrchestrationSettings) -> Verdict:
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
