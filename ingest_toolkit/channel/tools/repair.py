"""``channel repair``: put damaged log records out of the way, keeping a backup of every file.

Steps, with the channel's directories locked:

1. Scan every segment in log order (:func:`scan.walk`): valid frames and damaged ranges.
2. Plan: a damaged range in the middle of a segment is overwritten by NOOP frames of exactly its
   length, so every other frame keeps its offset (and every event pointer stays valid); a range
   at the end of a segment is cut off, and ``.meta`` is rewritten with the new ``data_end``.
   :class:`~.txnsim.TxnSim` finds the transactions that lost frames; their COMMIT frames are
   neutralised too, so they replay as uncommitted.
3. Unless ``dry_run``: copy each affected file to ``<file>.bak-<unix time>``, write the plan,
   sync, then replay the whole log (read-only) to prove it is consistent; if it is not, the
   originals are put back. Finally ``checkpoint.meta`` is deleted, and so is the backup copy's
   (``backup_checkpoint_dir``, as the meta names it or as given): the next open rebuilds the
   state by a full replay, which no longer sees the removed frames (a backup restored instead
   would point into them).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterable

from ...errors import ChannelIdentityError, CheckpointInvalid, CorruptLogError
from .. import format as fmt
from ..checkpoint import CHECKPOINT_META, read_checkpoint_meta, written_through
from ..crypto import KeyChain
from ..fs import FileSystem, OsFileSystem, write_atomic
from ..incidents import record_incident
from ..replay import replay
from ..segment import FrameOpener, meta_path, read_meta, survey_headers, vanished_segments, written_proof
from .common import ChannelDirs, PhaseProgress, ToolError, offline, read_channel_id, segments_of
from .reports import RepairReport, SegmentPlan
from .scan import Damage, Image, Piece, header_error, noop_frames, open_image, walk, without_torn_tail
from .txnsim import TxnSim

__all__ = ["RepairReport", "SegmentPlan", "plan_repair", "repair_channel"]


def repair_channel(checkpoint_dir: str, data_dirs: list[str], *, dry_run: bool, fs: FileSystem | None = None,
                   progress: PhaseProgress | None = None, backup_dir: str | None = None,
                   keys: KeyChain | None = None) -> RepairReport:
    """Repair the channel's damaged records (see the module docstring); ``dry_run`` changes nothing.

    ``backup_dir``: the channel's ``backup_checkpoint_dir``; by default the one its
    ``checkpoint.meta`` names (a primary that cannot be read names none: give it then).
    ``keys`` opens encrypted segments: a PUT frame that fails authentication is damage."""
    dirs = ChannelDirs.of(checkpoint_dir, data_dirs)
    fs = fs or OsFileSystem()
    keys = keys or KeyChain(None)
    with offline(dirs, "repair"):
        report = plan_repair(dirs, dry_run=dry_run, progress=progress, keys=keys)
        if not dry_run and report.changed:
            _apply_all(fs, dirs, report, backup_dir or _named_backup_dir(dirs.checkpoint_dir), keys)
            _record(fs, dirs, report)
        return report


def _record(fs: FileSystem, dirs: ChannelDirs, report: RepairReport) -> None:
    """Never silent: a repair that replaced damaged records is an incident until acknowledged."""
    damaged = [(plan, d) for plan in report.segments for d in plan.damage]
    if not damaged and not report.dropped:
        return  # only metadata was rebuilt: nothing was cut
    plan, first = damaged[0] if damaged else (report.segments[0], None)
    detail = (f"channel repair replaced {len(damaged)} damaged ranges in {len({p.path for p, _d in damaged})} "
              f"segments; {report.events_lost} events of {len(report.dropped)} transactions lost")
    record_incident(dirs.checkpoint_dir, kind="repair", segment=plan.path, offset=first.offset if first else 0,
                    nbytes=sum(d.length for _p, d in damaged), events=report.events_lost,
                    transactions=len(report.dropped), acknowledged_data=True, detail=detail,
                    quarantine=", ".join(report.backups), fs=fs)


def _named_backup_dir(checkpoint_dir: str) -> str | None:
    try:
        info = read_checkpoint_meta(checkpoint_dir)
    except CheckpointInvalid:
        return None
    return (info.backup_dir or None) if info is not None else None


def plan_repair(dirs: ChannelDirs, *, dry_run: bool = True, progress: PhaseProgress | None = None,
                keys: KeyChain | None = None) -> RepairReport:
    """Scan and plan without changing anything; the caller holds the directory locks."""
    keys = keys or KeyChain(None)
    segments = segments_of(dirs)
    keys.check_segments(OsFileSystem(), segments)
    _check_unique(segments)
    sim = TxnSim()
    plans = []
    proof = written_through(dirs.checkpoint_dir)
    present = {log_id for log_id, _path in segments}
    for path, _proof in vanished_segments(OsFileSystem(), dirs.data_dirs, present, proof):  # recreated empty
        segments.append((int(os.path.basename(path).removeprefix("log-")), path))
    segments.sort()
    lost, later = survey_headers(segments)
    for index, (log_id, path) in enumerate(segments):
        sim.segment(log_id, index)
        newest = index == len(segments) - 1
        damage = lost[index]
        if damage and written_proof(path, log_id, later_written=later[index], checkpoint=proof):
            plans.append(_plan_lost(dirs, segments, log_id, path, newest, damage, sim, keys))
        else:
            plans.append(_plan_segment(log_id, path, newest, sim, keys))
        if progress:
            progress("scan", index + 1, len(segments))
    dropped = sim.finish()
    if sim.unexplained:
        raise ToolError("repair cannot proceed, nothing was changed: " + "; ".join(sim.unexplained))
    return RepairReport(dirs.checkpoint_dir, list(dirs.data_dirs), dry_run, len(segments),
                        [p for p in plans if p.changed], dropped, sim.unattributed)


def _check_unique(segments: list[tuple[int, str]]) -> None:
    for (a, first), (b, second) in zip(segments, segments[1:], strict=False):
        if a == b:
            raise ToolError(f"log id {a} exists twice ({first}, {second}); repair does not choose between "
                            "them: move the wrong one away")


def _new_plan(log_id: int, path: str, newest: bool) -> SegmentPlan:
    try:
        return SegmentPlan(log_id, path, newest, read_meta(path))
    except CorruptLogError:
        return SegmentPlan(log_id, path, newest, None, meta_broken=True)


def _plan_segment(log_id: int, path: str, newest: bool, sim: TxnSim, keys: KeyChain) -> SegmentPlan:
    plan = _new_plan(log_id, path, newest)
    with open_image(path) as (image, size):
        plan.size = size
        head = bytes(image[: fmt.SEGMENT_HEADER_SIZE])
        if newest and (size < fmt.SEGMENT_HEADER_SIZE or head == bytes(fmt.SEGMENT_HEADER_SIZE)):
            return plan  # a segment whose creation never completed: the next open removes it
        problem = header_error(image)
        if problem:
            raise ToolError(f"{path}: the segment header is damaged ({problem}); repair does not rebuild "
                            "headers. Nothing was changed: restore the file from a backup")
        plan.channel_id = fmt.segment_channel_id(head)
        opener = keys.opener(path, head)
        _plan_frames(plan, image, size, sim, opener)
    return plan


def _plan_lost(dirs: ChannelDirs, segments: list[tuple[int, str]], log_id: int, path: str, newest: bool,
               lost: str, sim: TxnSim, keys: KeyChain) -> SegmentPlan:
    """A segment proven written that lost its header: the header is rebuilt (log id from the file
    name, channel id from its .meta or the channel), the frames that are still there are kept,
    and what is missing is reported as lost, as far as its .meta tells. Not for an encrypted
    channel: the header held the salt its frames were encrypted under, and without it they
    cannot be told from plain frames."""
    if keys.keyring is not None:
        raise ToolError(f"{path} {lost}; in an encrypted channel the header held the salt of its frames, so "
                        "repair cannot rebuild it. Nothing was changed: restore the file from a backup")
    plan = _new_plan(log_id, path, newest)
    channel_id = plan.meta.channel_id if plan.meta is not None else _channel_id(dirs, segments)
    created = plan.meta.sealed_unix_ns if plan.meta is not None else time.time_ns()
    plan.channel_id, plan.header = channel_id, fmt.encode_segment_header(log_id, channel_id, created)
    held = (f"its .meta recorded {plan.meta.frames} frames, {plan.meta.data_end} bytes, PUT sequence numbers "
            f"{plan.meta.first_seq}..{plan.meta.last_seq}" if plan.meta is not None
            else "no .meta records what it held: the frames it held, if any, are unknown")
    queued = _checkpoint_refcount(dirs.checkpoint_dir, log_id)
    if queued:
        held += f"; the checkpoint counts {queued} queued or in-flight events in it"
    plan.header_lost = f"{lost}; header rebuilt. {held}"
    if not os.path.exists(path):  # vanished: recreated from its header alone
        _plan_frames(plan, plan.header, fmt.SEGMENT_HEADER_SIZE, sim)
        return plan
    with open_image(path) as (image, size):
        plan.size = size
        if size < fmt.SEGMENT_HEADER_SIZE:
            image, size = plan.header, fmt.SEGMENT_HEADER_SIZE  # nothing after the header survives
        _plan_frames(plan, image, size, sim)
    return plan


def _checkpoint_refcount(checkpoint_dir: str, log_id: int) -> int:
    """Events the checkpoint counts in ``log_id`` (0 when there is no readable checkpoint)."""
    try:
        info = read_checkpoint_meta(checkpoint_dir)
    except (CheckpointInvalid, OSError):
        return 0
    return info.log_refcounts.get(log_id, 0) if info is not None else 0


def _channel_id(dirs: ChannelDirs, segments: list[tuple[int, str]]) -> bytes:
    channel_id, _problem = read_channel_id(dirs.checkpoint_dir)
    if channel_id:
        return uuid.UUID(channel_id).bytes
    for _log_id, other in segments:
        with open(other, "rb") as f:
            head = f.read(fmt.SEGMENT_HEADER_SIZE)
        if header_error(head) is None:
            return fmt.segment_channel_id(head)
    raise ToolError("a segment lost its header and the channel id is recorded nowhere else (no channel.id, no "
                    "intact segment): repair cannot rebuild it. Nothing was changed: restore it from a backup")


def _plan_frames(plan: SegmentPlan, image: Image, size: int, sim: TxnSim,
                 opener: FrameOpener | None = None) -> None:
    log_id, path = plan.log_id, plan.path
    data_end = plan.meta.data_end if plan.meta is not None else (size if plan.meta_broken else None)
    items: Iterable[Piece | Damage] = walk(image, size, log_id, path, data_end=data_end, opener=opener)
    if plan.newest and data_end is None:
        items = without_torn_tail(list(items), image)  # recovery cuts a torn write; not repair's business
    for item in items:
        if isinstance(item, Damage):
            if item.missing and plan.meta is not None:
                item.reason += (f"; its .meta recorded {plan.meta.frames} frames and PUT sequence numbers "
                                f"up to {plan.meta.last_seq}: events of the missing part cannot be listed")
            plan.damage.append(item)
            sim.damage(item, image)
            if not item.missing:  # bytes that are not there do not move the end
                plan.end = item.offset if item.tail else item.end
        else:
            plan.keep(item)
            if sim.frame(log_id, path, item, image):
                plan.commits.append(item)


# -- applying ---------------------------------------------------------------------------------
def _apply_all(fs: FileSystem, dirs: ChannelDirs, report: RepairReport, backup_dir: str | None,
               keys: KeyChain) -> None:
    stamp = int(time.time())
    done: list[tuple[SegmentPlan, str, str | None]] = []
    try:
        for plan in report.segments:
            if not os.path.exists(plan.path):  # a vanished segment: recreated, nothing to back up
                fs.create(plan.path).close()
            backup, meta_backup = _backup(plan.path, stamp), None
            if os.path.exists(meta_path(plan.path)):
                meta_backup = _backup(meta_path(plan.path), stamp)
            fs.sync_dir(os.path.dirname(plan.path))  # the backups are durable before any change
            done.append((plan, backup, meta_backup))
            report.backups += [b for b in (backup, meta_backup) if b]
            _apply(fs, plan)
        for directory in dirs.data_dirs:
            fs.sync_dir(directory)
        report.queue_after = len(replay(fs, list(dirs.data_dirs), keys=keys).queue)
    except (CorruptLogError, ChannelIdentityError, OSError) as err:
        _restore(fs, done)
        raise ToolError(f"repair undone, the original files are back in place: {err}") from err
    # The backup's first: a crash between the two must not leave a backup to restore (it would
    # point into the removed frames) while the primary is gone.
    backup_removed = backup_dir is not None and fs.exists(backup_dir) and _remove_checkpoint(fs, backup_dir)
    report.checkpoint_removed = _remove_checkpoint(fs, dirs.checkpoint_dir) or backup_removed


def _backup(path: str, stamp: int) -> str:
    target, n = f"{path}.bak-{stamp}", 1
    while os.path.exists(target):
        target, n = f"{path}.bak-{stamp}-{n}", n + 1
    _copy_synced(path, target)
    return target


def _copy_synced(src: str, dst: str) -> None:
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _apply(fs: FileSystem, plan: SegmentPlan) -> None:
    now = time.time_ns()
    file = fs.open_write(plan.path)
    try:
        if plan.header:
            file.pwrite(plan.header, 0)
        for offset, length, reason in plan.noops():
            file.pwrite(noop_frames(length, reason, now), offset)
        if plan.cut is not None:
            file.truncate(plan.cut)
        file.sync()
    finally:
        file.close()
    if plan.meta_changes:
        write_atomic(fs, meta_path(plan.path), plan.new_meta().SerializeToString())


def _restore(fs: FileSystem, done: list[tuple[SegmentPlan, str, str | None]]) -> None:
    for plan, backup, meta_backup in done:
        _copy_synced(backup, plan.path)
        if meta_backup is not None:
            _copy_synced(meta_backup, meta_path(plan.path))
        elif fs.exists(meta_path(plan.path)):
            fs.unlink(meta_path(plan.path))


def _remove_checkpoint(fs: FileSystem, checkpoint_dir: str) -> bool:
    path = os.path.join(checkpoint_dir, CHECKPOINT_META)
    if not fs.exists(path):
        return False
    fs.unlink(path)
    fs.sync_dir(checkpoint_dir)
    return True
