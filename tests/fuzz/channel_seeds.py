"""Real files the channel writes, used as fuzz seeds: segments, their .meta, a checkpoint.

Built once per test session by a real :class:`FileChannel`: put transactions with and without
headers, a tagged commit, a committed take, a rolled-back spilled put, two sealed segments, and
a checkpoint taken while a take transaction is open (so its inflight file is not empty).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.fs import File, OsFile, OsFileSystem

__all__ = ["ChannelFiles", "ENCRYPTION", "KEYS", "KEYS_ENV", "NoSyncFileSystem", "build_channel",
           "encrypted_seed_channel", "frames_of", "reader_seeds", "seed_channel", "settings"]


class _NoSyncFile(OsFile):
    def sync(self) -> None:
        pass


class NoSyncFileSystem(OsFileSystem):
    """The real filesystem without fsync: a fuzz example opens a channel in a few milliseconds.
    Durability is not what these targets test (the crash tests do)."""

    def create(self, path: str) -> File:
        return _NoSyncFile(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)

    def open_write(self, path: str) -> File:
        return _NoSyncFile(path, os.O_RDWR)

    def sync_dir(self, path: str) -> None:
        pass


def settings(root: Path) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "data")], "max_file_size": 64 * 1024,
            "max_event_size": 8 * 1024, "min_free_bytes": 0, "preallocate_bytes": 4096, "keep_alive": 0.0,
            "checkpoint_interval": 0, "spill_bytes": 4096}


@dataclass(frozen=True)
class ChannelFiles:
    root: Path  # a stopped channel: copy it before changing anything
    files: dict[str, bytes]  # relative path -> bytes, every file but the lock files
    expected: list[bytes]  # bodies queued, head first

    def kind(self, name: str) -> str:
        """The file kind of a relative path: segment, segment_meta, checkpoint_meta, queue, inflight, channel_id."""
        base = os.path.basename(name)
        if base == "channel.id":
            return "channel_id"
        if base == "checkpoint.meta":
            return "checkpoint_meta"
        if base.startswith("checkpoint-"):
            return "queue" if base.endswith(".queue") else "inflight"
        return "segment_meta" if base.endswith(".meta") else "segment"

    def of_kind(self, kind: str) -> dict[str, bytes]:
        return {name: data for name, data in self.files.items() if self.kind(name) == kind}

    def copy_to(self, target: Path) -> Path:
        shutil.copytree(self.root, target, ignore=shutil.ignore_patterns("in_use.lock"))
        return target


def build_channel(root: Path, **more: Any) -> ChannelFiles:
    """``more``: extra settings (the encryption settings for an encrypted seed)."""
    cfg = {**settings(root), **more}
    with FileChannel(**cfg) as channel:
        with channel.transaction() as tx:
            tx.put_many([Event(b"a0"), Event(b"a1", {"k": "v"}), Event(b"a2" * 50)])
        with channel.transaction(tag="batch-1") as tx:
            tx.put_many([Event(b"b0", {"host": "h1", "t": "1"}), Event(b"b1")])
        with channel.transaction() as tx:
            assert [e.body for e in tx.take(1)] == [b"a0"]
        tx = channel.transaction()  # spilled, then rolled back: PUT frames and a ROLLBACK frame
        tx.put_many([Event(b"r" * 1000) for _ in range(6)])
        tx.rollback()
    with FileChannel(**{**cfg, "checkpoint_on_close": False}) as channel:  # log-2; a checkpoint with an open take
        with channel.transaction() as tx:
            tx.put_many([Event(b"c0"), Event(b"c1", {"x": "y" * 40})])
        take = channel.transaction()
        take.take(2)
        channel.checkpoint()
        take.rollback()  # the checkpoint keeps the open take: none is written on close
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != "in_use.lock"}
    return ChannelFiles(root, files, [b"a1", b"a2" * 50, b"b0", b"b1", b"c0", b"c1"])


def frames_of(data: bytes) -> list[tuple[int, int, int]]:
    """``(offset, type, length)`` of the valid frames of a segment image."""
    frames, pos = [], fmt.SEGMENT_HEADER_SIZE
    while pos < len(data):
        try:
            ftype, length, _txn, _seq = fmt.check_frame(data, pos, len(data))
        except fmt.FrameError:
            break
        frames.append((pos, ftype, length))
        pos += length
    return frames


def seed_channel(root: Path) -> ChannelFiles:
    """The seed channel of the reader targets, built in ``root``; numpy and pyarrow imported by
    a take of a copy, not inside a timed call."""
    files = build_channel(root / "seed")
    with FileChannel(**settings(files.copy_to(root / "warm"))) as channel:
        with channel.transaction() as tx:
            tx.take_arrow(2)
            tx.rollback()
    return files


def reader_seeds(files: ChannelFiles) -> dict[str, list[bytes]]:
    """The seed inputs of the reader targets, per kind: segments, their frames, ``.meta`` files,
    ``checkpoint.meta``, the checkpoint's queue and inflight files."""
    segments = list(files.of_kind("segment").values())
    frames = [data[o:o + n] for data in segments for o, _t, n in frames_of(data)]
    return {"segment": segments, "frame": frames, "segment_meta": list(files.of_kind("segment_meta").values()),
            "checkpoint_meta": list(files.of_kind("checkpoint_meta").values()),
            "queue": list(files.of_kind("queue").values()), "inflight": list(files.of_kind("inflight").values())}


KEYS_ENV = "ITK_FUZZ_READER_KEYS"
KEYS = f"1:{bytes(range(32)).hex()}"  # the value of KEYS_ENV while an encrypted target runs
ENCRYPTION: dict[str, Any] = {"encryption_key_env": KEYS_ENV, "encryption_key_id": 1}


def encrypted_seed_channel(root: Path) -> ChannelFiles:
    """The seed channel written with encryption at rest; ``KEYS_ENV`` must hold ``KEYS``."""
    files = build_channel(root, **ENCRYPTION)
    assert fmt.segment_key(files.files["data/log-1"][: fmt.SEGMENT_HEADER_SIZE]) is not None
    return files
