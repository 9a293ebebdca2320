"""Checkpoints of a live channel: ``read_checkpoint_meta`` while the channel is busy, the backlog
age, how long a checkpoint of 1M queued events blocks puts and takes, and whether a busy
committer can keep a checkpoint from ever starting (it caught that bug once).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.checkpoint import (
    read_checkpoint_meta,
)

from .checkpoint_helpers import SPILL, bodies, check_meta, put, settings, take


# == 5. the public reader =========================================================================
def test_no_meta_before_the_first_checkpoint(tmp_path: Path) -> None:
    with FileChannel(**settings(tmp_path)) as ch:
        assert read_checkpoint_meta(str(tmp_path / "checkpoint")) is None
        ch.checkpoint()
        info = read_checkpoint_meta(str(tmp_path / "checkpoint"))
        assert info is not None and info.channel_id == ch.stats()["channel_id"] and info.queue_size == 0


def test_reader_while_the_channel_is_busy(tmp_path: Path) -> None:
    cfg = settings(tmp_path, checkpoint_interval=0.01, durability="page_cache")
    directory = cfg["checkpoint_dir"]
    stop = threading.Event()
    errors: list[BaseException] = []

    def guard(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                while not stop.is_set():
                    fn()
            except BaseException as err:  # noqa: BLE001 - reported by the test
                errors.append(err)
                stop.set()
        return run

    with FileChannel(**cfg) as ch:
        rng = random.Random(3)
        counter = iter(range(10**9))

        def work() -> None:
            put(ch, [b"w%d" % next(counter) for _ in range(rng.randint(1, 50))])
            with ch.transaction() as tx:
                tx.take(rng.randint(1, 45))
                if rng.random() < 0.3:
                    time.sleep(0.002)  # an open take while checkpoints run
                if rng.random() < 0.2:
                    tx.rollback()
            if rng.random() < 0.1:
                tx2 = ch.transaction()
                tx2.put(Event(b"S" * (SPILL + 100)))  # an open spilled put while checkpoints run
                time.sleep(0.002)
                tx2.rollback()

        def checkpoints() -> None:
            ch.checkpoint()
            time.sleep(0.003)

        threads = [threading.Thread(target=guard(work)), threading.Thread(target=guard(checkpoints))]
        for t in threads:
            t.start()
        # 1.5 s, longer on a loaded machine until enough checkpoints were seen (at most 30 s)
        reads, previous, started = 0, None, time.monotonic()

        def going() -> bool:
            elapsed = time.monotonic() - started
            enough = reads > 50 and previous is not None and previous.checkpoint_id > 20
            return not stop.is_set() and (elapsed < 1.5 or (not enough and elapsed < 30))

        try:
            while going():
                info = read_checkpoint_meta(directory)  # must never raise
                if info is None:
                    continue
                reads += 1
                assert info.queue_size >= 0 and info.inflight_takes <= info.queue_size
                assert sum(info.log_refcounts.values()) == info.queue_size
                assert info.puts_committed - info.takes_committed == info.queue_size
                assert info.channel_id == ch.stats()["channel_id"]
                assert info.capacity == cfg["capacity"] and info.checkpoint_interval_s == 0.01
                assert (info.oldest_commit_unix_ns == 0) == (info.queue_size == 0)
                assert info.backlog_age_seconds() >= 0 and info.age_seconds() >= -0.1
                if previous is not None:
                    assert info.checkpoint_id >= previous.checkpoint_id
                    assert info.log_position >= previous.log_position
                    assert info.puts_committed >= previous.puts_committed
                    assert info.written_unix_ns >= previous.written_unix_ns
                previous = info
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors
        assert ch.last_checkpoint is not None
    assert reads > 50 and previous is not None and previous.checkpoint_id > 20
    check_meta(tmp_path)


def test_backlog_age_grows_while_events_wait_and_is_zero_when_drained(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    directory = cfg["checkpoint_dir"]

    def age() -> float:
        info = read_checkpoint_meta(directory)
        assert info is not None
        return info.backlog_age_seconds(info.written_unix_ns)  # as of the checkpoint

    with FileChannel(**cfg) as ch:
        put(ch, b := bodies("w", 10))
        ch.checkpoint()
        first = age()
        assert 0 <= first < 1.0
        time.sleep(0.3)
        ch.checkpoint()
        assert age() >= first + 0.25
        take(ch, 5)  # the rest still waits since the same commit
        ch.checkpoint()
        assert age() >= first + 0.25
    with FileChannel(**cfg) as ch:  # kept across a restart
        time.sleep(0.1)
        ch.checkpoint()
        assert age() >= first + 0.35
        assert take(ch, 5) == b[5:]
        ch.checkpoint()
        assert age() == 0.0
        info = read_checkpoint_meta(directory)
        assert info is not None and info.queue_size == 0 and info.oldest_commit_unix_ns == 0


# == 6. how long a checkpoint blocks the channel ==================================================
class Putter(threading.Thread):
    """Commits one-event put transactions with ``pause`` seconds between them; records latencies."""

    def __init__(self, ch: FileChannel, pause: float) -> None:
        super().__init__(daemon=True)
        self.ch, self.pause = ch, pause
        self.stop = threading.Event()
        self.spans: list[tuple[float, float]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                started = time.perf_counter()
                with self.ch.transaction() as tx:
                    tx.put(Event(b"p" * 16))
                self.spans.append((started, time.perf_counter()))
                if self.pause:
                    time.sleep(self.pause)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            self.error = err

    def finish(self) -> None:
        self.stop.set()
        self.join()
        assert self.error is None, self.error

    def longest(self, start: float, end: float) -> float:
        return max((b - a for a, b in self.spans if b >= start and a <= end), default=0.0)


def test_checkpoint_of_a_million_queued_events_blocks_briefly(tmp_path: Path) -> None:
    cfg = settings(tmp_path, capacity=1_100_000, transaction_capacity=100_000, max_file_size=256 << 20,
                   preallocate_bytes=4 << 20)
    n, batch = 1_000_000, 100_000
    with FileChannel(**cfg) as ch:
        for k in range(0, n, batch):
            with ch.transaction() as tx:
                tx.put_many([Event(b"%016d" % i) for i in range(k, k + batch)])
        idle = [ch.checkpoint().blocked_seconds for _ in range(2)]
        putter = Putter(ch, pause=0.001)  # a putter committing about every millisecond (fsync)
        putter.start()
        time.sleep(0.1)
        busy, longest = [], []
        for _ in range(3):
            started = time.perf_counter()
            result = ch.checkpoint()
            ended = time.perf_counter()
            assert result.meta.queue_size >= n
            busy.append(result.blocked_seconds)
            time.sleep(0.05)
            longest.append(putter.longest(started, ended))
        putter.finish()
        print(f"\ncheckpoint of {n:,} queued events: blocked_seconds idle "
              f"{', '.join(f'{b * 1000:.1f}' for b in idle)} ms; with a putter "
              f"{', '.join(f'{b * 1000:.1f}' for b in busy)} ms, the putter's longest commit during them "
              f"{', '.join(f'{b * 1000:.1f}' for b in longest)} ms; whole checkpoint {result.seconds * 1000:.0f} ms")
        assert max(idle + busy) < 0.5
        assert max(longest) < 0.5
        queued_now = len(ch)
    with FileChannel(**cfg) as ch:
        assert ch.replay_stats.frames == 0 and len(ch) == queued_now
        with ch.transaction() as tx:
            assert [e.body for e in tx.take(2)] == [b"%016d" % 0, b"%016d" % 1]
            tx.rollback()


def test_checkpoints_are_not_starved_by_a_busy_committer(tmp_path: Path) -> None:
    """Caught a bug: the snapshot waited for a moment without a group-commit sync in flight,
    which one thread committing back to back never left: checkpoints took 0.4 s to 90 s."""
    with FileChannel(**settings(tmp_path)) as ch:
        putter = Putter(ch, pause=0.0)
        putter.start()
        time.sleep(0.1)
        results: list[Any] = []
        worker = threading.Thread(target=lambda: results.extend(ch.checkpoint() for _ in range(10)))
        worker.start()
        worker.join(1.5)  # ten checkpoints of a small channel take about 0.05 s
        finished = len(results)
        putter.finish()  # without the putter the remaining checkpoints finish at once
        worker.join()
    assert finished == 10, f"{finished} of 10 checkpoints finished within 1.5 s next to one busy committer"
    assert max(r.blocked_seconds for r in results) < 0.5
