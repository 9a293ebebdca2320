"""FileChannel under concurrent producers and consumers, group commit, and crash durability.

* 10 producers and 10 consumers (Flume's TestFileChannel concurrency test): every event is
  delivered exactly once; sorted by seq, each producer's events are in the order it put them;
  without rollbacks, each consumer also sees each producer's events in put order.
* Group commit: 20 threads committing at once share fsyncs.
* ``durability="fsync"``: commits made concurrently by 8 threads are all there after a reopen, in
  the order they were visible before it, and every commit that returned survives a kill -9.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel

DEADLINE = 60.0  # seconds; a run that takes longer has hung


def open_channel(root: Path, **settings: Any) -> FileChannel:
    base: dict[str, Any] = {"checkpoint_dir": str(root / "checkpoint"), "data_dirs": [str(root / "data")],
                            "min_free_bytes": 0, "durability": "fsync"}
    return FileChannel(**{**base, **settings})


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Run ``target(i)`` on ``count`` threads started together; re-raise the first error."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def body(i: int) -> None:
        try:
            barrier.wait(DEADLINE)
            target(i)
        except BaseException as err:  # handed to the main thread
            errors.append(err)

    threads = [threading.Thread(target=body, args=(i,), name=f"t{i}") for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert not any(t.is_alive() for t in threads), "threads hung"
    if errors:
        raise errors[0]


def origin(event: Event) -> tuple[int, int]:
    """(producer, index) of an event made by a producer below."""
    return int(event.headers["p"]), int(event.headers["n"])


# -- producers and consumers -----------------------------------------------------------------

PRODUCERS = CONSUMERS = 10
SMALL_SEGMENTS: dict[str, Any] = {"max_file_size": 64 * 1024, "max_event_size": 16_000, "spill_bytes": 4096,
                                  "preallocate_bytes": 16 * 1024}


@dataclass(frozen=True)
class Workload:
    per_producer: int = 400
    body_repeat: int = 20  # bodies are "<producer>:<index>" repeated up to this many times
    rollback_rate: float = 0.0  # share of consumer takes rolled back instead of committed

    @property
    def total(self) -> int:
        return PRODUCERS * self.per_producer


class Delivery:
    """What the consumers committed, per consumer, in their take order."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.lock = threading.Lock()
        self.by_consumer: dict[int, list[Event]] = defaultdict(list)
        self.count = 0
        self.rollbacks = 0

    def record(self, consumer: int, events: list[Event]) -> None:
        with self.lock:
            self.by_consumer[consumer].extend(events)
            self.count += len(events)

    def done(self) -> bool:
        with self.lock:
            return self.count >= self.total

    def all_events(self) -> list[Event]:
        return [e for events in self.by_consumer.values() for e in events]


def produce(ch: FileChannel, producer: int, work: Workload) -> None:
    rng, n = random.Random(producer), 0
    while n < work.per_producer:
        size = min(rng.randint(1, 25), work.per_producer - n)
        batch = [Event(body=f"{producer}:{i}".encode() * rng.randint(1, work.body_repeat),
                       headers={"p": str(producer), "n": str(i)}) for i in range(n, n + size)]
        with ch.transaction() as tx:
            tx.put_many(batch)
        n += size


def consume(ch: FileChannel, consumer: int, delivery: Delivery, work: Workload) -> None:
    rng, stop_at = random.Random(1000 + consumer), time.monotonic() + DEADLINE
    while not delivery.done():
        assert time.monotonic() < stop_at, "consumers did not receive every event in time"
        with ch.transaction() as tx:
            events = tx.take(rng.randint(1, 40))
            if events and rng.random() < work.rollback_rate:
                tx.rollback()
                with delivery.lock:
                    delivery.rollbacks += 1
            elif events:
                tx.commit()
                delivery.record(consumer, events)
        if not events:
            time.sleep(0.001)


def run_workload(ch: FileChannel, work: Workload) -> Delivery:
    delivery = Delivery(work.total)
    run_threads(PRODUCERS + CONSUMERS, lambda i: produce(ch, i, work) if i < PRODUCERS
                else consume(ch, i - PRODUCERS, delivery, work))
    assert len(ch) == 0
    delivered = delivery.all_events()
    _assert_exactly_once(delivered, work)
    _assert_producer_order_by_seq(delivered, work)
    return delivery


@pytest.mark.parametrize("rollback_rate", [0.0, 0.2])
def test_producers_and_consumers_deliver_each_event_once_in_order(tmp_path: Path, rollback_rate: float) -> None:
    ch = open_channel(tmp_path, **SMALL_SEGMENTS, checkpoint_interval=0)
    delivery = run_workload(ch, Workload(rollback_rate=rollback_rate))
    ch.close()
    if rollback_rate:
        assert delivery.rollbacks > 0
    else:
        for events in delivery.by_consumer.values():
            _assert_producer_order(events)


def test_background_checkpoints_during_producers_and_consumers(tmp_path: Path) -> None:
    """Drained logs are deleted by 2 ms background checkpoints while producers roll segments."""
    for round_ in range(15):  # each round ~0.15 s
        ch = open_channel(tmp_path / str(round_), **SMALL_SEGMENTS, checkpoint_interval=0.002)
        try:
            run_workload(ch, Workload(per_producer=200, body_repeat=100))  # checks exactly-once
            assert ch.stats()["checkpoint_id"] > 1, "no background checkpoint ran"
            ch.checkpoint()  # whether the background ones got to delete anything is timing
            stats = ch.stats()
        finally:
            ch.close()
        assert len(stats["log_files"]) == 1, "drained logs were not deleted"


def _assert_exactly_once(delivered: list[Event], work: Workload) -> None:
    origins = [origin(e) for e in delivered]
    assert len(origins) == len(set(origins)) == work.total
    assert set(origins) == {(p, i) for p in range(PRODUCERS) for i in range(work.per_producer)}
    assert len({e.seq for e in delivered}) == len(delivered)
    for event in delivered:
        p, i = origin(event)
        assert event.body.startswith(f"{p}:{i}".encode())


def _assert_producer_order_by_seq(delivered: list[Event], work: Workload) -> None:
    by_seq = sorted(delivered, key=lambda e: e.seq)
    for p in range(PRODUCERS):
        assert [i for q, i in map(origin, by_seq) if q == p] == list(range(work.per_producer))


def _assert_producer_order(events: list[Event]) -> None:
    last: dict[int, int] = {}
    for p, i in map(origin, events):
        assert i > last.get(p, -1), f"producer {p}: event {i} after {last[p]}"
        last[p] = i


# -- group commit ----------------------------------------------------------------------------

def test_group_commit_shares_fsyncs(tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    threads, per_thread = 20, 40
    ch = open_channel(tmp_path)

    def commit_many(t: int) -> None:
        for i in range(per_thread):
            with ch.transaction() as tx:
                tx.put(Event(body=f"{t}:{i}".encode()))

    run_threads(threads, commit_many)
    stats = ch.stats()
    ch.close()
    commits = threads * per_thread
    assert stats["commits"] == commits
    ratio = stats["fsyncs"] / commits
    record_property("fsyncs_per_commit", round(ratio, 3))
    print(f"group commit: {stats['fsyncs']} fsyncs for {commits} commits from {threads} threads ({ratio:.2f})")
    assert stats["fsyncs"] < commits
    assert ratio < 0.8, f"{stats['fsyncs']} fsyncs for {commits} concurrent commits: commits are not grouped"


def test_sequential_commits_each_fsync(tmp_path: Path) -> None:
    """The group commit ratio above means something: alone, every commit syncs."""
    ch = open_channel(tmp_path)
    for i in range(20):
        with ch.transaction() as tx:
            tx.put(Event(body=str(i).encode()))
    assert ch.stats()["fsyncs"] == ch.stats()["commits"] == 20
    ch.close()


# -- durability ------------------------------------------------------------------------------

WRITERS, TXNS, EVENTS_PER_TXN = 8, 50, 3


def write_transactions(ch: FileChannel, writer: int) -> None:
    for i in range(TXNS):
        with ch.transaction() as tx:
            tx.put_many([Event(body=f"{writer}:{i}:{k}".encode(), headers={"p": str(writer), "n": str(i)})
                         for k in range(EVENTS_PER_TXN)])


def test_concurrent_fsync_commits_visible_after_reopen_in_the_same_order(tmp_path: Path) -> None:
    settings: dict[str, Any] = {"durability": "fsync", "checkpoint_on_close": False, "checkpoint_interval": 0}
    ch = open_channel(tmp_path, **settings)
    run_threads(WRITERS, lambda w: write_transactions(ch, w))
    before = _peek_all(ch)  # the queue order that group commit published
    ch.close()
    ch = open_channel(tmp_path, **settings)  # no checkpoint: the order comes from the log alone
    assert len(ch) == WRITERS * TXNS * EVENTS_PER_TXN
    events = _drain(ch)
    ch.close()
    assert [e.seq for e in events] == [e.seq for e in before]
    groups = _transactions_in_queue_order(events)
    assert sorted(groups) == sorted((w, i) for w in range(WRITERS) for i in range(TXNS))
    for w in range(WRITERS):
        assert [i for q, i in groups if q == w] == list(range(TXNS))


def _peek_all(ch: FileChannel) -> list[Event]:
    with ch.transaction() as tx:
        events = tx.take(len(ch))
        tx.rollback()
    return events


CHILD = textwrap.dedent("""
    import os, sys, threading
    from ingest_toolkit.channel import Event, FileChannel
    ch = FileChannel(checkpoint_dir=sys.argv[1], data_dirs=[sys.argv[2]], min_free_bytes=0, durability="fsync")
    def work(w):
        for i in range(1_000_000):
            with ch.transaction() as tx:
                tx.put_many([Event(body=f"{w}:{i}:{k}".encode(), headers={"p": str(w), "n": str(i)})
                             for k in range(3)])
            os.write(1, f"{w} {i}\\n".encode())  # acknowledged: the commit returned
    for w in range(int(sys.argv[3])):
        threading.Thread(target=work, args=(w,), daemon=True).start()
    threading.Event().wait()
""")


def test_returned_fsync_commits_survive_kill_9(tmp_path: Path) -> None:
    acked = _run_child_and_kill(tmp_path, min_acks=300)
    ch = open_channel(tmp_path)
    groups = _transactions_in_queue_order(_drain(ch))
    ch.close()
    present = set(groups)
    assert len(present) == len(groups), "a transaction's events appear twice"
    assert acked <= present, f"{len(acked - present)} acknowledged commits lost"
    for w in range(WRITERS):
        mine = [i for q, i in groups if q == w]
        assert mine == list(range(len(mine))), f"writer {w}: commits missing or out of order"
        assert len(mine) - len([a for a in acked if a[0] == w]) <= 1  # at most the one in flight


def _run_child_and_kill(root: Path, min_acks: int) -> set[tuple[int, int]]:
    args = [sys.executable, "-c", CHILD, str(root / "checkpoint"), str(root / "data"), str(WRITERS)]
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=(root / "child.stderr").open("wb"), cwd=root)
    assert child.stdout is not None
    lines: list[bytes] = []
    deadline = time.monotonic() + DEADLINE
    while len(lines) < min_acks and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        lines.append(line)
    os.kill(child.pid, signal.SIGKILL)
    lines.extend(child.stdout.read().splitlines())  # acks written before the kill
    child.wait(DEADLINE)
    assert child.returncode == -signal.SIGKILL, (root / "child.stderr").read_text()
    assert len(lines) >= min_acks, "the child did not commit enough before the deadline"
    return {(int(w), int(i)) for w, i in (line.split() for line in lines)}


def _drain(ch: FileChannel) -> list[Event]:
    out: list[Event] = []
    while chunk := _take(ch, 1000):
        out.extend(chunk)
    return out


def _take(ch: FileChannel, n: int) -> list[Event]:
    with ch.transaction() as tx:
        return tx.take(n)


def _transactions_in_queue_order(events: list[Event]) -> list[tuple[int, int]]:
    """(writer, txn) per transaction; checks each transaction's events are complete and adjacent."""
    assert len(events) % EVENTS_PER_TXN == 0
    groups = []
    for start in range(0, len(events), EVENTS_PER_TXN):
        chunk = events[start:start + EVENTS_PER_TXN]
        w, i = origin(chunk[0])
        assert [e.body for e in chunk] == [f"{w}:{i}:{k}".encode() for k in range(EVENTS_PER_TXN)]
        groups.append((w, i))
    return groups
