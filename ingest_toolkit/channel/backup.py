"""The backup copy of the checkpoint (``backup_checkpoint_dir``, meant for another disk).

After a checkpoint is committed, :func:`write_backup` copies it into the backup directory with
the checkpoint's own protocol, so the backup directory is itself a checkpoint directory that
:func:`~.checkpoint.load_checkpoint` reads:

1. each data file (``checkpoint-<id>.queue``, ``.inflight``) is read back from the primary in
   chunks, its size and CRC32C checked against the meta being copied, written to
   ``<name>.tmp`` in the backup directory, synced, and renamed to its name;
2. the backup directory is synced;
3. ``checkpoint.meta`` is replaced atomically (temporary file, fsync, rename, directory fsync).
   **This is the backup's commit point and its completeness marker**: the meta names the data
   files with their sizes and checksums, and it is written only once they are durable. A crash
   before it leaves the previous backup complete (its files have other names and are removed
   only after the new meta); a crash after it leaves the new one.
4. files of older backups are removed.

Reads and writes are in chunks through ``os.pread``/``os.pwrite`` and CRC32C, all of which
release the GIL, and the caller holds no channel lock: puts and takes go on meanwhile.

:func:`usable_backup` decides at open whether a backup can stand in for the primary: it must
load and validate like a primary, belong to this channel, lie within the logs (not ahead of
them) and not be older than them (every segment it needs must still exist). Anything else is
reported and the backup is skipped, never trusted.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Final

from crc32c import crc32c

from ..errors import ChannelIdentityError, CheckpointInvalid, CorruptLogError
from . import format as fmt
from .checkpoint import CHECKPOINT_META, SYNC_EVERY, Checkpoint, encode_meta, load_checkpoint, remove_stale_files
from .fs import File, FileSystem, write_atomic
from .proto import channel_pb2 as pb
from .segment import read_meta

__all__ = ["BackupState", "ahead_of_logs", "missing_segments", "usable_backup", "write_backup"]

log = logging.getLogger(__name__)

_CHUNK: Final = 4 << 20


@dataclass(slots=True)
class BackupState:
    """What the channel knows about its backup copy."""

    checkpoint_id: int = 0  # the newest complete backup, 0: none usable
    floor: int | None = None  # segments below it are not needed by the backup (None: no backup to keep)
    problem: str | None = None  # why the backup found at open, or the last copy, could not be used
    failures: int = 0  # backup copies that failed since open


def write_backup(fs: FileSystem, primary_dir: str, backup_dir: str, meta: pb.CheckpointMeta) -> bytes:
    """Copy the checkpoint ``meta`` describes from ``primary_dir`` into ``backup_dir``.

    ``meta`` is written as the backup's ``checkpoint.meta`` (its ``backup_checkpoint_id`` set to its
    own id); returns those bytes. Raises OSError or CheckpointInvalid (the primary changed or is
    damaged: nothing unverified is ever copied); the previous backup then stays complete.
    """
    fs.makedirs(backup_dir)
    for name, size, crc in ((meta.queue_file, meta.queue_bytes, meta.queue_crc32c),
                            (meta.inflight_file, meta.inflight_bytes, meta.inflight_crc32c)):
        _copy_verified(fs, os.path.join(primary_dir, name), os.path.join(backup_dir, name), size, crc)
    fs.sync_dir(backup_dir)
    copy = pb.CheckpointMeta()
    copy.CopyFrom(meta)
    copy.backup_checkpoint_id = meta.checkpoint_id
    data = encode_meta(copy)
    write_atomic(fs, os.path.join(backup_dir, CHECKPOINT_META), data)  # the commit point
    try:
        remove_stale_files(fs, backup_dir, keep=(meta.queue_file, meta.inflight_file))
    except OSError as err:  # the backup is complete; leftovers are removed next time
        log.warning("backup checkpoint %d is complete but older files in %s were not removed: %s",
                    meta.checkpoint_id, backup_dir, err)
    return data


def _copy_verified(fs: FileSystem, src: str, dst: str, size: int, crc: int) -> None:
    tmp = f"{dst}.tmp"
    if fs.exists(tmp):
        fs.unlink(tmp)  # left by a copy that crashed
    source = fs.open_read(src)
    try:
        if (actual := source.size()) != size:
            raise CheckpointInvalid(src, f"{actual} bytes, its checkpoint.meta says {size}: not copied to the backup")
        out = fs.create(tmp)
        try:
            running = _copy(source, out, size, src)
            if running != crc:
                raise CheckpointInvalid(src, "checksum mismatch while copying it to the backup: the primary "
                                             "checkpoint is damaged; the backup keeps its previous copy")
            out.sync()
        finally:
            out.close()
    finally:
        source.close()
    fs.rename(tmp, dst)


def _copy(source: File, out: File, size: int, src: str) -> int:
    """Copy ``size`` bytes in chunks; returns their CRC32C."""
    running = offset = unsynced = 0
    while offset < size:
        chunk = source.pread(min(_CHUNK, size - offset), offset)
        if not chunk:
            raise CheckpointInvalid(src, f"ends at byte {offset} while being copied to the backup")
        running = crc32c(chunk, running)
        out.pwrite(chunk, offset)
        offset += len(chunk)
        unsynced += len(chunk)
        if unsynced >= SYNC_EVERY:  # in steps, so that commits' syncs never wait behind all of it
            out.sync()
            unsynced = 0
    return running


# -- opening ------------------------------------------------------------------------------
def ahead_of_logs(fs: FileSystem, cp: Checkpoint, segments: dict[int, str]) -> str | None:
    """Why ``cp`` lies beyond the end of the logs (``segments``: log id -> path), or None.

    A checkpoint names its log position only after that segment was created and the position
    written; so a position in a segment that does not exist (above the newest) or beyond the
    bytes of its segment is a checkpoint the logs cannot back."""
    log_id, offset = cp.meta.log_id, cp.meta.log_offset
    newest = max(segments, default=0)
    if log_id > newest:
        return (f"is ahead of the logs: it resumes at log-{log_id} but the newest segment is "
                f"{f'log-{newest}' if newest else 'none (no segment exists)'}")
    path = segments.get(log_id)
    if path is None:
        return None  # a deleted or lost segment below the newest: the replay's checks report it
    try:
        meta = read_meta(path, fs)  # an I/O error fails the open, as every read of the open does
    except CorruptLogError:  # the replay reports it
        return None
    if meta is not None:
        size = meta.data_end
    else:
        file = fs.open_read(path)
        try:
            size = file.size()
        finally:
            file.close()
    if offset > size:
        return f"is ahead of the logs: it resumes at log-{log_id} offset {offset}, beyond the segment's {size} bytes"
    return None


def missing_segments(cp: Checkpoint, segments: dict[int, str]) -> list[int]:
    """Segments ``cp`` needs that do not exist: its position's and every one an event points into.
    (Segments are deleted from the oldest up, so when these exist, every later one does too.)"""
    needed = {cp.meta.log_id, *(lid for lid, n in cp.meta.log_refcounts.items() if n)}
    needed |= {fmt.pointer_log_id(p[0]) for _txn, p in cp.puts if p}
    return sorted(lid for lid in needed if lid not in segments)


def usable_backup(fs: FileSystem, backup_dir: str, channel_id: bytes | None,
                  segments: dict[int, str]) -> tuple[Checkpoint | None, str | None]:
    """The backup if it can stand in for the primary, else None and why (None, None: no backup)."""
    try:
        cp = load_checkpoint(backup_dir, channel_id, fs)
    except (CheckpointInvalid, ChannelIdentityError) as err:
        return None, f"backup checkpoint not usable: {err}"
    except OSError as err:
        return None, f"backup checkpoint in {backup_dir} cannot be read ({err})"
    if cp is None:
        return None, None
    path = os.path.join(backup_dir, CHECKPOINT_META)
    ahead = ahead_of_logs(fs, cp, segments)
    if ahead is not None:
        return None, f"backup checkpoint {path} (#{cp.meta.checkpoint_id}) {ahead}"
    missing = missing_segments(cp, segments)
    if missing:
        return None, (f"backup checkpoint {path} (#{cp.meta.checkpoint_id}) is older than the logs: it needs "
                      f"log-{missing[0]}, which no longer exists")
    return cp, None
