"""Checkpoints: a snapshot of the queue that bounds replay, and the public ``checkpoint.meta``.

A checkpoint is three files in the checkpoint directory:

* ``checkpoint-<id>.queue``: 32-byte header (magic, version, checkpoint id, count) and the queue's
  pointers as little-endian u64, head first;
* ``checkpoint-<id>.inflight``: protobuf ``Inflight`` (open transactions, commit-time marks, the
  remembered commit tags);
* ``checkpoint.meta``: protobuf ``CheckpointMeta`` naming both files with their sizes and CRC32C.

The data files are written and synced first; replacing ``checkpoint.meta`` atomically is the
commit point; files of older checkpoints are removed after it. A crash at any step therefore
leaves a complete previous or new checkpoint, never a half-written one.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from array import array
from dataclasses import dataclass, field
from typing import Final

from crc32c import crc32c
from google.protobuf.message import DecodeError

from ..errors import ChannelIdentityError, CheckpointInvalid
from . import format as fmt
from .fs import FileSystem, OsFileSystem, read_file, write_atomic
from .pointer_queue import FrozenPointers
from .proto import channel_pb2 as pb
from .tags import TagRecord
from .txnframes import count_refs

__all__ = ["CHECKPOINT_META", "Checkpoint", "CheckpointInfo", "CheckpointInvalid", "Snapshot",
           "decode_meta", "encode_meta", "load_checkpoint", "read_checkpoint_meta", "remove_stale_files",
           "write_checkpoint",
           "written_through"]

CHECKPOINT_META: Final = "checkpoint.meta"
CHECKPOINT_VERSION: Final = 1
_META_MAGIC: Final = b"ITKCKPT\n"
_META_HEADER: Final = struct.Struct("<8sI")  # magic, length of the protobuf that follows
_QUEUE_MAGIC: Final = b"ITKQUEUE"
_QUEUE_HEADER: Final = struct.Struct("<8sIIQQ")  # magic, version, reserved, checkpoint id, count


_MAX_POINTER: Final = 1 << 63  # log ids are below 2^31 in practice; a pointer is (log id << 32) | offset


@dataclass(slots=True)
class Snapshot:
    """The channel state at log position ``(log_id, log_offset)``, copied under the lock."""

    checkpoint_id: int
    queue: FrozenPointers  # lent by the channel's queue: released once the queue file is written
    takes: list[tuple[int, list[int]]]
    puts: list[tuple[int, list[int]]]
    refcounts: dict[int, int]
    log_id: int
    log_offset: int
    last_seq: int
    next_txn_id: int
    marks: list[tuple[int, int]]
    puts_committed: int
    takes_committed: int
    capacity: int
    interval_ms: int
    log_bytes: int = 0
    tags: list[TagRecord] = field(default_factory=list)  # remembered commit tags, oldest first


@dataclass(slots=True)
class Checkpoint:
    """A loaded, validated checkpoint."""

    meta: pb.CheckpointMeta
    queue: array[int]
    takes: list[tuple[int, list[int]]] = field(default_factory=list)
    puts: list[tuple[int, list[int]]] = field(default_factory=list)
    marks: list[tuple[int, int]] = field(default_factory=list)
    tags: list[TagRecord] = field(default_factory=list)


def _file_names(checkpoint_id: int) -> tuple[str, str]:
    return f"checkpoint-{checkpoint_id}.queue", f"checkpoint-{checkpoint_id}.inflight"


def write_checkpoint(fs: FileSystem, directory: str, channel_id: bytes, snap: Snapshot, *,
                     backup_checkpoint_id: int = 0, backup_dir: str = "") -> pb.CheckpointMeta:
    """Write the checkpoint's files and commit it by replacing ``checkpoint.meta``.

    ``backup_checkpoint_id``, ``backup_dir``: the newest complete backup copy (0: none) and where
    backups go, recorded in the meta for its readers."""
    queue_name, inflight_name = _file_names(snap.checkpoint_id)
    inflight_data = _encode_inflight(snap).SerializeToString()
    try:
        queue_parts = _encode_queue(snap.checkpoint_id, snap.queue)
        _write_synced(fs, os.path.join(directory, queue_name), *queue_parts)
        queue_size = sum(len(part) for part in queue_parts)
        queue_crc = 0
        for part in queue_parts:
            queue_crc = crc32c(part, queue_crc)
    finally:
        snap.queue.release()  # the channel may write those slots again
    _write_synced(fs, os.path.join(directory, inflight_name), inflight_data)
    fs.sync_dir(directory)
    meta = _meta(snap, channel_id, queue_name, queue_size, queue_crc, inflight_name, inflight_data)
    meta.backup_checkpoint_id, meta.backup_dir = backup_checkpoint_id, backup_dir
    write_atomic(fs, os.path.join(directory, CHECKPOINT_META), encode_meta(meta))
    remove_stale_files(fs, directory, keep=(queue_name, inflight_name))
    return meta


def _meta(snap: Snapshot, channel_id: bytes, queue_name: str, queue_size: int, queue_crc: int,
          inflight_name: str, inflight_data: bytes) -> pb.CheckpointMeta:
    takes = sum(len(p) for _, p in snap.takes)
    # Events of open takes left the head before the queued ones: the oldest is the first taken.
    head = snap.takes[0][1][0] if snap.takes else snap.queue.head()
    oldest = next((ns for end, ns in snap.marks if end > snap.takes_committed), 0)
    return pb.CheckpointMeta(
        format_version=CHECKPOINT_VERSION, channel_id=channel_id, checkpoint_id=snap.checkpoint_id,
        last_seq=snap.last_seq, queue_size=len(snap.queue) + takes, queue_head=head,
        log_refcounts=snap.refcounts, written_unix_ns=time.time_ns(), log_id=snap.log_id,
        log_offset=snap.log_offset, next_txn_id=snap.next_txn_id,
        queue_file=queue_name, queue_bytes=queue_size, queue_crc32c=queue_crc,
        inflight_file=inflight_name, inflight_bytes=len(inflight_data),
        inflight_crc32c=crc32c(inflight_data), inflight_takes=takes,
        inflight_puts=sum(len(p) for _, p in snap.puts), capacity=snap.capacity,
        checkpoint_interval_ms=snap.interval_ms, oldest_commit_unix_ns=oldest,
        puts_committed=snap.puts_committed, takes_committed=snap.takes_committed,
        log_bytes=snap.log_bytes)


def encode_meta(meta: pb.CheckpointMeta) -> bytes:
    """``checkpoint.meta`` bytes: magic, length, the protobuf, CRC32C of all before it."""
    body = _META_HEADER.pack(_META_MAGIC, meta.ByteSize()) + meta.SerializeToString()
    return body + struct.pack("<I", crc32c(body))


def _encode_queue(checkpoint_id: int, queue: FrozenPointers) -> list[bytes | memoryview]:
    """Header and body of the queue file. The body is views of the channel's own ring buffer,
    lent to the checkpoint (``PointerQueue.freeze``), not a copy: copying 80 MB of a 10M-event
    queue under the channel lock stalled puts for 40-60 ms."""
    header = _QUEUE_HEADER.pack(_QUEUE_MAGIC, CHECKPOINT_VERSION, 0, checkpoint_id, len(queue))
    parts = queue.parts()
    if sys.byteorder != "little":
        swapped = array("Q", b"".join(parts))
        swapped.byteswap()
        parts = [memoryview(swapped).cast("B")]
    return [header, *parts]


def _encode_inflight(snap: Snapshot) -> pb.Inflight:
    return pb.Inflight(
        checkpoint_id=snap.checkpoint_id,
        takes=[pb.InflightTxn(txn_id=t, pointers=p) for t, p in snap.takes],
        puts=[pb.InflightTxn(txn_id=t, pointers=p) for t, p in snap.puts],
        commit_marks=[pb.CommitMark(end=e, unix_ns=ns) for e, ns in snap.marks],
        tags=[pb.CommitTag(tag=t.tag, first_seq=t.first_seq, count=t.count, commit_unix_ns=t.commit_unix_ns)
              for t in snap.tags])


SYNC_EVERY: Final = 4 << 20
"""Large checkpoint files are synced every this many bytes while written, not only at the end:
one flush of 80 MB makes the commits' fdatasyncs of the log on the same disk wait behind it."""


def _write_synced(fs: FileSystem, path: str, *parts: bytes | memoryview) -> None:
    if fs.exists(path):
        fs.unlink(path)  # left by a checkpoint that crashed before its meta was written
    f = fs.create(path)
    try:
        offset = unsynced = 0
        for part in parts:
            view = memoryview(part)
            for start in range(0, len(view), SYNC_EVERY):
                piece = view[start:start + SYNC_EVERY]
                f.pwrite(piece, offset)
                offset += len(piece)
                unsynced += len(piece)
                if unsynced >= SYNC_EVERY:
                    f.sync()
                    unsynced = 0
        f.sync()
    finally:
        f.close()


def remove_stale_files(fs: FileSystem, directory: str, keep: tuple[str, ...]) -> None:
    """Remove every ``checkpoint-*`` file of ``directory`` but ``keep`` (older checkpoints, and
    ``.tmp`` files of copies that crashed)."""
    removed = False
    for name in fs.listdir(directory):
        if name.startswith("checkpoint-") and name not in keep:
            fs.unlink(os.path.join(directory, name))
            removed = True
    if removed:
        fs.sync_dir(directory)


# -- loading ------------------------------------------------------------------------------
def load_checkpoint(directory: str, channel_id: bytes | None, fs: FileSystem | None = None, *,
                    check_counts: bool = True) -> Checkpoint | None:
    """Load and validate the checkpoint; None when there is none.

    Raises CheckpointInvalid when it exists but cannot be trusted, and ChannelIdentityError when
    it belongs to another channel. ``check_counts=False`` skips the recount of its reference
    counts (``channel verify`` recounts them itself and reports each difference).
    """
    meta_file = os.path.join(directory, CHECKPOINT_META)
    fs = fs or OsFileSystem()
    meta = _read_meta(fs, meta_file)
    if meta is None:
        return None
    if channel_id is not None and meta.channel_id != channel_id:
        raise ChannelIdentityError(
            f"{meta_file} belongs to channel {meta.channel_id.hex()}, not {channel_id.hex()}: "
            "the checkpoint directory of another channel is in use. Point checkpoint_dir at this "
            "channel's directory, or delete checkpoint.meta to rebuild it by a full replay")
    queue = _load_queue(fs, os.path.join(directory, _file_name(meta.queue_file, meta_file)), meta)
    inflight = _load_inflight(fs, os.path.join(directory, _file_name(meta.inflight_file, meta_file)), meta)
    if check_counts:
        _check_counts(meta_file, meta, queue, inflight)
    return Checkpoint(meta, queue,
                      takes=[(t.txn_id, list(t.pointers)) for t in inflight.takes],
                      puts=[(t.txn_id, list(t.pointers)) for t in inflight.puts],
                      marks=[(m.end, m.unix_ns) for m in inflight.commit_marks],
                      tags=[TagRecord(t.tag, t.first_seq, t.count, t.commit_unix_ns) for t in inflight.tags])


def _check_counts(path: str, meta: pb.CheckpointMeta, queue: array[int], inflight: pb.Inflight) -> None:
    """The counts of ``checkpoint.meta`` must be those of the queue and open takes it describes:
    the reference counts decide which segments may be deleted, so a count the queue does not
    support (a field lost, a flipped bit under a valid CRC, a bug) must never be trusted. Raises
    CheckpointInvalid: recovery then falls back to the backup copy or a full replay, which
    recounts them."""
    held = array("Q", queue)
    for txn in inflight.takes:
        held.extend(txn.pointers)
    taken = len(held) - len(queue)
    if meta.inflight_takes != taken or meta.queue_size != len(held):
        raise CheckpointInvalid(path, f"says {meta.queue_size} events queued and {meta.inflight_takes} in open takes, "
                                      f"but its queue and inflight files hold {len(queue)} and {taken}")
    stored = {log_id: n for log_id, n in sorted(meta.log_refcounts.items()) if n}
    counted = count_refs(held)
    if stored != counted:
        wrong = min(k for k in stored.keys() | counted.keys() if stored.get(k, 0) != counted.get(k, 0))
        raise CheckpointInvalid(path, f"its log reference counts do not match the queue they describe (log {wrong}: "
                                      f"{stored.get(wrong, 0)} recorded, {counted.get(wrong, 0)} queued); they are "
                                      "never trusted over the queue")


def _file_name(name: str, meta_file: str) -> str:
    """A file ``checkpoint.meta`` names: a plain ``checkpoint-<id>.*`` name in its directory."""
    if not name.startswith("checkpoint-") or os.sep in name or "\0" in name or name in (".", ".."):
        raise CheckpointInvalid(meta_file, f"names the file {name!r}, which is not a checkpoint file name")
    return name


_MAX_META_BYTES: Final = 16 << 20  # a checkpoint.meta of a channel with a million live segments is ~12 MiB


def _read_meta(fs: FileSystem, path: str) -> pb.CheckpointMeta | None:
    data = read_file(fs, path, _MAX_META_BYTES)
    if data is None:
        return None
    if len(data) > _MAX_META_BYTES:
        raise CheckpointInvalid(path, f"larger than {_MAX_META_BYTES} bytes: not a checkpoint.meta file")
    return decode_meta(data, path)


def written_through(directory: str, fs: FileSystem | None = None) -> tuple[int, str]:
    """The highest log id ``checkpoint.meta`` proves was written, and the file; 0 without one.

    A checkpoint records the log position of the segment being written (created, its header
    durable, before any checkpoint can name it) and the reference counts of the segments events
    point into: every one of those was written. Read even when the rest of the checkpoint cannot
    be used, because it is evidence about the segments, not state to restore."""
    path = os.path.join(directory, CHECKPOINT_META)
    try:
        meta = _read_meta(fs or OsFileSystem(), path)
    except (CheckpointInvalid, OSError):
        return 0, path
    if meta is None:
        return 0, path
    return max([meta.log_id, *(log_id for log_id, n in meta.log_refcounts.items() if n)]), path


def decode_meta(data: bytes, path: str = CHECKPOINT_META) -> pb.CheckpointMeta:
    """Parse and validate ``checkpoint.meta`` bytes; raises CheckpointInvalid."""
    if not data:
        raise CheckpointInvalid(path, "empty file")
    head = _META_HEADER.size
    if len(data) < head + 4 or data[:8] != _META_MAGIC:
        raise CheckpointInvalid(path, "not a checkpoint.meta file (bad magic or too short)")
    size = _META_HEADER.unpack_from(data)[1]  # len(data) >= head + 4 was checked above
    if len(data) != head + size + 4 or crc32c(data[:-4]) != struct.unpack_from("<I", data, len(data) - 4)[0]:
        raise CheckpointInvalid(path, f"truncated or damaged: {len(data)} bytes, checksum or length mismatch")
    try:
        meta = pb.CheckpointMeta.FromString(data[head:-4])
    except DecodeError as err:
        raise CheckpointInvalid(path, f"not a valid CheckpointMeta at byte offset {head} ({err})") from None
    if meta.format_version != CHECKPOINT_VERSION:
        raise CheckpointInvalid(path, f"format version {meta.format_version}, expected {CHECKPOINT_VERSION}")
    if not meta.queue_file or not meta.inflight_file or not meta.checkpoint_id:
        raise CheckpointInvalid(path, "truncated: required fields are missing")
    if len(meta.channel_id) != 16:
        raise CheckpointInvalid(path, f"channel id of {len(meta.channel_id)} bytes, expected 16")
    if (meta.log_id > fmt.MAX_LOG_ID or meta.log_offset >= fmt.MAX_SEGMENT_SIZE
            or any(k > fmt.MAX_LOG_ID for k in meta.log_refcounts)):
        raise CheckpointInvalid(path, f"log position ({meta.log_id}, {meta.log_offset}) or a log id of its "
                                "reference counts is beyond what pointers can hold (2^32)")
    return meta


def _read_checked(fs: FileSystem, path: str, size: int, crc: int) -> bytes:
    try:
        data = read_file(fs, path, size, expect=size)  # ``size`` is what the meta claims, not a bound
    except ValueError as err:
        raise CheckpointInvalid(path, f"damaged: {err}") from None
    if data is None:
        raise CheckpointInvalid(path, "missing: checkpoint.meta names it but it does not exist")
    if len(data) != size or crc32c(data) != crc:
        raise CheckpointInvalid(path, f"damaged: {len(data)} bytes (expected {size}) or checksum mismatch")
    return data


def _load_queue(fs: FileSystem, path: str, meta: pb.CheckpointMeta) -> array[int]:
    data = _read_checked(fs, path, meta.queue_bytes, meta.queue_crc32c)
    if len(data) < _QUEUE_HEADER.size or (len(data) - _QUEUE_HEADER.size) % 8:
        raise CheckpointInvalid(path, f"{len(data)} bytes: not a {_QUEUE_HEADER.size}-byte header and 8-byte pointers")
    magic, version, _r, checkpoint_id, count = _QUEUE_HEADER.unpack_from(data)
    if magic != _QUEUE_MAGIC or version != CHECKPOINT_VERSION:
        raise CheckpointInvalid(path, "not a queue file of this version")
    if checkpoint_id != meta.checkpoint_id or count * 8 != len(data) - _QUEUE_HEADER.size:
        raise CheckpointInvalid(path, f"belongs to checkpoint {checkpoint_id}, meta is {meta.checkpoint_id}")
    queue = array("Q")
    queue.frombytes(data[_QUEUE_HEADER.size:])
    if sys.byteorder != "little":
        queue.byteswap()
    if len(queue) and max(queue) >= _MAX_POINTER:
        raise CheckpointInvalid(path, f"holds the impossible event pointer {max(queue):#x}")
    return queue


def _load_inflight(fs: FileSystem, path: str, meta: pb.CheckpointMeta) -> pb.Inflight:
    data = _read_checked(fs, path, meta.inflight_bytes, meta.inflight_crc32c)
    try:
        inflight = pb.Inflight.FromString(data)
    except DecodeError as err:
        raise CheckpointInvalid(path, f"not a valid Inflight message ({err})") from None
    if inflight.checkpoint_id != meta.checkpoint_id:
        raise CheckpointInvalid(path, f"belongs to checkpoint {inflight.checkpoint_id}, meta is {meta.checkpoint_id}")
    for txn in (*inflight.takes, *inflight.puts):
        if any(p >= _MAX_POINTER for p in txn.pointers):
            raise CheckpointInvalid(path, f"transaction {txn.txn_id} holds an impossible event pointer")
    return inflight


# -- the public read-only window ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What ``checkpoint.meta`` says, in plain Python types. Reading it takes no lock."""

    path: str
    channel_id: str
    checkpoint_id: int
    written_unix_ns: int
    queue_size: int
    inflight_takes: int
    inflight_puts: int
    capacity: int
    last_seq: int
    log_refcounts: dict[int, int]
    log_position: tuple[int, int]
    checkpoint_interval_s: float
    oldest_commit_unix_ns: int
    puts_committed: int
    takes_committed: int
    log_bytes: int
    backup_checkpoint_id: int = 0  # newest complete backup copy when this meta was written; 0: none
    backup_dir: str = ""  # where backup copies go ("" when the channel keeps none)

    @property
    def backup_current(self) -> bool:
        """Whether the backup copy is of this very checkpoint (else it is older, or absent)."""
        return bool(self.backup_checkpoint_id) and self.backup_checkpoint_id == self.checkpoint_id

    def age_seconds(self, now_ns: int | None = None) -> float:
        """Seconds since the checkpoint was written."""
        return ((now_ns or time.time_ns()) - self.written_unix_ns) / 1e9

    def backlog_age_seconds(self, now_ns: int | None = None) -> float:
        """Seconds since the oldest queued event was committed (0 when the queue is empty)."""
        if not self.oldest_commit_unix_ns:
            return 0.0
        return ((now_ns or time.time_ns()) - self.oldest_commit_unix_ns) / 1e9


def read_checkpoint_meta(checkpoint_dir: str, fs: FileSystem | None = None) -> CheckpointInfo | None:
    """Read ``checkpoint.meta`` of a channel, live or not; None when no checkpoint exists yet.

    Safe to call from any process at any time: the file is replaced atomically, so it is always
    complete; no lock is taken and the channel is never blocked. Raises CheckpointInvalid if the
    file is damaged.
    """
    import uuid

    path = os.path.join(checkpoint_dir, CHECKPOINT_META)
    meta = _read_meta(fs or OsFileSystem(), path)
    if meta is None:
        return None
    return CheckpointInfo(
        path=path, channel_id=str(uuid.UUID(bytes=meta.channel_id)), checkpoint_id=meta.checkpoint_id,
        written_unix_ns=meta.written_unix_ns, queue_size=meta.queue_size,
        inflight_takes=meta.inflight_takes, inflight_puts=meta.inflight_puts, capacity=meta.capacity,
        last_seq=meta.last_seq, log_refcounts=dict(meta.log_refcounts),
        log_position=(meta.log_id, meta.log_offset),
        checkpoint_interval_s=meta.checkpoint_interval_ms / 1000, oldest_commit_unix_ns=meta.oldest_commit_unix_ns,
        puts_committed=meta.puts_committed, takes_committed=meta.takes_committed, log_bytes=meta.log_bytes,
        backup_checkpoint_id=meta.backup_checkpoint_id, backup_dir=meta.backup_dir)
