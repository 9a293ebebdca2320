"""The tools' reports: what ``inspect``, ``verify`` and ``repair`` found, and the stable JSON
document of each.

A leaf of the tools: the tools build these reports and :mod:`.render` draws them for people,
both importing this module, which imports neither.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .. import format as fmt
from ..checkpoint import CheckpointInfo
from ..format import FrameType
from ..proto import channel_pb2 as pb
from .scan import Damage, Piece, noop_sizes
from .txnsim import DroppedTxn, LostEvent

__all__ = ["BackupInfo", "Finding", "InspectReport", "LogFileInfo", "RepairReport", "SegmentPlan", "VerifyReport",
           "inspect_json", "repair_json", "verify_json"]

INSPECT_FORMAT = "ingest-toolkit/channel-inspect/1"
VERIFY_FORMAT = "ingest-toolkit/channel-verify/1"
REPAIR_FORMAT = "ingest-toolkit/channel-repair/1"


@dataclass(frozen=True, slots=True)
class LogFileInfo:
    log_id: int
    path: str
    size: int
    sealed: bool
    data_end: int | None  # from .meta (sealed segments only), likewise the fields below
    frames: int | None
    first_seq: int | None
    last_seq: int | None
    refcount: int | None  # events pointing into it per checkpoint.meta; None without a checkpoint
    problem: str | None = None
    key_id: int | None = None  # the encryption key id in its header; None: not encrypted (or unreadable)


@dataclass(frozen=True, slots=True)
class BackupInfo:
    """The backup copy of the checkpoint (``backup_checkpoint_dir``) as found on disk."""

    directory: str
    checkpoint_id: int | None  # None: no usable backup there
    written_unix_ns: int | None
    current: bool  # a copy of the checkpoint in force (else older, or none)
    problem: str | None = None


@dataclass(slots=True)
class InspectReport:
    checkpoint_dir: str
    data_dirs: list[str]
    now_ns: int
    channel_id: str | None
    locked: bool | None  # whether a process owns the channel right now (None: cannot tell)
    holder: str | None  # the owner in_use.lock names ("pid <n>") while locked (or when that is unknown)
    checkpoint: CheckpointInfo | None
    checkpoint_problem: str | None
    logs: list[LogFileInfo] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    backup: BackupInfo | None = None  # None: the channel keeps no backup (as far as can be told)

    @property
    def fill_percent(self) -> float | None:
        """Capacity in use: queued (in-flight takes included) plus spilled puts, of capacity."""
        cp = self.checkpoint
        if cp is None or not cp.capacity:
            return None
        return 100.0 * (cp.queue_size + cp.inflight_puts) / cp.capacity

    @property
    def log_bytes(self) -> int:
        return sum(info.size for info in self.logs)

    def to_json(self) -> dict[str, Any]:
        return inspect_json(self)


@dataclass(slots=True)
class SegmentPlan:
    """What repair does to one segment."""

    log_id: int
    path: str
    newest: bool
    meta: pb.SegmentMeta | None
    meta_broken: bool = False  # .meta exists but cannot be parsed: rebuilt from the frames
    size: int = 0
    channel_id: bytes = b""
    damage: list[Damage] = field(default_factory=list)
    commits: list[Piece] = field(default_factory=list)  # COMMIT frames to neutralise
    frames: int = 0  # valid frames that stay (neutralised COMMITs included: they become NOOPs)
    first_seq: int = 0
    last_seq: int = 0
    end: int = fmt.SEGMENT_HEADER_SIZE  # where the segment's frames end after the repair
    header_lost: str | None = None  # why the header is rebuilt (a segment proven written lost it)
    header: bytes = b""  # the rebuilt header

    def keep(self, piece: Piece) -> None:
        """Count a valid frame that stays (a RUN frame: its PUT frames, as replay counts them)."""
        self.end = piece.end
        for frame in piece.inner or (piece,):
            self.frames += 1
            if frame.type == FrameType.PUT:
                self.first_seq = min(self.first_seq or frame.seq, frame.seq)
                self.last_seq = max(self.last_seq, frame.seq)

    def noops(self) -> list[tuple[int, int, str]]:
        """``(offset, length, reason)`` of every range to cover with NOOP frames."""
        ranges = [(d.offset, d.length, f"channel repair: {d.length} damaged bytes at offset {d.offset} "
                   f"of log-{self.log_id} ({d.reason})") for d in self.damage if not d.tail]
        ranges += [(c.offset, c.length, f"channel repair: COMMIT of transaction {c.txn} neutralised, "
                    "frames of it were damaged") for c in self.commits]
        return sorted(ranges)

    @property
    def cut(self) -> int | None:
        """Size to truncate the file to, if any."""
        if any(d.tail and not d.missing for d in self.damage) or (self.seal and self.end < self.size):
            return self.end
        return None

    @property
    def seal(self) -> bool:
        """An unsealed segment that is not the newest gets its ``.meta`` (and loses any zero tail)."""
        return self.meta is None and not self.newest

    @property
    def meta_changes(self) -> bool:
        if self.meta is None:
            return self.seal or self.meta_broken
        return bool(self.damage or self.commits) or self.meta.data_end != self.end

    @property
    def changed(self) -> bool:
        return bool(self.damage or self.commits or self.header) or self.meta_changes

    def new_meta(self) -> pb.SegmentMeta:
        noop_count = sum(len(noop_sizes(d.length)) for d in self.damage if not d.tail)
        return pb.SegmentMeta(
            format_version=fmt.FORMAT_VERSION, log_id=self.log_id, channel_id=self.channel_id,
            data_end=self.end, frames=self.frames + noop_count, first_seq=self.first_seq,
            last_seq=self.last_seq, sealed_unix_ns=self.meta.sealed_unix_ns if self.meta else time.time_ns())


@dataclass(slots=True)
class RepairReport:
    checkpoint_dir: str
    data_dirs: list[str]
    dry_run: bool
    scanned: int  # segments scanned
    segments: list[SegmentPlan]  # the ones that change
    dropped: list[DroppedTxn]
    unattributed: list[LostEvent]  # damaged PUT frames of no dropped transaction (possibly uncommitted)
    backups: list[str] = field(default_factory=list)
    checkpoint_removed: bool = False
    queue_after: int | None = None  # events queued according to the replay after the repair

    @property
    def changed(self) -> bool:
        return bool(self.segments)

    @property
    def events_lost(self) -> int:
        """Events that will not be delivered, counting damaged ones of unknown transactions too."""
        return sum(d.events_lost for d in self.dropped) + sum(not e.already_taken for e in self.unattributed)

    def to_json(self) -> dict[str, Any]:
        return repair_json(self)


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # refcount_mismatch, missing_log, orphaned_log, unsealed_log, corrupt_frame, ...
    message: str
    data: dict[str, int | str] = field(default_factory=dict)


@dataclass(slots=True)
class VerifyReport:
    checkpoint_dir: str
    data_dirs: list[str]
    channel_id: str | None = None
    checkpoint_id: int | None = None
    log_position: tuple[int, int] | None = None
    segments: int = 0
    frames: int | None = None  # frames read by the full replay
    queue_size: int | None = None  # events queued according to the full replay
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def add(self, kind: str, message: str, **data: int | str) -> None:
        self.findings.append(Finding(kind, message, data))

    def to_json(self) -> dict[str, Any]:
        return verify_json(self)


# -- JSON documents ---------------------------------------------------------------------------------
def inspect_json(report: InspectReport) -> dict[str, Any]:
    cp = report.checkpoint
    checkpoint = None
    if cp is not None:
        checkpoint = {
            "path": cp.path, "checkpoint_id": cp.checkpoint_id, "written_unix_ns": cp.written_unix_ns,
            "age_seconds": round(cp.age_seconds(report.now_ns), 3),
            "interval_seconds": cp.checkpoint_interval_s, "queue_size": cp.queue_size,
            "inflight_takes": cp.inflight_takes, "inflight_puts": cp.inflight_puts, "capacity": cp.capacity,
            "fill_percent": round(report.fill_percent or 0.0, 3), "last_seq": cp.last_seq,
            "backlog_age_seconds": round(cp.backlog_age_seconds(report.now_ns), 3),
            "oldest_commit_unix_ns": cp.oldest_commit_unix_ns,
            "log_position": {"log_id": cp.log_position[0], "offset": cp.log_position[1]},
            "puts_committed": cp.puts_committed, "takes_committed": cp.takes_committed, "log_bytes": cp.log_bytes,
            "backup_checkpoint_id": cp.backup_checkpoint_id}
    backup = report.backup
    backup_json = None if backup is None else {
        "dir": backup.directory, "checkpoint_id": backup.checkpoint_id, "written_unix_ns": backup.written_unix_ns,
        "current": backup.current, "problem": backup.problem}
    return {
        "format": INSPECT_FORMAT, "checkpoint_dir": report.checkpoint_dir, "data_dirs": report.data_dirs,
        "channel_id": report.channel_id, "owner": {"locked": report.locked, "holder": report.holder},
        "checkpoint": checkpoint, "checkpoint_problem": report.checkpoint_problem,
        "logs": [{"log_id": i.log_id, "path": i.path, "size": i.size, "sealed": i.sealed, "data_end": i.data_end,
                  "frames": i.frames, "first_seq": i.first_seq, "last_seq": i.last_seq, "refcount": i.refcount,
                  "key_id": i.key_id,
                  "problem": i.problem} for i in report.logs],
        "log_files": len(report.logs), "log_bytes": report.log_bytes, "problems": report.problems,
        "backup": backup_json}


def verify_json(report: VerifyReport) -> dict[str, Any]:
    position = report.log_position
    return {
        "format": VERIFY_FORMAT, "ok": report.ok, "checkpoint_dir": report.checkpoint_dir,
        "data_dirs": report.data_dirs, "channel_id": report.channel_id, "checkpoint_id": report.checkpoint_id,
        "log_position": {"log_id": position[0], "offset": position[1]} if position else None,
        "segments": report.segments, "frames": report.frames, "queue_size": report.queue_size,
        "findings": [{**f.data, "kind": f.kind, "message": f.message} for f in report.findings],
        "notes": report.notes}


def repair_json(report: RepairReport) -> dict[str, Any]:
    return {
        "format": REPAIR_FORMAT, "dry_run": report.dry_run, "changed": report.changed,
        "scanned_segments": report.scanned, "segments": [_plan_json(p) for p in report.segments],
        "transactions_dropped": [_dropped_json(d) for d in report.dropped],
        "damaged_events": [_event_json(e) for e in report.unattributed], "events_lost": report.events_lost,
        "backups": report.backups, "checkpoint_removed": report.checkpoint_removed,
        "queue_after": report.queue_after}


def _event_json(e: LostEvent) -> dict[str, Any]:
    return {"seq": e.seq, "log_id": fmt.pointer_log_id(e.pointer), "offset": fmt.pointer_offset(e.pointer),
            "verified": e.verified, "already_taken": e.already_taken}


def _plan_json(plan: SegmentPlan) -> dict[str, Any]:
    return {
        "log_id": plan.log_id, "path": plan.path,
        "ranges": [_damage_json(d) for d in plan.damage],
        "commits_neutralised": [{"offset": c.offset, "length": c.length, "txn_id": c.txn} for c in plan.commits],
        "truncate_to": plan.cut, "meta_rewritten": plan.meta_changes, "meta_unreadable": plan.meta_broken,
        "header_rebuilt": plan.header_lost}


def _damage_json(d: Damage) -> dict[str, Any]:
    action = "meta" if d.missing else "truncate" if d.tail else "noop"
    return {"offset": d.offset, "length": d.length, "action": action, "reason": d.reason,
            "frames": [_piece_json(p) for p in d.frames]}


def _piece_json(p: Piece) -> dict[str, Any]:
    return {"offset": p.offset, "length": p.length, "type": p.type_name.rstrip("?"), "txn_id": p.txn,
            "seq": p.seq, "verified": p.verified}


def _dropped_json(d: DroppedTxn) -> dict[str, Any]:
    return {"txn_id": d.txn_id, "kind": d.kind, "cause": d.cause,
            "commit": {"path": d.commit[0], "offset": d.commit[1]} if d.commit else None,
            "events": [_event_json(e) for e in d.events],
            "unreadable_events": d.unreadable, "events_lost": d.events_lost, "events_returned": d.returned}
