"""Checkpoints bound replay: a restart after a checkpoint replays exactly the frames written after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.checkpoint import (
    read_checkpoint_meta,
)

from .checkpoint_helpers import SPILL, bodies, check_meta, crash, put, queued, settings, take
from .faultfs import FaultyFileSystem


# == 1. bounded replay ==========================================================================
@pytest.mark.parametrize("ending", ["close", "crash"])
def test_restart_replays_only_the_frames_written_after_the_checkpoint(tmp_path: Path, ending: str) -> None:
    cfg = settings(tmp_path, checkpoint_on_close=False)
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **cfg)
    model: list[bytes] = []
    for k in range(4):
        put(ch, b := bodies(f"a{k}-", 10, 300))
        model += b
    assert take(ch, 7) == model[:7]
    del model[:7]
    old = ch.checkpoint().meta
    frames = puts = takes = 0

    put(ch, b := bodies("b", 5))  # 5 PUT + COMMIT
    model += b
    frames, puts = frames + 6, puts + 5
    assert take(ch, 4) == model[:4]  # TAKE + COMMIT
    del model[:4]
    frames, takes = frames + 2, takes + 4
    with ch.transaction() as tx:  # rolled back before anything was written: no frame
        tx.put_many([Event(b"never")] * 3)
        tx.rollback()
    with ch.transaction() as tx:  # a take writes nothing before its commit
        tx.take(3)
        tx.rollback()
    with ch.transaction() as tx:  # spilled PUT frame + ROLLBACK frame
        tx.put(Event(b"R" * (SPILL + 100)))
        tx.rollback()
    frames += 2
    put(ch, b := [b"S" * (SPILL + 100), *bodies("c", 2)])  # spilled before its commit: 3 PUT + COMMIT
    model += b
    frames, puts = frames + 4, puts + 3
    writing = ch.stats()["writing"]
    put(ch, b := bodies("d", 80, 1000))  # 80 KB: the commit rolls into a new segment
    assert ch.stats()["writing"] > writing
    model += b
    frames, puts = frames + 81, puts + 80
    assert take(ch, 60) == model[:60]
    del model[:60]
    frames, takes = frames + 2, takes + 60
    assert (old.log_id, old.log_offset) == read_checkpoint_meta(cfg["checkpoint_dir"]).log_position  # type: ignore[union-attr]

    if ending == "close":
        ch.close()  # seals the segment, writes no checkpoint
    else:
        crash(fs, ch)
    with FileChannel(**cfg) as ch:
        assert ch.checkpoint_problem is None
        stats = ch.replay_stats
        assert (stats.frames, stats.puts_committed, stats.takes_committed) == (frames, puts, takes)
        assert queued(ch) == model
        assert ch.stats()["puts_committed"] == old.puts_committed + puts
        assert ch.stats()["takes_committed"] == old.takes_committed + takes
    check_meta(tmp_path)  # the open checkpointed what it replayed...
    with FileChannel(**cfg) as ch:
        assert ch.replay_stats.frames == 0  # ...so the next open replays nothing
        assert queued(ch) == model


def test_clean_close_then_restart_replays_nothing(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    with FileChannel(**cfg) as ch:
        put(ch, b := bodies("x", 300, 500))
        take(ch, 100)
    with FileChannel(**cfg) as ch:
        assert (ch.replay_stats.frames, ch.checkpoint_problem) == (0, None)
        assert queued(ch) == b[100:]
