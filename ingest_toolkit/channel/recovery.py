"""Opening a channel: identity, checkpoint, replay, and making the newest segment final.

Recovery never writes frames. It may cut the newest segment back to its last valid frame (a torn
write, or a damaged tail with ``recovery_mode = "set_aside"``: never in silence, see
:mod:`.incidents`), seal it, and remove a segment whose creation never completed.

Where the state starts (``Recovered.source``), in order of preference:

1. ``"checkpoint"``: the primary ``checkpoint.meta`` loads, validates and lies within the logs;
2. ``"backup"``: the primary is missing, partial, damaged, or ahead of the logs, and the backup
   copy (``backup_checkpoint_dir``) loads, validates, lies within the logs and is not older than
   them (:func:`~.backup.usable_backup`); the logs after it are replayed;
3. ``"full-replay"``: neither copy is usable (or none exists): every segment is replayed.

A backup that cannot be used is reported (``Recovered.backup.problem``) and skipped, never trusted.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass

from ..errors import ChannelIdentityError, CheckpointInvalid, CorruptLogError, SegmentLostError
from . import format as fmt
from .backup import BackupState, ahead_of_logs, missing_segments, usable_backup
from .checkpoint import Checkpoint, load_checkpoint, written_through
from .checkpointer import deletion_floor
from .config import ChannelConfig
from .crypto import KeyChain
from .fs import FileSystem, read_file, write_atomic
from .incidents import record_incident
from .proto import channel_pb2 as pb
from .replay import ProgressFn, ReplayResult, SegmentInfo, TailCut, replay
from .segment import list_segments, meta_path, read_meta, vanished_segments
from .tags import TagStore

__all__ = ["CHANNEL_ID_FILE", "QUARANTINE_DIR", "Recovered", "recover"]

log = logging.getLogger(__name__)

CHANNEL_ID_FILE = "channel.id"
QUARANTINE_DIR = "quarantine"  # in a data dir: the tails recovery cut, as they were


@dataclass(slots=True)
class Recovered:
    channel_id: bytes
    result: ReplayResult
    checkpoint: Checkpoint | None
    checkpoint_problem: str | None  # why the checkpoint was not used, if one existed
    next_log_id: int
    marks: list[tuple[int, int]]  # (cumulative put count, commit unix ns), see CommitMark
    last_checkpoint_id: int  # never reused, even when the checkpoint could not be loaded
    source: str = "full-replay"  # "checkpoint", "backup" or "full-replay": where the state started
    backup: BackupState | None = None  # the backup copy as found (None: no backup_checkpoint_dir)


def recover(fs: FileSystem, config: ChannelConfig, progress: ProgressFn | None,
            keys: KeyChain | None = None) -> Recovered:
    keys = keys or KeyChain(None)
    keys.check_segments(fs, sorted(seg for d in config.data_dirs for seg in list_segments(fs, d)))
    id_path = os.path.join(config.checkpoint_dir, CHANNEL_ID_FILE)
    stored = _read_channel_id(fs, id_path)
    present = {log_id: path for d in config.data_dirs for log_id, path in list_segments(fs, d)}
    start, problem = _load_start(fs, config.checkpoint_dir, stored, present)
    source = "checkpoint" if start is not None else "full-replay"
    backup = None
    if config.backup_checkpoint_dir is not None:
        backup, restored = _load_backup(fs, config.backup_checkpoint_dir, stored, present)
        if start is None and restored is not None:
            start, source = restored, "backup"
            log.warning("restoring checkpoint %d from the backup in %s (the primary: %s); replaying the logs "
                        "after it", restored.meta.checkpoint_id, config.backup_checkpoint_dir,
                        problem or "checkpoint.meta is missing")
    if start is None and problem:
        log.warning("no usable checkpoint, rebuilding the state by a full replay of the logs: %s", problem)
    tags = TagStore(config.tag_window, int(config.tag_retention_seconds * 1e9))
    proof = written_through(config.checkpoint_dir, fs)
    mode = config.recovery_mode
    try:
        result = replay(fs, config.data_dirs, start=start, progress=progress, tags=tags, checkpoint=proof, keys=keys,
                        recovery_mode=mode)
    except CheckpointInvalid as err:  # the checkpoint loaded, but the frames after it contradict it
        if start is None:
            raise
        log.warning("checkpoint not usable, rebuilding the state by a full replay of the logs: %s", err)
        start, problem, source = None, str(err), "full-replay"
        tags = TagStore(config.tag_window, int(config.tag_retention_seconds * 1e9))
        result = replay(fs, config.data_dirs, progress=progress, tags=tags, checkpoint=proof, keys=keys,
                        recovery_mode=mode)
    found = result.channel_id or (start.meta.channel_id if start else None)
    if start is not None and result.channel_id and result.channel_id != start.meta.channel_id:
        raise ChannelIdentityError(
            f"checkpoint.meta in {config.checkpoint_dir} and the logs in {config.data_dirs} belong to "
            "different channels: point checkpoint_dir and data_dirs at the directories of one channel")
    channel_id = _identity(fs, id_path, stored, found, config)
    paths = {info.log_id: info.path for info in result.segments}
    _check_referenced(result, paths, config)  # before changing anything: the error promises that
    _check_orphan_metas(fs, config.data_dirs, paths, proof)
    _remove_incomplete(fs, config.data_dirs, paths)
    if result.cut is not None:
        _record_cut(fs, config, result.cut)  # before the cut: a crash in between finds the same tail again
    if result.segments and read_meta(result.segments[-1].path, fs) is None:
        _seal_existing(fs, result.segments[-1], channel_id)
    if len(result.queue) > config.capacity:
        log.warning("%d events are queued but capacity is now %d: puts are refused until the channel "
                    "is drained below capacity", len(result.queue), config.capacity)
    last_id = max(start.meta.checkpoint_id if start else 0, _highest_checkpoint_file_id(fs, config.checkpoint_dir),
                  backup.checkpoint_id if backup else 0)
    return Recovered(channel_id, result, start, problem, _next_log_id(fs, config.data_dirs),
                     _marks(fs, start, result), last_id, source, backup)


def _record_cut(fs: FileSystem, config: ChannelConfig, cut: TailCut) -> None:
    """Never silent: a cut that drops events, and any damaged tail (the events in its damaged frames
    cannot be counted), is copied aside and recorded as an incident (logged at ERROR) before it is
    made; a torn write that drops none (a torn TAKE or ROLLBACK frame) is logged."""
    if cut.torn and not cut.events:
        log.warning("%s; nothing is lost (no put lacks its COMMIT), the tail is cut", cut.describe())
        return
    copy = _set_aside(fs, cut)
    acknowledged = not cut.torn or config.durability == "page_cache"
    incident = record_incident(config.checkpoint_dir, kind="torn_tail" if cut.torn else "damaged_tail",
                               segment=cut.path, offset=cut.offset, nbytes=cut.end - cut.offset, events=cut.events,
                               transactions=cut.transactions, acknowledged_data=acknowledged, detail=cut.describe(),
                               quarantine=copy, fs=fs)
    log.error("%s; recovery_mode = %r cuts it: %s. Until an operator acknowledges it ('ingest-toolkit channel "
              "acknowledge --incident %d'), the channel's status counts it and its checks fail", incident.summary(),
              config.recovery_mode, "its commits were never acknowledged" if not acknowledged
              else "acknowledged commits may be among them", incident.id)


_COPY_CHUNK = 4 << 20


def _set_aside(fs: FileSystem, cut: TailCut) -> str:
    """Copy the bytes of ``cut`` to ``<data dir>/quarantine/`` (synced, atomically named); its path."""
    directory = os.path.join(os.path.dirname(cut.path), QUARANTINE_DIR)
    fs.makedirs(directory)
    target = os.path.join(directory, f"{os.path.basename(cut.path)}.at-{cut.offset}.tail")
    temporary = f"{target}.tmp"
    source, out = fs.open_read(cut.path), fs.create(temporary)
    try:
        for at in range(cut.offset, cut.end, _COPY_CHUNK):
            out.pwrite(source.pread(min(_COPY_CHUNK, cut.end - at), at), at - cut.offset)
        out.sync()
    finally:
        source.close()
        out.close()
    fs.rename(temporary, target)
    fs.sync_dir(directory)
    return target


def _highest_checkpoint_file_id(fs: FileSystem, directory: str) -> int:
    """Largest id among ``checkpoint-<id>.*`` files, so that ids keep increasing for readers."""
    ids = [0]
    for name in fs.listdir(directory):
        stem = name.removeprefix("checkpoint-").split(".", 1)[0]
        if name.startswith("checkpoint-") and stem.isdigit():
            ids.append(int(stem))
    return max(ids)


def _load_start(fs: FileSystem, directory: str, channel_id: bytes | None,
                present: dict[int, str]) -> tuple[Checkpoint | None, str | None]:
    """The primary checkpoint, or None and why it cannot be used (None, None: there is none)."""
    try:
        start = load_checkpoint(directory, channel_id, fs)
    except CheckpointInvalid as err:
        log.warning("checkpoint not usable: %s", err)
        return None, str(err)
    # Ahead of the logs, it cannot be used; unless events point into missing segments: that is
    # lost data, which the replay's checks refuse (no other copy could bring those events back).
    ahead = ahead_of_logs(fs, start, present) if start is not None else None
    if start is not None and ahead is not None and missing_segments(start, present) in ([], [start.meta.log_id]):
        problem = f"{os.path.join(directory, 'checkpoint.meta')} (#{start.meta.checkpoint_id}) {ahead}"
        log.warning("checkpoint not usable: %s", problem)
        return None, problem
    return start, None


def _load_backup(fs: FileSystem, directory: str, channel_id: bytes | None,
                 present: dict[int, str]) -> tuple[BackupState, Checkpoint | None]:
    """What the backup directory holds, and the checkpoint if it could stand in for the primary."""
    cp, problem = usable_backup(fs, directory, channel_id, present)
    if cp is None:
        if problem:
            log.warning("%s; it is skipped (the next checkpoint writes a new backup)", problem)
        return BackupState(problem=problem), None
    floor = deletion_floor(cp.meta.log_id, dict(cp.meta.log_refcounts), cp.puts)
    return BackupState(checkpoint_id=cp.meta.checkpoint_id, floor=floor), cp


def _identity(fs: FileSystem, path: str, stored: bytes | None, found: bytes | None,
              config: ChannelConfig) -> bytes:
    if stored is not None and found is not None and stored != found:
        raise ChannelIdentityError(
            f"{path} names channel {stored.hex()} but the logs in {config.data_dirs} "
            f"belong to channel {found.hex()}: the directories of two channels are mixed. Point "
            "checkpoint_dir and data_dirs at the directories of one channel; if the logs are the "
            "right ones and channel.id was copied by mistake, delete channel.id to adopt the logs' id")
    identity = stored or found or uuid.uuid4().bytes
    if stored is None:
        write_atomic(fs, path, f"{uuid.UUID(bytes=identity)}\n".encode())
    return identity


def _remove_incomplete(fs: FileSystem, data_dirs: list[str], known: dict[int, str]) -> None:
    """Remove a segment whose creation never completed, and the .meta of deleted segments
    (a crash between deleting ``log-<id>`` and its ``.meta`` leaves the latter behind)."""
    for directory in data_dirs:
        for log_id, path in list_segments(fs, directory):
            if log_id not in known:  # replay proved nothing wrote it (else SegmentLostError)
                log.warning("removing %s: a segment whose creation did not complete", path)
                fs.unlink(path)
                fs.sync_dir(directory)  # gone before a later segment exists: that would make it proof
        for name in fs.listdir(directory):
            stem = name.removeprefix("log-").removesuffix(".meta")
            if name.startswith("log-") and name.endswith(".meta") and stem.isdigit() and int(stem) not in known:
                log.info("removing %s: metadata of a segment deleted before a crash", name)
                fs.unlink(os.path.join(directory, name))


def _check_referenced(result: ReplayResult, paths: dict[int, str], config: ChannelConfig) -> None:
    for log_id, count in sorted(result.refcounts.items()):
        if count and log_id not in paths:
            raise CorruptLogError(
                path=os.path.join(config.data_dirs[log_id % len(config.data_dirs)], f"log-{log_id}"),
                offset=0, reason=f"missing: {count} queued events point into it. Restore the file from "
                                 "a backup; nothing was changed")


def _check_orphan_metas(fs: FileSystem, data_dirs: list[str], known: dict[int, str],
                        checkpoint: tuple[int, str]) -> None:
    for path, proof in vanished_segments(fs, data_dirs, set(known), checkpoint):
        raise SegmentLostError(path=path, damage="is missing", proof=proof)


def _next_log_id(fs: FileSystem, data_dirs: list[str]) -> int:
    ids = [0]
    for directory in data_dirs:
        for name in fs.listdir(directory):
            stem = name.removeprefix("log-").removesuffix(".meta")
            if name.startswith("log-") and stem.isdigit():
                ids.append(int(stem))
    return max(ids) + 1


def _marks(fs: FileSystem, start: Checkpoint | None, result: ReplayResult) -> list[tuple[int, int]]:
    """Commit-time marks; events replayed from the log get a time no later than their commit."""
    marks = list(start.marks) if start else []
    if result.puts_committed > (marks[-1][0] if marks else 0):
        since = start.meta.written_unix_ns if start else _head_segment_created(fs, result)
        marks.append((result.puts_committed, since))
    return marks


def _head_segment_created(fs: FileSystem, result: ReplayResult) -> int:
    if not len(result.queue):
        return time.time_ns()
    head_log = fmt.pointer_log_id(result.queue.peek(1)[0])
    path = next(info.path for info in result.segments if info.log_id == head_log)
    head = read_file(fs, path, fmt.SEGMENT_HEADER_SIZE) or b""
    return fmt.decode_segment_header(head[: fmt.SEGMENT_HEADER_SIZE])[2]


def _seal_existing(fs: FileSystem, info: SegmentInfo, channel_id: bytes) -> None:
    file = fs.open_write(info.path)
    try:
        file.truncate(info.data_end)
        file.sync()
    finally:
        file.close()
    meta = pb.SegmentMeta(format_version=fmt.FORMAT_VERSION, log_id=info.log_id,
                          channel_id=channel_id, data_end=info.data_end, frames=info.frames,
                          first_seq=info.first_seq, last_seq=info.last_seq,
                          sealed_unix_ns=time.time_ns())
    write_atomic(fs, meta_path(info.path), meta.SerializeToString())


def _read_channel_id(fs: FileSystem, path: str) -> bytes | None:
    data = read_file(fs, path, 4096)
    if data is None:
        return None
    try:
        return uuid.UUID(data.decode("ascii").strip()).bytes
    except ValueError as err:
        raise ChannelIdentityError(f"{path} does not hold a channel id ({err}); restore it from a "
                                   "backup or delete it to adopt the id recorded in the logs") from None
