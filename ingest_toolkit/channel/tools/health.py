"""The health of a channel's checkpoint and segments, read without a lock (a live channel is fine).

What the channel checks judge a channel by, as plain data: every field of ``checkpoint.meta``,
the reference counts beside a recount of the same checkpoint, the segments below the deletion
floor that still exist (drained but not deleted), and the segments the checkpoint needs that are
missing or cut short. The agent serves it in its status API (gRPC ``Status`` and admin
``/status``), so a check can judge a channel it cannot read from disk; the Dagster checks in
:mod:`ingest_toolkit.orchestrate` read the same functions locally.

Reading a live channel without its lock: ``checkpoint.meta`` is replaced atomically and names
the queue and in-flight files of the same checkpoint, so a recount compares numbers of one
checkpoint position. A new checkpoint that replaces the files between our reads makes the load
fail with a missing file; :func:`load_live_checkpoint` then reads again.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
import uuid
from array import array
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict

from ...errors import CheckpointInvalid, IngestError
from .. import format as fmt
from ..checkpoint import CHECKPOINT_META, Checkpoint, decode_meta, load_checkpoint
from ..fs import OsFileSystem, read_file
from ..txnframes import count_refs
from .common import ChannelDirs, segments_of
from .refcounts import deletion_floor, recount

__all__ = ["HEALTH_PARTS", "LiveCheckpoint", "Need", "channel_health", "checkpoint_meta_fields", "load_live_checkpoint",
           "needed_segments", "observe_channel", "segment_problem"]

_ATTEMPTS = 5
_OFFSET_MASK = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class LiveCheckpoint:
    checkpoint: Checkpoint
    attempts: int  # reads needed: more than 1 means a checkpoint was written while we read


def load_live_checkpoint(checkpoint_dir: str) -> LiveCheckpoint | None:
    """Load the current checkpoint of a channel that may be live; None if it has none.

    Raises CheckpointInvalid when the checkpoint stays unreadable over several attempts for a
    reason other than being replaced while read.
    """
    last: CheckpointInvalid | None = None
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            checkpoint = load_checkpoint(checkpoint_dir, None, check_counts=False)  # the checks recount themselves
        except CheckpointInvalid as err:
            last = err
            time.sleep(0.05 * attempt)  # a checkpoint is being written: let it finish
            continue
        return None if checkpoint is None else LiveCheckpoint(checkpoint, attempt)
    assert last is not None
    raise last


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
    pointers = array("q", checkpoint.queue)
    pointers.extend(extra)
    counts = count_refs(pointers)
    ordered = sorted(pointers)  # a pointer is (log id << 32) | offset: the last below the next id is the highest
    needs = {}
    for log_id, events in counts.items():
        highest = ordered[bisect.bisect_left(ordered, (log_id + 1) << 32) - 1]
        needs[log_id] = Need(log_id, events, highest & _OFFSET_MASK)
    meta = checkpoint.meta
    if meta.log_id:  # the segment being written at the checkpoint reaches at least log_offset
        known = needs.get(meta.log_id, Need(meta.log_id, 0, None))
        needs[meta.log_id] = Need(meta.log_id, known.events, known.offset, meta.log_offset)
    return needs


def segment_problem(need: Need, path: str | None) -> str | None:
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


_INT64 = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)


def checkpoint_meta_fields(checkpoint_dir: str) -> dict[str, Any] | None:
    """Every field of ``checkpoint.meta`` (the protobuf names; ``channel_id`` as a UUID string,
    ``log_refcounts`` keyed by log id as a string), or None when no checkpoint exists yet.
    Raises CheckpointInvalid for a damaged file."""
    path = os.path.join(checkpoint_dir, CHECKPOINT_META)
    data = read_file(OsFileSystem(), path, 16 << 20)
    if data is None:
        return None
    meta = decode_meta(data, path)
    fields: dict[str, Any] = MessageToDict(
        meta, preserving_proto_field_name=True, always_print_fields_with_no_presence=True, use_integers_for_enums=True)
    for field in meta.DESCRIPTOR.fields:  # 64-bit integers come out as strings in proto3 JSON
        if field.cpp_type in _INT64 and not field.is_repeated and isinstance(fields.get(field.name), str):
            fields[field.name] = int(fields[field.name])
    fields["channel_id"] = str(uuid.UUID(bytes=meta.channel_id))
    fields["log_refcounts"] = {str(k): int(v) for k, v in meta.log_refcounts.items()}
    return fields


HEALTH_PARTS: Final = frozenset({"recount", "drained", "segments"})


def channel_health(checkpoint_dir: str, data_dirs: list[str] | tuple[str, ...], *,
                   parts: frozenset[str] = HEALTH_PARTS, now_ns: int | None = None) -> dict[str, Any]:
    """The segment health the channel checks judge, for one checkpoint (see the module doc).

    ``recount``: ``ok``, ``mismatches`` (``log-<id>`` -> recorded and recounted), the recorded and
    recounted queue sizes. ``drained``: the deletion floor, the segments below it that still
    exist (``orphaned``, paths), drained segments kept between needed ones, the checkpoint's age
    (at ``now_ns``), the backup copy's directory and checkpoint id. ``segments``: every segment
    on disk, those the checkpoint needs, and ``damaged`` (path -> ``missing`` or how it is cut
    short) with the events that point into them (``events_in_damaged``, per path).

    ``parts``: the parts to compute (the others are None); a check computes only its own, the
    agent's status all of them.
    """
    unknown = parts - HEALTH_PARTS
    if unknown:
        raise ValueError(f"unknown channel health parts {sorted(unknown)}; known: {sorted(HEALTH_PARTS)}")
    dirs = ChannelDirs.of(checkpoint_dir, list(data_dirs))
    damaged: dict[str, tuple[Need, str]] = {}
    needs: dict[int, Need] = {}
    for attempt in range(1, _ATTEMPTS + 1):
        live = load_live_checkpoint(checkpoint_dir)
        present = segments_of(dirs)
        if live is None:
            return {"checkpoint_id": None, "log_files": len(present), "recount": None, "drained": None,
                    "segments": {"present": [f"log-{i}" for i, _p in present], "needed": [], "damaged": {},
                                 "events_in_damaged": {}, "events_in_damaged_segments": 0,
                                 "events_referenced": 0} if "segments" in parts else None}
        checkpoint = live.checkpoint
        if "segments" not in parts:
            break
        needs = needed_segments(checkpoint)
        paths = dict(present)
        damaged = {}
        for need in needs.values():
            path = paths.get(need.log_id)
            problem = segment_problem(need, path)
            if problem is not None:
                where = path or os.path.join(data_dirs[need.log_id % len(data_dirs)], f"log-{need.log_id}")
                damaged[where] = (need, problem)
        meta_now = checkpoint_meta_fields(checkpoint_dir)
        if not damaged or meta_now is None or meta_now["checkpoint_id"] == checkpoint.meta.checkpoint_id:
            break
        time.sleep(0.05 * attempt)  # a newer checkpoint may have released the segment: judge that one
    assert live is not None  # the loop returned for a channel without a checkpoint
    meta = checkpoint.meta
    health: dict[str, Any] = {"checkpoint_id": meta.checkpoint_id, "log_files": len(present),
                              "read_attempts": live.attempts, "recount": None, "drained": None, "segments": None}
    counts = recount(checkpoint) if parts & {"recount", "drained"} else None
    if counts is not None and "recount" in parts:
        health["recount"] = {
            "ok": counts.ok,
            "mismatches": {f"log-{i}": {"recorded": r, "recounted": c} for i, (r, c) in counts.mismatches.items()},
            "log_files_referenced": len(counts.recorded), "events_recounted": sum(counts.recounted.values()),
            "queue_size_recorded": counts.queue_size_recorded, "queue_size_recounted": counts.queue_size_recounted}
    if counts is not None and "drained" in parts:
        deletion = deletion_floor(checkpoint, counts)
        floor, needed = deletion.log_id, deletion.needed
        health["drained"] = {
            "deletion_floor": f"log-{floor}", "needed": sorted(f"log-{i}" for i in needed),
            "orphaned": [path for i, path in present if i < floor and os.path.exists(path)],
            "drained_kept_between_needed": [f"log-{i}" for i, _p in present
                                            if floor <= i < meta.log_id and i not in needed],
            "checkpoint_age_seconds": round(((now_ns or time.time_ns()) - meta.written_unix_ns) / 1e9, 3),
            "backup_dir": meta.backup_dir, "backup_checkpoint_id": meta.backup_checkpoint_id}
    if "segments" in parts:
        health["segments"] = {
            "present": [f"log-{i}" for i, _p in present], "needed": sorted(f"log-{i}" for i in needs),
            "events_referenced": sum(n.events for n in needs.values()),
            "damaged": {path: problem for path, (_need, problem) in damaged.items()},
            "events_in_damaged": {path: need.events for path, (need, _problem) in damaged.items()},
            "events_in_damaged_segments": sum(need.events for need, _problem in damaged.values())}
    return health


_CACHE_SECONDS = 5.0
_cache: dict[str, tuple[int, float, dict[str, Any]]] = {}  # checkpoint dir -> (checkpoint id, when, health)
_cache_lock = threading.Lock()


def observe_channel(checkpoint_dir: str, data_dirs: list[str] | tuple[str, ...],
                    max_age: float = _CACHE_SECONDS) -> dict[str, Any]:
    """``{"checkpoint_meta": ..., "segments": ...}`` (:func:`checkpoint_meta_fields`,
    :func:`channel_health`) for a status answer: a part that cannot be read is None and its
    reason is under ``checkpoint_meta_error`` / ``segments_error`` (a status never fails on it).

    The segment health loads the checkpoint's queue file, so it is computed again only when a new
    checkpoint was written or the last result is older than ``max_age`` seconds (a status poll,
    e.g. a landing's backlog, stays cheap); ``segments_computed_at`` says when it was."""
    out: dict[str, Any] = {}
    try:
        out["checkpoint_meta"] = checkpoint_meta_fields(checkpoint_dir)
    except (IngestError, OSError) as err:
        out["checkpoint_meta"], out["checkpoint_meta_error"] = None, f"{type(err).__name__}: {err}"
    checkpoint_id = (out["checkpoint_meta"] or {}).get("checkpoint_id", 0)
    now = time.time()
    with _cache_lock:
        cached = _cache.get(checkpoint_dir)
    if cached is not None and cached[0] == checkpoint_id and now - cached[1] < max_age:
        out["segments"], out["segments_computed_at"] = cached[2], cached[1]
        return out
    try:
        health = channel_health(checkpoint_dir, data_dirs)
    except (IngestError, OSError) as err:
        out["segments"], out["segments_error"] = None, f"{type(err).__name__}: {err}"
        return out
    computed_id = health["checkpoint_id"] or 0
    with _cache_lock:
        _cache[checkpoint_dir] = (computed_id, now, health)
    out["segments"], out["segments_computed_at"] = health, now
    return out
