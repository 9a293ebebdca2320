"""``channel inspect``: what a channel holds, read without a lock from ``checkpoint.meta``,
``channel.id`` and the segment files. Safe while an agent owns the channel: it only reads
files that are replaced atomically (``checkpoint.meta``, ``.meta``) or only appended to, and a
segment deleted while being listed is skipped.
"""

from __future__ import annotations

import os
import time

from ...errors import CorruptLogError
from ..checkpoint import CheckpointInfo, CheckpointInvalid, read_checkpoint_meta
from ..format import SEGMENT_HEADER_SIZE, FrameError, segment_key
from ..segment import read_meta
from .common import ChannelDirs, lock_state, read_channel_id, segments_of
from .reports import BackupInfo, InspectReport, LogFileInfo

__all__ = ["InspectReport", "LogFileInfo", "inspect_channel"]


def inspect_channel(checkpoint_dir: str, data_dirs: list[str], *, backup_dir: str | None = None) -> InspectReport:
    """Describe a channel, live or stopped, without taking any lock.

    ``backup_dir``: its ``backup_checkpoint_dir``; by default the one ``checkpoint.meta`` names."""
    dirs = ChannelDirs.of(checkpoint_dir, data_dirs)
    channel_id, id_problem = read_channel_id(dirs.checkpoint_dir)
    locked, holder = lock_state(dirs.checkpoint_dir)
    checkpoint, problem = _checkpoint(dirs.checkpoint_dir)
    report = InspectReport(dirs.checkpoint_dir, list(dirs.data_dirs), time.time_ns(), channel_id,
                           locked, holder, checkpoint, problem)
    if id_problem:
        report.problems.append(id_problem)
    backup_dir = backup_dir or (checkpoint.backup_dir if checkpoint is not None else "") or None
    if backup_dir is not None:
        report.backup = _backup(backup_dir, checkpoint)
    if channel_id is None and checkpoint is not None:
        report.channel_id = checkpoint.channel_id
    refcounts = checkpoint.log_refcounts if checkpoint is not None else None
    for log_id, path in segments_of(dirs):
        info = _log_file(log_id, path, refcounts)
        if info is not None:
            report.logs.append(info)
    return report


def _checkpoint(directory: str) -> tuple[CheckpointInfo | None, str | None]:
    try:
        return read_checkpoint_meta(directory), None
    except CheckpointInvalid as err:
        return None, str(err)


def _backup(directory: str, checkpoint: CheckpointInfo | None) -> BackupInfo:
    """What the backup directory holds: read like checkpoint.meta (atomically replaced, no lock)."""
    try:
        info = read_checkpoint_meta(directory)
    except CheckpointInvalid as err:
        return BackupInfo(directory, None, None, False, f"backup not usable: {err}")
    except OSError as err:
        return BackupInfo(directory, None, None, False, f"backup cannot be read: {err}")
    if info is None:
        return BackupInfo(directory, None, None, False, "no backup copy yet")
    current = checkpoint is not None and info.checkpoint_id == checkpoint.checkpoint_id
    return BackupInfo(directory, info.checkpoint_id, info.written_unix_ns, current)


def _log_file(log_id: int, path: str, refcounts: dict[int, int] | None) -> LogFileInfo | None:
    try:
        size = os.stat(path).st_size
        meta = read_meta(path)
    except FileNotFoundError:
        return None  # deleted by a checkpoint while we looked
    except CorruptLogError as err:
        return LogFileInfo(log_id, path, size, False, None, None, None, None,
                           _refcount(refcounts, log_id), problem=f".meta unreadable: {err}")
    refcount = _refcount(refcounts, log_id)
    key_id = _key_id(path)
    if meta is None:
        return LogFileInfo(log_id, path, size, False, None, None, None, None, refcount, key_id=key_id)
    return LogFileInfo(log_id, path, size, True, meta.data_end, meta.frames, meta.first_seq or None,
                       meta.last_seq or None, refcount, key_id=key_id)


def _key_id(path: str) -> int | None:
    """The key id in the segment's header (None: plain, or a header that does not decode)."""
    try:
        with open(path, "rb") as f:
            key = segment_key(f.read(SEGMENT_HEADER_SIZE))
    except (OSError, FrameError):
        return None
    return key.key_id if key else None


def _refcount(refcounts: dict[int, int] | None, log_id: int) -> int | None:
    return None if refcounts is None else refcounts.get(log_id, 0)
