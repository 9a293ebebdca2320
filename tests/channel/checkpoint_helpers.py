"""Helpers shared by the checkpoint tests (``test_checkpoint_*.py``): channel settings with small
segments, putting and taking lists of bodies, open transactions in other threads, a simulated
crash, and the checks of what a checkpoint left on disk."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ingest_toolkit.channel import Event, FileChannel, Transaction
from ingest_toolkit.channel.checkpoint import (
    CHECKPOINT_META,
    CheckpointInfo,
    load_checkpoint,
    read_checkpoint_meta,
)

from .faultfs import FaultyFileSystem

KiB = 1024
SPILL = 4096
T = TypeVar("T")


def settings(root: Path, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "checkpoint_dir": str(root / "checkpoint"),
        "data_dirs": [str(root / "data1"), str(root / "data2")],
        "capacity": 200_000, "transaction_capacity": 10_000,
        "max_file_size": 64 * KiB, "max_event_size": 12 * KiB,
        "min_free_bytes": 0, "preallocate_bytes": 16 * KiB, "spill_bytes": SPILL,
        "keep_alive": 0.0, "checkpoint_interval": 0.0,  # checkpoints only where a test takes them
    }
    values.update(overrides)
    return values


def bodies(prefix: str, n: int, size: int = 0) -> list[bytes]:
    return [f"{prefix}{i:03d}".encode().ljust(size, b".") for i in range(n)]


def put(ch: FileChannel, items: Sequence[bytes]) -> None:
    with ch.transaction() as tx:
        tx.put_many([Event(b, {"k": b[:8].decode()} if i % 3 == 0 else {}) for i, b in enumerate(items)])


def take(ch: FileChannel, n: int) -> list[bytes]:
    with ch.transaction() as tx:
        return [e.body for e in tx.take(n)]


def queued(ch: FileChannel) -> list[bytes]:
    """Every queued event's body, oldest first, read in a take that is rolled back."""
    with ch.transaction() as tx:
        found = [e.body for e in tx.take(len(ch))]
        tx.rollback()
    return found


def in_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` in another thread: a thread holds one open transaction at a time."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def open_take(ch: FileChannel, n: int) -> tuple[Transaction, list[bytes]]:
    """A take transaction left open (taken in another thread); returns it and what it took."""
    def start() -> tuple[Transaction, list[bytes]]:
        tx = ch.transaction()
        return tx, [e.body for e in tx.take(n)]
    return in_thread(start)


def open_put(ch: FileChannel, items: Sequence[bytes]) -> Transaction:
    """A put transaction left open; frames beyond SPILL bytes are already in the log."""
    def start() -> Transaction:
        tx = ch.transaction()
        tx.put_many([Event(b) for b in items])
        return tx
    return in_thread(start)


def crash(fs: FaultyFileSystem, ch: FileChannel) -> None:
    """Power loss now (fsync'ed commits survive, nothing else); then release the directories."""
    fs.crash()
    ch.close()


def listing(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n != "in_use.lock")


def data_files(root: Path) -> list[str]:
    return sorted(n for d in ("data1", "data2") for n in listing(root / d))


def check_meta(root: Path) -> CheckpointInfo:
    """checkpoint.meta agrees with its queue and inflight files and with itself."""
    directory = str(root / "checkpoint")
    info = read_checkpoint_meta(directory)
    assert info is not None
    loaded = load_checkpoint(directory, None)
    assert loaded is not None
    counts = Counter(p >> 32 for p in loaded.queue)
    for _txn, pointers in loaded.takes:
        counts.update(p >> 32 for p in pointers)
    takes = sum(len(p) for _t, p in loaded.takes)
    assert info.log_refcounts == dict(counts), "log_refcounts differ from a recount of the queue file"
    assert info.queue_size == len(loaded.queue) + takes == sum(info.log_refcounts.values())
    assert info.inflight_takes == takes
    assert info.inflight_puts == sum(len(p) for _t, p in loaded.puts)
    assert info.puts_committed - info.takes_committed == info.queue_size
    assert (info.oldest_commit_unix_ns == 0) == (info.queue_size == 0)
    return info


def checkpoint_names(checkpoint_id: int) -> tuple[str, str]:
    return f"checkpoint-{checkpoint_id}.queue", f"checkpoint-{checkpoint_id}.inflight"


def assert_one_checkpoint(root: Path) -> None:
    """The checkpoint dir holds the identity, the meta and the files of that one checkpoint."""
    info = read_checkpoint_meta(str(root / "checkpoint"))
    assert info is not None
    expected = sorted(["channel.id", CHECKPOINT_META, *checkpoint_names(info.checkpoint_id)])
    assert listing(root / "checkpoint") == expected
