"""Child process of the crash tests (``test_crash.py``): works on a channel until it is killed.

Run it by path with the test's interpreter::

    python crash_child.py CHECKPOINT_DIR DATA_DIR [DATA_DIR ...] (--start N | --wait-go)
                          [--seed S] [--durability fsync|page_cache] [--max-seconds T]

It opens a :class:`FileChannel` and loops doing put transactions (random batch sizes, bodies
that encode a global counter starting at ``--start``, now and then an event larger than
``spill_bytes``) and take transactions (random sizes), rolling some of each back. Every step is
reported on stdout, one flushed line each, so the parent knows exactly which commits returned:

=====================================  =================================================
``OPENING``                            about to open the channel
``READY <queued>``                     open; ``<queued>`` events in the channel
``BEGIN put <first> <last>``           counters first..last are about to be put; commit follows
``OK put <first> <last>``              that commit returned
``BEGIN putrb <first> <last>``         counters about to be put by a transaction that rolls back
``RB put <first> <last>``              that rollback returned
``BEGIN take <n> <c1> ... <cn>``       events taken (their counters, in order); commit follows
``OK take <n>``                        that commit returned
``BEGIN takerb <n> <c1> ... <cn>``     events taken by a transaction that rolls back
``RB take <n>``                        that rollback returned
``LOCKED <holder>``                    the directories are locked by another process (exit 3)
``ERROR <message>``                    the child saw an inconsistency itself (exit 2)
=====================================  =================================================

Every counter is announced by a BEGIN line before it reaches the channel, so the parent can
start the next child after the largest counter it has seen. With ``--wait-go`` the child imports
everything, then waits for the line ``go <start>`` on stdin before opening, so the parent can
start the next child while the previous one still runs (the interpreter's start-up then costs
the tests no time) and tell it the counter later. Also imported by the tests, for
:func:`body_for`, :func:`headers_for` and :func:`channel_settings`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.errors import ChannelLockedError

COUNTER_DIGITS = 12
SPILL_BYTES = 4096
MAX_FILE_SIZE = 256 * 1024


KEYS_ENV = "ITK_TEST_CHANNEL_KEYS"


def channel_settings(checkpoint_dir: str, data_dirs: Sequence[str], durability: str) -> dict[str, Any]:
    """Settings shared by the child and the parent that checks its work."""
    return {
        "checkpoint_dir": checkpoint_dir,
        "data_dirs": list(data_dirs),
        "capacity": 1_000_000,
        "transaction_capacity": 1_000_000,
        "max_file_size": MAX_FILE_SIZE,
        "max_event_size": 60_000,
        "spill_bytes": SPILL_BYTES,
        "preallocate_bytes": 64 * 1024,
        "min_free_bytes": 0,
        "keep_alive": 0.0,
        "durability": durability,
        # encrypted while the parent runs a test encrypted (tests/channel/encryption.py, KEYS_ENV)
        **({"encryption_key_env": KEYS_ENV, "encryption_key_id": 1} if KEYS_ENV in os.environ else {}),
    }


def body_for(counter: int) -> bytes:
    """The body of event ``counter``: the counter in decimal, then padding derived from it.

    About one event in 89 is larger than ``SPILL_BYTES``, so its transaction spills frames to
    the log before its commit.
    """
    stamp = f"{counter:0{COUNTER_DIGITS}d}".encode()
    size = 5000 + counter * 7919 % 15000 if counter % 89 == 0 else counter * 31 % 160
    return stamp + (stamp * (size // COUNTER_DIGITS + 1))[:size]


def headers_for(counter: int) -> dict[str, str]:
    """A third of the events carry a header (the protobuf path of the codec)."""
    return {"c": str(counter)} if counter % 3 == 0 else {}


def counter_of(event: Event) -> int:
    return int(event.body[:COUNTER_DIGITS])


class Worker:
    """One child's loop; ``rng`` decides batch sizes, kinds and rollbacks."""

    def __init__(self, channel: FileChannel, start: int, rng: random.Random) -> None:
        self.channel, self.counter, self.rng = channel, start, rng

    def step(self) -> None:
        queued = len(self.channel)
        take_share = 0.3 if queued < 300 else 0.6 if queued < 3000 else 0.95
        if self.rng.random() < take_share:
            self.take(self.rng.randint(1, 60), rollback=self.rng.random() < 0.1)
        else:
            self.put(self.rng.randint(1, 40), rollback=self.rng.random() < 0.1)

    def put(self, n: int, *, rollback: bool) -> None:
        first, last = self.counter, self.counter + n - 1
        self.counter += n
        say(f"BEGIN {'putrb' if rollback else 'put'} {first} {last}")
        events = [Event(body_for(c), headers_for(c)) for c in range(first, last + 1)]
        with self.channel.transaction() as tx:
            tx.put_many(events)
            if rollback:
                tx.rollback()
                say(f"RB put {first} {last}")
                return
        say(f"OK put {first} {last}")

    def take(self, n: int, *, rollback: bool) -> None:
        with self.channel.transaction() as tx:
            events = tx.take(n)
            check_events(events)
            listed = " ".join(str(counter_of(e)) for e in events)
            say(f"BEGIN {'takerb' if rollback else 'take'} {len(events)} {listed}".rstrip())
            if rollback:
                tx.rollback()
                say(f"RB take {len(events)}")
                return
        say(f"OK take {len(events)}")


def check_events(events: list[Event]) -> None:
    for event in events:
        counter = counter_of(event)
        if event.body != body_for(counter) or dict(event.headers) != headers_for(counter):
            fail(f"event {counter} read back with a different body or headers")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def fail(message: str) -> None:
    say(f"ERROR {message}")
    sys.exit(2)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint_dir")
    parser.add_argument("data_dirs", nargs="+")
    parser.add_argument("--start", type=int, default=1, help="first counter to put")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--durability", choices=("fsync", "page_cache"), default="fsync")
    parser.add_argument("--wait-go", action="store_true",
                        help="before opening, wait for 'go <start>' on stdin (overrides --start)")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="exit after this long")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.wait_go:
        words = sys.stdin.readline().split()
        if not words:
            return 0  # the parent went away without starting us
        args.start = int(words[1])
    say("OPENING")
    try:
        channel = FileChannel(**channel_settings(args.checkpoint_dir, args.data_dirs, args.durability))
    except ChannelLockedError as err:
        say(f"LOCKED {err.holder}")
        return 3
    say(f"READY {len(channel)}")
    worker = Worker(channel, args.start, random.Random(args.seed))
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:  # a safety net: the parent normally kills us long before
        worker.step()
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
