"""Reference counts and the deletion of drained segments across checkpoints; transactions that
span a checkpoint.

Tests that caught library bugs (all fixed since) say so in their docstrings: open takes restored
out of order, a take larger than a segment rolling forever.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from ingest_toolkit.channel import Event, FileChannel, Transaction

from .checkpoint_helpers import (
    SPILL,
    assert_one_checkpoint,
    bodies,
    check_meta,
    crash,
    data_files,
    open_put,
    open_take,
    put,
    queued,
    settings,
    take,
)
from .faultfs import FaultyFileSystem

# == 4. reference counts and deletion ============================================================
_HUGE_TAKE = """
import os, sys, threading
from ingest_toolkit.channel import Event, FileChannel
root = sys.argv[1]
ch = FileChannel(checkpoint_dir=root + "/checkpoint", data_dirs=[root + "/data"], min_free_bytes=0,
                 max_file_size=64 * 1024, transaction_capacity=10_000, preallocate_bytes=0,
                 checkpoint_interval=0)
for _ in range(9):
    with ch.transaction() as tx:
        tx.put_many([Event(b"e")] * 1000)
done = threading.Event()
def take_all():
    with ch.transaction() as tx:
        tx.take(9000)  # 72 KB of pointers: more than a whole segment
    done.set()
threading.Thread(target=take_all, daemon=True).start()
for _ in range(200):
    if done.wait(0.05):
        break
    if len(os.listdir(root + "/data")) > 200:
        print("runaway: more than 200 segment files", flush=True)
        os._exit(3)
else:
    print("timeout", flush=True)
    os._exit(4)
ch.close()
with FileChannel(checkpoint_dir=root + "/checkpoint", data_dirs=[root + "/data"], min_free_bytes=0,
                 max_file_size=64 * 1024, transaction_capacity=10_000) as ch:
    print("committed", len(ch), len(os.listdir(root + "/data")), flush=True)
os._exit(0)
"""


def test_a_take_larger_than_a_segment_commits(tmp_path: Path) -> None:
    """Caught a bug: a TAKE frame larger than an empty segment made the commit roll to new
    segments forever (under the lock, thousands of empty files a second). Runs in a child
    process that watches for that runaway."""
    done = subprocess.run([sys.executable, "-c", _HUGE_TAKE, str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr[-2000:])
    word, queued_after, files = done.stdout.split()
    assert (word, queued_after) == ("committed", "0") and int(files) < 20, done.stdout


def test_drained_channel_keeps_only_the_segment_being_written(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    with FileChannel(**cfg) as ch:
        for k in range(8):
            put(ch, bodies(f"e{k}-", 40, 1000))  # ~330 KB: six segments over both data dirs
        assert len(take(ch, 320)) == 320
        writing = ch.stats()["writing"]
        assert writing >= 6
        result = ch.checkpoint()
        assert result.deleted_logs == list(range(1, writing))
        assert data_files(tmp_path) == [f"log-{writing}"]
        assert sorted(ch.stats()["log_files"]) == [writing]
        assert_one_checkpoint(tmp_path)
        assert check_meta(tmp_path).log_refcounts == {}
    assert data_files(tmp_path) == sorted([f"log-{writing}", f"log-{writing}.meta"])  # sealed at close
    with FileChannel(**cfg) as ch:
        assert ch.replay_stats.frames == 0 and len(ch) == 0
        assert ch.checkpoint().deleted_logs == [writing]
        assert data_files(tmp_path) == [f"log-{writing + 1}"]


def _recount(ch: FileChannel, taken: Sequence[Transaction] = ()) -> dict[int, int]:
    with ch.transaction() as tx:
        tx.take(len(ch))
        pointers = list(tx.taken)
        tx.rollback()
    for open_tx in taken:
        pointers += open_tx.taken
    return dict(Counter(p >> 32 for p in pointers))


def test_refcounts_match_a_recount_with_a_take_rolled_back_across_a_checkpoint(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    rng = random.Random(5)
    with FileChannel(**cfg) as ch:
        model: list[bytes] = []
        for k in range(30):
            put(ch, b := bodies(f"r{k:02d}-", rng.randint(1, 30), rng.randint(10, 3000)))
            model += b
            if rng.random() < 0.4:
                n = rng.randint(1, 20)
                assert take(ch, n) == model[:n]
                del model[:n]
        assert ch.stats()["writing"] >= 4, "the events should span several 64 KiB segments"
        tx, taken = open_take(ch, 60)  # spans segments
        assert taken == model[:60]
        assert {p >> 32 for p in tx.taken} != {tx.taken[0] >> 32}
        put(ch, b := bodies("late", 5))
        model += b
        ch.checkpoint()
        info = check_meta(tmp_path)  # refcounts == recount of queue file + inflight takes
        assert info.log_refcounts == _recount(ch, [tx])
        assert info.inflight_takes == 60
        tx.rollback()
        assert queued(ch) == model
        ch.checkpoint()
        info = check_meta(tmp_path)
        assert info.log_refcounts == _recount(ch) and info.inflight_takes == 0
        assert {lid: f["refcount"] for lid, f in ch.stats()["log_files"].items() if f["refcount"]} == _recount(ch)
        tx, _ = open_take(ch, 25)
        ch.checkpoint()
        tx.commit()
        del model[:25]
        ch.checkpoint()
        assert check_meta(tmp_path).log_refcounts == _recount(ch)
    with FileChannel(**cfg) as ch:
        assert queued(ch) == model


def test_an_old_event_pins_its_segment_and_every_newer_one(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    with FileChannel(**cfg) as ch:
        put(ch, [b"old"])
        tx_old, taken = open_take(ch, 1)  # held by a long-running take: still referenced
        assert taken == [b"old"]
        for k in range(6):  # newer segments, every event in them taken
            put(ch, b := bodies(f"n{k}-", 60, 1000))
            assert take(ch, 60) == b
        writing = ch.stats()["writing"]
        assert writing >= 5
        assert ch.checkpoint().deleted_logs == []
        assert data_files(tmp_path) == sorted([f"log-{i}" for i in range(1, writing + 1)] +
                                              [f"log-{i}.meta" for i in range(1, writing)])
        assert check_meta(tmp_path).log_refcounts == {1: 1}
        tx_old.rollback()  # back at the head: still pinning
        assert ch.checkpoint().deleted_logs == []
        assert take(ch, 1) == [b"old"]
        assert ch.checkpoint().deleted_logs == list(range(1, writing))
        assert data_files(tmp_path) == [f"log-{writing}"]
    with FileChannel(**cfg) as ch:
        assert len(ch) == 0


def test_a_spilled_open_put_pins_its_segment(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **cfg)
    tx = open_put(ch, [b"S" * (SPILL + 100), b"small"])  # frames in log-1 before the commit
    for k in range(4):
        put(ch, b := bodies(f"n{k}-", 60, 1000))
        assert take(ch, 60) == b
    assert ch.stats()["writing"] >= 4
    result = ch.checkpoint()
    assert result.deleted_logs == [] and result.meta.inflight_puts == 2
    tx.commit()  # COMMIT frame far from its PUT frames, after the checkpoint
    crash(fs, ch)
    with FileChannel(**cfg) as ch:
        assert ch.checkpoint_problem is None
        assert queued(ch) == [b"S" * (SPILL + 100), b"small"]
        assert take(ch, 2) == [b"S" * (SPILL + 100), b"small"]
        ch.checkpoint()
        assert len(data_files(tmp_path)) == 1


def _end(ending: str, tx: Transaction, fs: FaultyFileSystem, ch: FileChannel) -> None:
    """End a transaction that spans a checkpoint as ``ending`` says, then crash or close."""
    if ending.startswith("commit"):
        tx.commit()
    elif ending.startswith("rollback"):
        tx.rollback()
    if ending.endswith("crash") or ending == "crash-before-commit":
        crash(fs, ch)
    else:
        ch.close()


@pytest.mark.parametrize("ending", ["commit-crash", "commit-reopen", "crash-before-commit", "rollback-reopen"])
def test_take_spanning_a_checkpoint(tmp_path: Path, ending: str) -> None:
    cfg = settings(tmp_path, checkpoint_on_close=False)
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **cfg)
    put(ch, b := bodies("t", 20))
    tx, taken = open_take(ch, 5)
    assert taken == b[:5]
    assert ch.checkpoint().meta.inflight_takes == 5
    _end(ending, tx, fs, ch)
    with FileChannel(**cfg) as ch:
        assert ch.checkpoint_problem is None
        assert ch.replay_stats.frames == (2 if ending.startswith("commit") else 0)
        assert queued(ch) == (b[5:] if ending.startswith("commit") else b)
        assert ch.stats()["takes_committed"] == (5 if ending.startswith("commit") else 0)
    check_meta(tmp_path)


@pytest.mark.parametrize("spilled", [False, True], ids=["buffered", "spilled"])
@pytest.mark.parametrize("ending", ["commit-crash", "commit-reopen", "crash-before-commit", "rollback-reopen"])
def test_put_spanning_a_checkpoint(tmp_path: Path, ending: str, spilled: bool) -> None:
    cfg = settings(tmp_path, checkpoint_on_close=False)
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **cfg)
    put(ch, before := bodies("p", 3))
    items = [b"S" * (SPILL + 100) if spilled else b"buffered", b"second"]
    tx = open_put(ch, items)
    assert ch.checkpoint().meta.inflight_puts == (2 if spilled else 0)
    _end(ending, tx, fs, ch)
    with FileChannel(**cfg) as ch:
        assert ch.checkpoint_problem is None
        assert queued(ch) == (before + items if ending.startswith("commit") else before)
    check_meta(tmp_path)


def test_rollbacks_then_reopen(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    with FileChannel(**cfg) as ch:
        put(ch, b := bodies("k", 10))
        ch.checkpoint()
        with ch.transaction() as tx:
            assert [e.body for e in tx.take(4)] == b[:4]
            tx.rollback()
        with ch.transaction() as tx:
            tx.put_many([Event(b"S" * (SPILL + 100)), Event(b"x")])
            tx.rollback()
        assert queued(ch) == b
    with FileChannel(**cfg) as ch:
        assert ch.checkpoint_problem is None
        assert queued(ch) == b
    check_meta(tmp_path)


@pytest.mark.parametrize("ending", ["crash", "crash-after-one-commits"])
def test_open_takes_across_a_checkpoint_keep_fifo_order(tmp_path: Path, ending: str) -> None:
    """Several open takes, taken in an order unrelated to their transaction ids, interleaved
    within one transaction: a crash after the checkpoint puts every event back in its place.
    Caught a bug: open takes were restored in transaction-id order, breaking FIFO."""
    cfg = settings(tmp_path)
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **cfg)
    put(ch, b := bodies("f", 40))
    older = ch.transaction()  # lowest txn id, takes second and fourth
    newer, first = open_take(ch, 10)
    assert first == b[:10]
    assert [e.body for e in older.take(5)] == b[10:15]
    third, taken = open_take(ch, 5)
    assert taken == b[15:20]
    assert [e.body for e in older.take(5)] == b[20:25]
    assert ch.checkpoint().meta.inflight_takes == 25
    if ending == "crash-after-one-commits":
        third.commit()
        crash(fs, ch)
        expected = b[:15] + b[20:]
    else:
        crash(fs, ch)
        expected = b
    with FileChannel(**cfg) as ch:
        assert ch.checkpoint_problem is None
        assert queued(ch) == expected
    check_meta(tmp_path)
    del newer
