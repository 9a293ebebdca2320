"""Crashes during a checkpoint: the reopen never needs a full replay.

A child process (``checkpoint_child.py``, driven through ``child_driver.py``) that commits and
checkpoints in a loop is SIGKILLed at random moments, many of them aimed inside a checkpoint;
and a simulated power loss (``faultfs``) after every single file operation of a checkpoint,
clean-cut and torn. The ``slow`` test runs only with ``-m slow``. Set ``CRASH_SEED`` to repeat the
random choices of the SIGKILL trials.
"""

from __future__ import annotations

import random
import shutil
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.channel.checkpoint import (
    CheckpointInvalid,
    load_checkpoint,
)
from tests.soak import soak

from .checkpoint_helpers import (
    SPILL,
    assert_one_checkpoint,
    bodies,
    check_meta,
    checkpoint_names,
    data_files,
    listing,
    open_put,
    open_take,
    put,
    queued,
    settings,
    take,
)
from .child_driver import HERE, ChildLog, ChildProcess, crash_child
from .faultfs import MUTATING_OPS, FaultyFileSystem

# == 2. crashes during a checkpoint =============================================================
# -- 2a. SIGKILL of a child that commits and checkpoints ------------------------------------
CHILD_PATH = HERE / "checkpoint_child.py"
SIGKILL_TRIALS = 30
SIGKILL_SLOW_TRIALS = soak(150)  # INGEST_SOAK scales it (tests/soak.py)
EARLY_KILL_SHARE = 0.1  # killed while opening the channel (recovery from a checkpoint)
AIMED_SHARE = 0.75  # killed 0-8 ms after the child announced a checkpoint() call


def start_child(root: Path, *, seed: int, stderr: Path) -> ChildProcess:
    """Start checkpoint_child.py on ``root``'s directories; it waits for :meth:`ChildProcess.go`."""
    argv = [sys.executable, str(CHILD_PATH), str(root / "checkpoint"), str(root / "data1"),
            str(root / "data2"), "--seed", str(seed), "--interval", "0.02", "--wait-go"]
    return ChildProcess(argv, stderr=stderr)


@dataclass
class KillRun:
    root: Path
    rng: random.Random
    queue: list[int] = field(default_factory=list)
    next_counter: int = 1
    children: list[ChildProcess] = field(default_factory=list)
    started: int = 0
    stats: Counter[str] = field(default_factory=Counter)

    def spawn(self) -> ChildProcess:
        child = start_child(self.root, seed=self.rng.randrange(1 << 31), stderr=self.root / f"child-{self.started}.err")
        self.children.append(child)
        self.started += 1
        return child

    def parent_settings(self) -> dict[str, Any]:
        cfg = crash_child.channel_settings(str(self.root / "checkpoint"),
                                           [str(self.root / "data1"), str(self.root / "data2")], "fsync")
        cfg["checkpoint_interval"] = 0.0
        return cfg  # type: ignore[no-any-return]


def _kill_at_random(run: KillRun, child: ChildProcess, *, last: bool) -> tuple[list[str], ChildProcess | None]:
    child.go(run.next_counter)
    early = run.rng.random() < EARLY_KILL_SHARE
    assert child.wait_count("OPENING" if early else "READY", 1), child.describe()
    following = None if last else run.spawn()  # starts while this one works: its imports cost no time
    if early:
        time.sleep(run.rng.uniform(0.0, 0.03))
    elif run.rng.random() < AIMED_SHARE:
        target = child.count("CKPT begin") + 1 + run.rng.randrange(4)
        assert child.wait_count("CKPT begin", target), child.describe()
        time.sleep(run.rng.uniform(0.0, 0.008))  # a checkpoint of this child takes 3-25 ms
    else:
        time.sleep(run.rng.uniform(0.01, 0.2))
    lines = child.kill()
    run.children.remove(child)
    assert child.proc.returncode == -signal.SIGKILL, child.describe()
    return lines, following


def _kill_trial(run: KillRun, child: ChildProcess, trial: int, *, last: bool) -> ChildProcess | None:
    lines, following = _kill_at_random(run, child, last=last)
    report = ChildLog(run.queue)
    context = f"trial {trial}\n{child.describe()}"
    for line in lines:
        try:
            report.apply(line)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{context}") from None
    run.next_counter = max(run.next_counter, report.max_counter + 1)
    run.stats["killed inside checkpoint()"] += report.in_checkpoint
    run.stats["commits"] += report.commits
    run.stats["explicit checkpoints"] += report.checkpoints

    # What the kill left on disk, before anything opens the channel: a complete checkpoint.
    directory = run.root / "checkpoint"
    try:
        loaded = load_checkpoint(str(directory), None)
    except CheckpointInvalid as err:
        raise AssertionError(f"the kill left an unusable checkpoint: {err}\n{context}") from None
    if loaded is not None:
        current = set(checkpoint_names(loaded.meta.checkpoint_id))
        stray = [n for n in listing(directory) if n.startswith("checkpoint-") and n not in current]
        run.stats["kills leaving files of an unfinished checkpoint"] += any(
            n.startswith(f"checkpoint-{loaded.meta.checkpoint_id + 1}.") for n in stray)
    else:
        assert trial == 1 and not report.checkpoints, f"checkpoint.meta is gone\n{context}"

    with FileChannel(**run.parent_settings()) as ch:
        assert ch.checkpoint_problem is None, f"{ch.checkpoint_problem}\n{context}"
        with ch.transaction() as tx:
            events = tx.take(len(ch))
            tx.rollback()
    counters = [crash_child.counter_of(e) for e in events]
    for event, counter in zip(events, counters, strict=True):
        assert event.body == crash_child.body_for(counter), f"event {counter} damaged\n{context}"
        assert dict(event.headers) == crash_child.headers_for(counter)
    assert all(a.seq < b.seq for a, b in pairwise(events)), f"sequence numbers out of order\n{context}"
    allowed = report.candidates()
    assert counters in allowed, (f"recovered {len(counters)} events, allowed {[len(c) for c in allowed]}; "
                                 f"first {counters[:8]} vs {[c[:8] for c in allowed]}\n{context}")
    if report.pending is not None and report.pending[0] in ("put", "take"):
        run.stats[f"in doubt: {report.pending[0]} {'undone' if counters == allowed[0] else 'kept'}"] += 1
    info = check_meta(run.root)  # the parent's close wrote a checkpoint, which deleted every
    floor = min([info.log_position[0], *info.log_refcounts])  # segment below the oldest needed one
    assert min(_segment_ids(run.root)) >= floor, f"deletable segments left: {data_files(run.root)}\n{context}"
    run.queue = counters
    return following


def _sigkill_test(root: Path, seed: int, trials: int) -> None:
    run = KillRun(root, random.Random(seed))
    started = time.monotonic()
    child: ChildProcess | None = run.spawn()
    try:
        for trial in range(1, trials + 1):
            assert child is not None
            child = _kill_trial(run, child, trial, last=trial == trials)
    except AssertionError as err:
        raise AssertionError(f"CRASH_SEED={seed}: {err}") from None
    finally:
        for leftover in run.children:
            leftover.kill()
    segments = _segment_ids(root)
    strays = [n for n in data_files(root) if n.endswith(".meta") and int(n[4:-5]) not in segments]
    print(f"\n{trials} SIGKILL trials in {time.monotonic() - started:.1f} s: {dict(run.stats)}; "
          f"segments created {max(segments)}, left {len(segments)}, stray .meta files {strays}")
    assert run.stats["commits"] > trials, "the children committed almost nothing: the test tested nothing"
    assert run.stats["killed inside checkpoint()"] >= trials // 10, "too few kills landed inside a checkpoint"
    assert len(segments) < max(segments) // 2, f"drained segments are not being deleted: {segments}"
    assert not strays, "a kill during segment deletion left a .meta that no reopen removed"


def _segment_ids(root: Path) -> list[int]:
    return sorted(int(n[4:]) for n in data_files(root) if n.startswith("log-") and n[4:].isdigit())


def test_sigkill_during_checkpoints_never_needs_a_full_replay(tmp_path: Path, crash_seed: int) -> None:
    _sigkill_test(tmp_path, crash_seed, SIGKILL_TRIALS)


@pytest.mark.slow
def test_sigkill_during_checkpoints_many_trials(tmp_path: Path, crash_seed: int) -> None:
    _sigkill_test(tmp_path, crash_seed, SIGKILL_SLOW_TRIALS)


# -- 2b. power loss after each file operation of a checkpoint ---------------------------------
def _mutations(fs: FaultyFileSystem) -> int:
    return sum(fs.completed[op] for op in MUTATING_OPS)


def _before_checkpoint(root: Path, fs: FaultyFileSystem) -> tuple[FileChannel, list[bytes]]:
    """A channel whose next checkpoint writes its files, replaces the meta, removes the previous
    checkpoint's files and deletes two drained segments, with an open take (it must return to
    the head) and an open, spilled put (it must vanish)."""
    ch = FileChannel(fs=fs, **settings(root))
    model: list[bytes] = []
    for k in range(20):
        put(ch, b := bodies(f"a{k:02d}-", 10, 1000))
        model += b
    ch.checkpoint()
    assert take(ch, 150) == model[:150]
    del model[:150]
    put(ch, b := bodies("b", 5))
    model += b
    _tx, taken = open_take(ch, 3)
    assert taken == model[:3]
    open_put(ch, [b"S" * (SPILL + 100), b"never"])
    return ch, model


def _power_loss_at_every_step(tmp_path: Path, *, torn: bool) -> dict[int, list[str]]:
    """Cut the power after step 1, 2, ... of a checkpoint; every reopen must use a checkpoint
    (the previous or the new one) and recover exactly. Returns, per step, the ``.meta`` files
    left without their segment after the reopen and a clean close."""
    fs = FaultyFileSystem()
    ch, _model = _before_checkpoint(tmp_path / "count", fs)
    before = _mutations(fs)
    result = ch.checkpoint()
    steps = _mutations(fs) - before
    assert len(result.deleted_logs) >= 2, "the checkpoint under test deletes no segment"
    ch.close()
    stray_metas = {}
    for step in range(1, steps + 1):
        root = tmp_path / f"step-{step}"
        fs = FaultyFileSystem()
        ch, model = _before_checkpoint(root, fs)
        fs.crash_after(step, rng=random.Random(step) if torn else None)
        try:
            ch.checkpoint()
        except Exception:  # noqa: S110 - the power is gone: any error is expected
            pass
        ch.close()
        assert fs.crashes == 1
        context = f"power lost after step {step} of {steps} of the checkpoint, history {fs.history[-steps:]}"
        with FileChannel(**settings(root)) as reopened:
            assert reopened.checkpoint_problem is None, context
            assert queued(reopened) == model, context
        check_meta(root)
        assert_one_checkpoint(root)
        segments = [n for n in data_files(root) if not n.endswith(".meta")]
        assert len(segments) <= 3, f"drained segments left behind: {data_files(root)}\n{context}"
        strays = [n for n in data_files(root) if n.endswith(".meta") and n.removesuffix(".meta") not in segments]
        if strays:
            stray_metas[step] = strays
        shutil.rmtree(root)
    return stray_metas


@pytest.mark.parametrize("torn", [False, True], ids=["clean-cut", "torn"])
def test_power_loss_at_every_step_of_a_checkpoint(tmp_path: Path, torn: bool) -> None:
    """Caught a (minor) bug: a crash between deleting log-<id> and its .meta left the .meta
    for good; now the next open removes it."""
    strays = _power_loss_at_every_step(tmp_path, torn=torn)
    # a crash between deleting log-<id> and its .meta leaves the .meta; the next open removes it
    assert not strays, f"log-<id>.meta files whose segment is gone, left after a reopen (step: files): {strays}"
