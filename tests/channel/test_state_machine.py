"""FileChannel against a reference model (a deque), driven by a Hypothesis state machine.

One put transaction and one take transaction may be open at the same time; each lives on its
own dedicated worker thread (a thread holds at most one transaction), and every operation on it
runs on that thread. Rules: put a batch, take n, commit or roll back either transaction,
checkpoint (while transactions may be open), and reopen (close, which rolls back whatever is
open, then open on the same directories). The channel does not checkpoint on close or in the
background, so a reopen recovers from the last explicit checkpoint plus the log after it, or by a
full replay when there is none.

The model is the queue of committed, untaken events plus the open transactions' puts and takes.
After every step ``len(channel)`` equals the model queue's length and the channel's capacity
accounting (``stats()["used"]``) equals queued + taken + pending; every take returns exactly the
model's head (body, headers and seq). Small capacities make the capacity and
transaction-capacity errors part of the exploration; 64 KiB segments and 4 KiB ``spill_bytes``
make segment rolls and spills part of it too.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.errors import ChannelFullError, TransactionCapacityError
from tests.channel.conformance import TransactionLike, Worker
from tests.channel.encryption import KEY_1, KEYS_ENV, with_encryption
from tests.soak import soak

CAPACITY = 12
TXN_CAPACITY = 6

Record = tuple[bytes, dict[str, str], int]  # body, headers, seq

bodies = st.one_of(st.binary(max_size=40), st.binary(min_size=1, max_size=8).map(lambda b: b * 400))
headers = st.dictionaries(st.text(max_size=4), st.text(max_size=8), max_size=2)
events = st.builds(Event, body=bodies, headers=headers)


def record(event: Event) -> Record:
    return bytes(event.body), dict(event.headers), event.seq


class ChannelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="channel-machine-"))
        self.put_worker, self.take_worker = Worker(), Worker()
        self.channel = self._open()
        self.queue: deque[Record] = deque()
        self.put_tx: TransactionLike | None = None
        self.pending: list[Record] = []
        self.take_tx: TransactionLike | None = None
        self.taken: list[Record] = []
        self.last_seq = 0

    def _open(self) -> FileChannel:
        return FileChannel(**with_encryption(dict(
            checkpoint_dir=str(self.root / "checkpoint"),
            data_dirs=[str(self.root / "data0"), str(self.root / "data1")],
            capacity=CAPACITY, transaction_capacity=TXN_CAPACITY, keep_alive=0, durability="fsync",
            max_file_size=64 * 1024, max_event_size=16_000, spill_bytes=4096, preallocate_bytes=16 * 1024,
            min_free_bytes=0, checkpoint_on_close=False, checkpoint_interval=0)))

    @property
    def used(self) -> int:
        return len(self.queue) + len(self.taken) + len(self.pending)

    # -- puts ---------------------------------------------------------------------------
    @rule(batch=st.lists(events, min_size=1, max_size=4))
    def put_batch(self, batch: list[Event]) -> None:
        if self.put_tx is None:
            self.put_tx = self.put_worker.run(self.channel.transaction)
        tx = self.put_tx
        if len(self.pending) + len(batch) > TXN_CAPACITY:
            event("put refused: transaction capacity")
            with pytest.raises(TransactionCapacityError):
                self.put_worker.run(lambda: tx.put_many(batch))
            return
        if self.used + len(batch) > CAPACITY:
            event("put refused: channel full")
            with pytest.raises(ChannelFullError):
                self.put_worker.run(lambda: tx.put_many(batch))
            return
        seqs = self.put_worker.run(lambda: tx.put_many(batch))
        assert len(seqs) == len(batch)
        assert all(a < b for a, b in zip([self.last_seq, *seqs], seqs, strict=False)), seqs
        self.last_seq = seqs[-1]
        self.pending.extend((bytes(e.body), dict(e.headers), s) for e, s in zip(batch, seqs, strict=True))

    @precondition(lambda self: self.put_tx is not None)
    @rule()
    def commit_put(self) -> None:
        assert self.put_tx is not None
        self.put_worker.run(self.put_tx.commit)
        self.queue.extend(self.pending)
        self._end_put()

    @precondition(lambda self: self.put_tx is not None)
    @rule()
    def rollback_put(self) -> None:
        assert self.put_tx is not None
        self.put_worker.run(self.put_tx.rollback)
        self._end_put()

    def _end_put(self) -> None:
        self.put_tx, self.pending = None, []

    # -- takes --------------------------------------------------------------------------
    @rule(n=st.integers(0, 7))
    def take(self, n: int) -> None:
        if self.take_tx is None:
            self.take_tx = self.take_worker.run(self.channel.transaction)
        tx = self.take_tx
        if len(self.taken) + n > TXN_CAPACITY:
            event("take refused: transaction capacity")
            with pytest.raises(TransactionCapacityError):
                self.take_worker.run(lambda: tx.take(n))
            return
        got = [record(e) for e in self.take_worker.run(lambda: tx.take(n))]
        expected = [self.queue.popleft() for _ in range(min(n, len(self.queue)))]
        assert got == expected
        if self.put_tx is not None:
            event("take while a put transaction is open")
        self.taken.extend(expected)

    @precondition(lambda self: self.take_tx is not None)
    @rule()
    def commit_take(self) -> None:
        assert self.take_tx is not None
        self.take_worker.run(self.take_tx.commit)
        self._end_take()

    @precondition(lambda self: self.take_tx is not None)
    @rule()
    def rollback_take(self) -> None:
        assert self.take_tx is not None
        self.take_worker.run(self.take_tx.rollback)
        self.queue.extendleft(reversed(self.taken))
        self._end_take()

    def _end_take(self) -> None:
        self.take_tx, self.taken = None, []

    # -- lifecycle ----------------------------------------------------------------------
    @rule()
    def checkpoint(self) -> None:
        if self.taken or self.pending:
            event("checkpoint with open transactions")
        self.channel.checkpoint()

    @rule()
    def reopen(self) -> None:
        if self.taken or self.pending:
            event("reopen with open transactions")
        self.channel.close()  # rolls back the open put and take transactions
        self.queue.extendleft(reversed(self.taken))
        self._end_put()
        self._end_take()
        self.channel = self._open()

    # -- invariants ---------------------------------------------------------------------
    @invariant()
    def length_matches_model(self) -> None:
        assert len(self.channel) == len(self.queue)

    @invariant()
    def capacity_accounting_matches_model(self) -> None:
        assert self.channel.stats()["used"] == self.used

    def teardown(self) -> None:
        self.channel.close()
        self.put_worker.close()
        self.take_worker.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _settings(examples: int, steps: int) -> Any:
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_channel_matches_model() -> None:
    run_state_machine_as_test(ChannelMachine, settings=_settings(50, 30))


def test_channel_matches_model_encrypted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same machine with encryption at rest on, half the examples."""
    monkeypatch.setenv(KEYS_ENV, f"1:{KEY_1}")
    run_state_machine_as_test(ChannelMachine, settings=_settings(25, 30))


@pytest.mark.slow
def test_channel_matches_model_long() -> None:
    run_state_machine_as_test(ChannelMachine, settings=_settings(soak(250), 60))
