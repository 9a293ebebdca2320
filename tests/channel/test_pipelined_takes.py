"""Several take transactions open at once: the queue order survives rollbacks, close and reopen.

A consumer with several batches in flight (the forward sink's pipeline) holds several open takes.
Their events must come back in their original order however the takes end: rolled back newest
first by the consumer, rolled back by ``close`` (which puts them back as a checkpoint would, chunk
by chunk in pop order), or found uncommitted by the recovery of a crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.errors import TransactionError

from .checkpoint_helpers import bodies, crash, open_take, put, queued, settings
from .faultfs import FaultyFileSystem


def _open(root: Path, **settings: object) -> FileChannel:
    return FileChannel(checkpoint_dir=str(root / "cp"), data_dirs=[str(root / "data")], min_free_bytes=0,
                       preallocate_bytes=0, **settings)  # type: ignore[arg-type]


def _fill(channel: FileChannel, n: int) -> None:
    with channel.transaction() as tx:
        tx.put_many([Event(f"e{i}".encode()) for i in range(n)])


def _bodies(channel: FileChannel) -> list[str]:
    with channel.transaction() as tx:
        return [e.body.decode() for e in tx.take(10_000)]


def test_one_thread_holds_several_pipelined_takes_and_rolls_them_back_newest_first(tmp_path: Path) -> None:
    channel = _open(tmp_path)
    _fill(channel, 30)
    first, second = channel.transaction(pipelined=True), channel.transaction(pipelined=True)
    assert [e.body for e in first.take(10)][0] == b"e0" and [e.body for e in second.take(10)][0] == b"e10"
    with pytest.raises(TransactionError, match="newest first"):
        first.rollback()  # would put e0..e9 behind e10..e19
    second.rollback()
    first.rollback()
    assert _bodies(channel) == [f"e{i}" for i in range(30)]
    channel.close()


def test_committing_an_older_take_while_a_newer_is_open_keeps_the_rest_in_order(tmp_path: Path) -> None:
    channel = _open(tmp_path)
    _fill(channel, 30)
    first, second = channel.transaction(pipelined=True), channel.transaction(pipelined=True)
    first.take(10)
    second.take(10)
    first.commit()
    second.rollback()
    assert _bodies(channel) == [f"e{i}" for i in range(10, 30)]
    channel.close()


@pytest.mark.parametrize("checkpoint_on_close", [True, False])
def test_close_puts_several_open_takes_back_in_their_original_order(tmp_path: Path,
                                                                    checkpoint_on_close: bool) -> None:
    # Two consumers (threads) hold a take each when the channel closes. Rolling them back one by
    # one in transaction order put the newer take's events ahead of the older one's, and the
    # checkpoint written at close kept that order (a forward sink would then find its in-flight
    # record not matching the head and give the batch a new id: a duplicate downstream).
    channel = _open(tmp_path, checkpoint_on_close=checkpoint_on_close)
    _fill(channel, 30)
    assert open_take(channel, 10)[1][0] == b"e0" and open_take(channel, 10)[1][0] == b"e10"
    channel.close()
    reopened = _open(tmp_path)
    assert _bodies(reopened) == [f"e{i}" for i in range(30)]
    reopened.close()


@pytest.mark.parametrize("checkpoint_between", [True, False])
def test_pipelined_takes_left_open_by_a_crash_come_back_in_order(tmp_path: Path, checkpoint_between: bool) -> None:
    fs = FaultyFileSystem()
    channel = FileChannel(fs=fs, **settings(tmp_path))
    put(channel, bodies("e", 30))
    channel.checkpoint()
    takes = [channel.transaction(pipelined=True) for _ in range(3)]
    for tx in takes:
        tx.take(10)
    if checkpoint_between:
        channel.checkpoint()  # the open takes are in the checkpoint, restored chunk by chunk at the head
    takes[0].commit()
    takes[2].rollback()
    takes[2] = channel.transaction(pipelined=True)
    takes[2].take(10)  # retaken: a newer pop of the same events
    crash(fs, channel)
    reopened = FileChannel(**settings(tmp_path))
    assert queued(reopened) == bodies("e", 30)[10:]
    reopened.close()
