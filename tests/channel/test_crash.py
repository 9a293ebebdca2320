"""Real-process crash tests: a child works on a channel, is SIGKILLed, and the log is checked.

Each trial starts ``crash_child.py``, waits until it reports the channel open, lets it work for
20-300 ms, kills it with SIGKILL and reads everything it reported. The test then reopens the
channel and reads the whole queue (in one take transaction that it rolls back, so the state
carries over to the next trial). The queue must equal the committed puts minus the committed
takes, FIFO, each event once; only the one transaction whose commit the child had begun but not
seen return may have gone either way. A rolled-back or unreported put must never be visible.

Trials continue on the same directories, the next child resuming the counter where the last
one stopped, for ``TRIALS_PER_DIRS`` restarts; then a fresh set of directories starts. (The
channel keeps every segment and replays all of them on open, so one set of directories for 400
trials would make each open slower than the trial itself.) Some trials kill the child while it
is still opening the channel, i.e. during recovery.

Set ``CRASH_SEED`` to repeat a run's random choices (kill timing depends on the machine anyway).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.errors import ChannelLockedError
from tests.soak import soak

from .child_driver import HERE, LINE_TIMEOUT, ChildLog, ChildProcess, crash_child
from .encryption import KEY_1, KEYS_ENV

CHILD_PATH = HERE / "crash_child.py"
TRIALS = 50
SLOW_TRIALS = soak(200)  # INGEST_SOAK scales it (tests/soak.py)
PAGE_CACHE_TRIALS = 20
ENCRYPTED_TRIALS = 20
TRIALS_PER_DIRS = 25
EARLY_KILL_SHARE = 0.1  # trials that kill the child while it opens (recovers) the channel


@dataclass(frozen=True)
class Dirs:
    checkpoint: Path
    data: tuple[Path, ...]

    @classmethod
    def under(cls, root: Path) -> Dirs:
        return cls(root / "checkpoint", (root / "data-a", root / "data-b"))

    def settings(self, durability: str) -> dict[str, Any]:
        return crash_child.channel_settings(str(self.checkpoint), [str(d) for d in self.data], durability)  # type: ignore[no-any-return]

    def argv(self) -> list[str]:
        return [str(self.checkpoint), *(str(d) for d in self.data)]


def start_child(dirs: Dirs, *, seed: int, durability: str, stderr: Path) -> ChildProcess:
    """Start crash_child.py on ``dirs``; it waits for :meth:`ChildProcess.go`."""
    argv = [sys.executable, str(CHILD_PATH), *dirs.argv(), "--seed", str(seed), "--durability", durability,
            "--wait-go"]
    return ChildProcess(argv, stderr=stderr)


def read_channel(dirs: Dirs, durability: str) -> list[Event]:
    """Every queued event, read in a take transaction that is rolled back (the queue stays)."""
    with FileChannel(**dirs.settings(durability)) as channel:
        queued = len(channel)
        with channel.transaction() as tx:
            events = tx.take(queued)
            tx.rollback()
        assert len(channel) == queued == len(events)
    return events


def check_queue(events: list[Event], log: ChildLog, context: str) -> list[int]:
    counters = [crash_child.counter_of(e) for e in events]
    damaged = [c for e, c in zip(events, counters, strict=True)
               if e.body != crash_child.body_for(c) or dict(e.headers) != crash_child.headers_for(c)]
    assert not damaged, f"events with wrong body or headers: {damaged[:10]}\n{context}"
    seqs = [e.seq for e in events]
    assert all(a < b for a, b in pairwise(seqs)), f"sequence numbers out of order\n{context}"
    candidates = log.candidates()
    assert counters in candidates, _difference(counters, candidates) + "\n" + context
    return counters


def _difference(actual: list[int], candidates: list[list[int]]) -> str:
    parts = [f"recovered queue of {len(actual)} events matches none of the allowed outcomes"]
    for expected in candidates:
        pairs = enumerate(zip(actual, expected, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), min(len(actual), len(expected)))
        parts.append(f"  vs {len(expected)} expected: first difference at index {at}: "
                     f"got {actual[at:at + 5]}, expected {expected[at:at + 5]}")
    return "\n".join(parts)


@dataclass
class CrashRun:
    """State carried from trial to trial: directories, the verified queue, the next counter."""

    root: Path
    durability: str
    rng: random.Random
    dirs: Dirs = field(init=False)
    queue: list[int] = field(default_factory=list)
    next_counter: int = 1
    children: list[ChildProcess] = field(default_factory=list)  # started, not yet killed
    in_doubt: dict[str, int] = field(default_factory=dict)
    commits: int = 0
    started: int = 0

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.dirs = Dirs.under(self.root / "dirs-0")

    def spawn(self) -> ChildProcess:
        """Start a child on the current directories; it imports, then waits for "go"."""
        child = start_child(self.dirs, seed=self.rng.randrange(1 << 31), durability=self.durability,
                      stderr=self.root / f"child-{self.started}.err")
        self.children.append(child)
        self.started += 1
        return child

    def kill_all(self) -> None:
        for child in self.children:
            child.kill()


def crash_once(child: ChildProcess, run: CrashRun, *, spawn_next: bool) -> tuple[list[str], ChildProcess | None]:
    """Let the child open the channel, kill it at a random moment; returns its report.

    The next child is started while this one works, so that its start-up costs no time.
    """
    child.go(run.next_counter)
    early = run.rng.random() < EARLY_KILL_SHARE
    assert child.wait_for("OPENING" if early else "READY"), child.describe()
    following = run.spawn() if spawn_next else None
    time.sleep(run.rng.uniform(0.0, 0.03) if early else run.rng.uniform(0.02, 0.3))
    lines = child.kill()
    run.children.remove(child)
    assert child.proc.returncode == -signal.SIGKILL, child.describe()
    return lines, following


def run_trials(run: CrashRun, trials: int) -> None:
    child: ChildProcess | None = run.spawn()
    try:
        for trial in range(1, trials + 1):
            assert child is not None
            child = _trial(run, child, trial, last=trial == trials)
    finally:
        run.kill_all()


def _trial(run: CrashRun, child: ChildProcess, trial: int, *, last: bool) -> ChildProcess | None:
    dirs = run.dirs
    if trial % TRIALS_PER_DIRS == 0:  # the next child starts on fresh directories
        run.dirs = Dirs.under(run.root / f"dirs-{trial}")
    lines, following = crash_once(child, run, spawn_next=not last)
    log = ChildLog(run.queue)
    context = f"trial {trial}, durability {run.durability}, {child.describe()}"
    for line in lines:
        try:
            log.apply(line)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{context}") from None
    run.next_counter = max(run.next_counter, log.max_counter + 1)
    counters = check_queue(read_channel(dirs, run.durability), log, context)
    run.queue = counters if dirs == run.dirs else []
    if log.pending is not None:
        outcome = "kept" if counters != log.queue else "undone"
        key = f"{log.pending[0]} {outcome}"
        run.in_doubt[key] = run.in_doubt.get(key, 0) + 1
    run.commits += log.commits
    return following


def _crash_test(tmp_path: Path, seed: int, durability: str, trials: int) -> None:
    run = CrashRun(tmp_path, durability, random.Random(seed))
    started = time.monotonic()
    try:
        run_trials(run, trials)
    except AssertionError as err:
        raise AssertionError(f"CRASH_SEED={seed}: {err}") from None
    print(f"\n{trials} crash trials ({durability}) in {time.monotonic() - started:.1f} s: "
          f"{run.commits} commits reported, in-doubt outcomes {run.in_doubt}")
    assert run.commits > trials // 2, "the children committed almost nothing: the test tested nothing"


def test_sigkill_loses_no_returned_commit_fsync(tmp_path: Path, crash_seed: int) -> None:
    _crash_test(tmp_path, crash_seed, "fsync", TRIALS)


def test_sigkill_loses_no_returned_commit_encrypted(tmp_path: Path, crash_seed: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsync crash test with encryption at rest on (fewer trials: the frames and recovery
    rules are the same; what differs is the encrypted PUT path and reading it back)."""
    assert crash_child.KEYS_ENV == KEYS_ENV  # the child is a script: it names the variable itself
    monkeypatch.setenv(KEYS_ENV, f"1:{KEY_1}")
    _crash_test(tmp_path, crash_seed, "fsync", ENCRYPTED_TRIALS)
    heads = [p.read_bytes()[:fmt.SEGMENT_HEADER_SIZE] for p in tmp_path.rglob("log-*") if p.name[4:].isdigit()]
    whole = [head for head in heads if len(head) == fmt.SEGMENT_HEADER_SIZE and any(head)]  # not being created
    assert whole and all(fmt.segment_key(head) is not None for head in whole)


def test_sigkill_loses_no_returned_commit_page_cache(tmp_path: Path, crash_seed: int) -> None:
    _crash_test(tmp_path, crash_seed, "page_cache", PAGE_CACHE_TRIALS)


@pytest.mark.slow
def test_sigkill_many_trials(tmp_path: Path, crash_seed: int) -> None:
    _crash_test(tmp_path / "fsync", crash_seed, "fsync", SLOW_TRIALS)
    _crash_test(tmp_path / "page_cache", crash_seed, "page_cache", SLOW_TRIALS // 4)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Dirs, ChildProcess]]:
    """A child that holds the channel open (and keeps working)."""
    dirs = Dirs.under(tmp_path)
    child = start_child(dirs, seed=7, durability="fsync", stderr=tmp_path / "holder.err")
    try:
        child.go(1)
        assert child.wait_for("READY"), child.describe()
        yield dirs, child
    finally:
        child.kill()


def test_second_process_is_refused_naming_the_holder(holder: tuple[Dirs, ChildProcess]) -> None:
    dirs, child = holder
    with pytest.raises(ChannelLockedError) as raised:
        FileChannel(**dirs.settings("fsync"))
    assert raised.value.holder == f"pid {child.pid}"
    assert f"pid {child.pid}" in str(raised.value)


def test_lock_is_free_after_the_holder_is_killed(holder: tuple[Dirs, ChildProcess]) -> None:
    dirs, child = holder
    lines = child.kill()
    log = ChildLog([])
    for line in lines:
        log.apply(line)
    check_queue(read_channel(dirs, "fsync"), log, child.describe())


def test_child_is_refused_while_this_process_holds_the_channel(tmp_path: Path) -> None:
    dirs = Dirs.under(tmp_path)
    with FileChannel(**dirs.settings("fsync")):
        child = start_child(dirs, seed=1, durability="fsync", stderr=tmp_path / "refused.err")
        child.go(1)
        assert child.proc.wait(LINE_TIMEOUT) == 3, child.describe()
        lines = child.kill()
    assert lines == ["OPENING", f"LOCKED pid {os.getpid()}"]
