"""A checkpoint blocks puts only for a snapshot of bookkeeping: never across an fdatasync, never
for a copy of the queue. A file system whose syncs of log segments take 0.3 s shows it: the
checkpoint's ``blocked_seconds`` stays far below one sync, and a commit waiting for its sync does
not hold the checkpoint up (its frames are replayed from the log, exactly once)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.fs import File

from .checkpoint_helpers import bodies, crash, put, queued, settings
from .faultfs import FaultyFileSystem

SLOW_SYNC = 0.3


class SlowSyncFileSystem(FaultyFileSystem):
    """Syncs of log segments take SLOW_SYNC seconds while ``slow`` is set (the real work is done)."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = threading.Event()
        self.sync_started = threading.Event()

    def _wrap(self, real: File, inode: Any, key: str) -> Any:
        wrapped = super()._wrap(real, inode, key)
        if re.search(r"log-\d+$", key):
            sync = wrapped.sync

            def slow_sync() -> None:
                if self.slow.is_set():
                    self.sync_started.set()
                    time.sleep(SLOW_SYNC)
                sync()
            wrapped.sync = slow_sync  # type: ignore[method-assign]
        return wrapped


def test_page_cache_checkpoint_syncs_the_log_outside_the_lock(tmp_path: Path) -> None:
    fs = SlowSyncFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path, durability="page_cache"))
    put(ch, items := bodies("a", 50, 300))  # published, not yet durable
    fs.slow.set()
    result = ch.checkpoint()
    assert fs.sync_started.is_set(), "the checkpoint made the log durable"
    assert result.seconds >= SLOW_SYNC > 10 * result.blocked_seconds, result
    crash(fs, ch)  # power loss: only what was synced survives, and the checkpoint points at nothing lost
    with FileChannel(**settings(tmp_path)) as reopened:
        assert reopened.recovery_source == "checkpoint" and queued(reopened) == items


def test_a_commit_waiting_for_its_sync_does_not_hold_up_a_checkpoint(tmp_path: Path) -> None:
    fs = SlowSyncFileSystem()
    ch = FileChannel(fs=fs, **settings(tmp_path))
    put(ch, first := bodies("a", 20))
    fs.slow.set()
    committed = threading.Event()

    def commit_slowly() -> None:
        with ch.transaction() as tx:
            tx.put_many([Event(b) for b in bodies("b", 5)])
        committed.set()
    committer = threading.Thread(target=commit_slowly)
    committer.start()
    assert fs.sync_started.wait(10)  # the commit's frames are written; its sync sleeps
    result = ch.checkpoint()
    assert not committed.is_set(), "the checkpoint waited for the commit's sync"
    assert result.blocked_seconds < SLOW_SYNC / 3
    assert result.meta.queue_size == 20  # the snapshot is the published state
    committer.join()
    fs.slow.clear()
    crash(fs, ch)
    with FileChannel(**settings(tmp_path)) as reopened:  # the commit is replayed after the checkpoint
        assert reopened.recovery_source == "checkpoint" and reopened.replay_stats.frames == 6
        assert queued(reopened) == first + bodies("b", 5)
