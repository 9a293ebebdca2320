"""Commit tags (client batch ids): recorded with the commit, found by ``find_tag``, remembered
across clean restarts, SIGKILL and a full-replay fallback, forgotten by window and age."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from ingest_toolkit.channel import Event, FileChannel, InvalidTagError, TagRecord
from ingest_toolkit.channel.codec import TXN_PUT, decode_commit, encode_commit
from ingest_toolkit.channel.config import ChannelConfig
from ingest_toolkit.channel.proto import channel_pb2 as pb
from ingest_toolkit.channel.tags import TagStore
from ingest_toolkit.channel.tools.verify import verify_channel
from ingest_toolkit.errors import ConfigError, TransactionError

from .faultfs import FaultyFileSystem


def settings(root: Path, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "checkpoint_dir": str(root / "checkpoint"), "data_dirs": [str(root / "data")],
        "min_free_bytes": 0, "preallocate_bytes": 0, "checkpoint_interval": 0.0,
        "max_file_size": 64 * 1024, "max_event_size": 8 * 1024, "spill_bytes": 4096,
    }
    values.update(overrides)
    return values


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def ch(root: Path) -> Iterator[FileChannel]:
    channel = FileChannel(**settings(root))
    yield channel
    channel.close()


def put_tagged(ch: FileChannel, tag: str | None, n: int, size: int = 8) -> list[int]:
    with ch.transaction(tag) as tx:
        return tx.put_many([Event(bytes([65 + i % 26]) * size) for i in range(n)])


def drain(ch: FileChannel) -> int:
    with ch.transaction() as tx:
        return len(tx.take(len(ch)))


def remove_checkpoint(root: Path) -> None:
    for name in os.listdir(root / "checkpoint"):
        if name.startswith("checkpoint"):
            os.unlink(root / "checkpoint" / name)


# -- recording --------------------------------------------------------------------------------
def test_tag_is_found_after_commit_and_not_before(ch: FileChannel) -> None:
    before = time.time_ns()
    with ch.transaction("batch-1") as tx:
        seqs = tx.put_many([Event(b"a"), Event(b"b"), Event(b"c")])
        assert ch.find_tag("batch-1") is None  # not committed yet
    record = ch.find_tag("batch-1")
    assert record == TagRecord("batch-1", seqs[0], 3, record.commit_unix_ns if record else 0)
    assert record is not None and before <= record.commit_unix_ns <= time.time_ns()
    assert ch.find_tag("batch-2") is None
    assert ch.stats()["tags"] == 1


def test_untagged_commit_payload_is_unchanged_and_tagged_one_round_trips() -> None:
    assert encode_commit(TXN_PUT, 7) == pb.Commit(kind=pb.TXN_KIND_PUT, count=7).SerializeToString()
    assert decode_commit(encode_commit(TXN_PUT, 7)) == (TXN_PUT, 7, None)
    record = TagRecord("ü-batch", 123, 7, 456)
    assert decode_commit(encode_commit(TXN_PUT, 7, record)) == (TXN_PUT, 7, record)


@pytest.mark.parametrize("how", ["rollback", "exception", "spilled rollback"])
def test_rolled_back_transaction_records_no_tag(ch: FileChannel, how: str) -> None:
    size = 6000 if how == "spilled rollback" else 8  # 2 x 6000 bytes > spill_bytes: written ahead
    with pytest.raises(RuntimeError) if how != "rollback" else contextlib.nullcontext():
        with ch.transaction("rb") as tx:
            tx.put_many([Event(b"x" * size), Event(b"y" * size)])
            if how == "rollback":
                tx.rollback()
            else:
                raise RuntimeError("caller failed")
    assert ch.find_tag("rb") is None
    assert len(ch) == 0


def test_empty_tagged_put_transaction_records_nothing(ch: FileChannel) -> None:
    with ch.transaction("empty"):
        pass
    assert ch.find_tag("empty") is None


def test_spilled_tagged_transaction_records_all_its_events(ch: FileChannel) -> None:
    seqs = put_tagged(ch, "big", 10, size=3000)  # spills several times before the commit
    record = ch.find_tag("big")
    assert record is not None and (record.first_seq, record.count) == (seqs[0], 10)


def test_committing_a_tag_again_replaces_its_record(ch: FileChannel) -> None:
    put_tagged(ch, "again", 1)
    second = put_tagged(ch, "again", 2)
    record = ch.find_tag("again")
    assert record is not None and (record.first_seq, record.count) == (second[0], 2)


# -- validation -------------------------------------------------------------------------------
def test_tag_on_take_is_rejected(ch: FileChannel) -> None:
    put_tagged(ch, None, 2)
    with pytest.raises(TransactionError, match="tags mark put batches only"):
        with ch.transaction("t") as tx:
            tx.take(1)
    assert len(ch) == 2  # nothing was taken


@pytest.mark.parametrize("tag", ["x" * 129, "€" * 43, "", "\ud800"])
def test_invalid_tag_is_rejected(ch: FileChannel, tag: str) -> None:
    with pytest.raises(ValueError) as info:
        ch.transaction(tag)
    assert isinstance(info.value, InvalidTagError) and "tag" in str(info.value)
    with pytest.raises(InvalidTagError):
        ch.find_tag(tag)
    put_tagged(ch, "€" * 42, 1)  # 126 bytes in UTF-8: allowed
    assert ch.find_tag("€" * 42) is not None


def test_non_str_tag_is_rejected(ch: FileChannel) -> None:
    with pytest.raises(InvalidTagError, match="must be a str"):
        ch.transaction(b"bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize(("key", "value"), [("tag_window", -1), ("tag_retention_seconds", 0.0),
                                            ("tag_window", 10**9)])
def test_tag_settings_are_validated(root: Path, key: str, value: float) -> None:
    with pytest.raises(ConfigError) as info:
        ChannelConfig.build(**settings(root, **{key: value}))
    assert info.value.key == key


# -- window -----------------------------------------------------------------------------------
def test_window_keeps_the_newest_tags_also_across_restart(root: Path) -> None:
    with FileChannel(**settings(root, tag_window=3)) as ch:
        for i in range(5):
            put_tagged(ch, f"b{i}", 1)
        put_tagged(ch, "b2", 1)  # committed again: now the newest, b3 is the oldest kept
        put_tagged(ch, "b5", 1)
        assert [t for t in (f"b{i}" for i in range(6)) if ch.find_tag(t)] == ["b2", "b4", "b5"]
    with FileChannel(**settings(root, tag_window=2)) as ch:  # a smaller window applies on open
        assert [t for t in (f"b{i}" for i in range(6)) if ch.find_tag(t)] == ["b2", "b5"]


def test_window_zero_remembers_nothing(root: Path) -> None:
    with FileChannel(**settings(root, tag_window=0)) as ch:
        put_tagged(ch, "b", 1)
        assert ch.find_tag("b") is None


def test_tags_expire_by_age_also_across_restart(root: Path) -> None:
    with FileChannel(**settings(root, tag_retention_seconds=0.3)) as ch:
        put_tagged(ch, "old", 1)
        time.sleep(0.4)
        put_tagged(ch, "new", 1)
        assert ch.find_tag("old") is None and ch.find_tag("new") is not None
        assert ch.stats()["tags"] == 1  # the expired one was evicted, not only hidden
    time.sleep(0.4)
    with FileChannel(**settings(root, tag_retention_seconds=0.3)) as ch:  # loaded from the checkpoint
        assert ch.find_tag("new") is None and ch.stats()["tags"] == 0


def test_tags_since_is_the_retention_cut_off_until_the_window_fills_then_the_oldest_kept_tag(root: Path) -> None:
    day = 86_400 * 10**9
    with FileChannel(**settings(root, tag_window=3)) as ch:
        before = time.time_ns()
        put_tagged(ch, "b0", 1)
        since = ch.stats()["tags_since_unix_ns"]
        assert before - day <= since <= time.time_ns() - day  # not full: a day back, the retention
        for i in range(1, 5):
            put_tagged(ch, f"b{i}", 1)
        oldest_kept = ch.find_tag("b2")
        assert oldest_kept is not None and ch.find_tag("b1") is None
        assert ch.stats()["tags_since_unix_ns"] == oldest_kept.commit_unix_ns  # full: b0 and b1 were evicted
    with FileChannel(**settings(root, tag_window=3)) as ch:  # the same after a restart
        assert ch.stats()["tags_since_unix_ns"] == oldest_kept.commit_unix_ns


def test_tags_since_is_now_when_nothing_is_remembered(root: Path) -> None:
    with FileChannel(**settings(root, tag_window=0)) as ch:
        put_tagged(ch, "b", 1)
        before = time.time_ns()
        assert before <= ch.stats()["tags_since_unix_ns"] <= time.time_ns()


@settings_h(max_examples=300)
@given(ops=st.lists(st.tuples(st.integers(0, 12), st.integers(1, 5)), max_size=60),
       window=st.integers(0, 8), retention=st.integers(1, 40), later=st.integers(0, 30))
def test_every_tag_committed_after_tags_since_is_found(ops: list[tuple[int, int]], window: int, retention: int,
                                                        later: int) -> None:
    """The promise of ``remembered_since``, against the history itself: a tag whose (latest)
    commit came after it is found, whatever the window and retention evicted."""
    store, clock, latest = TagStore(window, retention), 0, {}
    for tag, step in ops:
        clock += step
        store.add(TagRecord(f"t{tag}", 1, 1, clock), now_ns=clock)
        latest[f"t{tag}"] = clock
    now = clock + later
    since = store.remembered_since(now)
    for tag, committed in latest.items():
        if committed > since:
            assert store.find(tag, now) is not None, (tag, committed, since)


# -- durability -------------------------------------------------------------------------------
def test_tags_survive_close_and_reopen_after_their_segments_are_deleted(root: Path) -> None:
    with FileChannel(**settings(root)) as ch:
        first = put_tagged(ch, "drained", 30, size=3000)  # 90 KB: more than one segment
        put_tagged(ch, "queued", 2)
        with ch.transaction() as tx:
            tx.take(30)
        assert ch.checkpoint().deleted_logs  # the "drained" COMMIT's segment is gone
        expected = ch.find_tag("drained"), ch.find_tag("queued")
    with FileChannel(**settings(root)) as ch:
        assert ch.replay_stats.frames == 0  # everything came from the checkpoint
        assert (ch.find_tag("drained"), ch.find_tag("queued")) == expected
        assert expected[0] is not None and expected[0].first_seq == first[0]
    report = verify_channel(str(root / "checkpoint"), [str(root / "data")])
    assert report.ok, report.findings


def test_tags_survive_a_full_replay_fallback(root: Path) -> None:
    with FileChannel(**settings(root)) as ch:
        put_tagged(ch, "a", 3)
        put_tagged(ch, "b", 4, size=3000)
        expected = ch.find_tag("a"), ch.find_tag("b")
    remove_checkpoint(root)
    with FileChannel(**settings(root)) as ch:
        assert ch.replay_stats.frames > 0
        assert (ch.find_tag("a"), ch.find_tag("b")) == expected
    (root / "checkpoint" / "checkpoint.meta").write_bytes(b"damaged")
    with FileChannel(**settings(root)) as ch:
        assert ch.checkpoint_problem is not None
        assert (ch.find_tag("a"), ch.find_tag("b")) == expected


def test_tag_is_durable_exactly_when_its_events_are(root: Path) -> None:
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **settings(root, durability="page_cache"))
    put_tagged(ch, "unsynced", 2)
    assert ch.find_tag("unsynced") is not None  # page_cache: visible before it is on disk
    fs.crash()  # power loss: the unsynced commit and its tag are gone together
    ch.close()
    with FileChannel(**settings(root)) as ch:
        assert ch.find_tag("unsynced") is None and len(ch) == 0
        put_tagged(ch, "synced", 2)
    with FileChannel(**settings(root)) as ch:
        assert ch.find_tag("synced") is not None and len(ch) == 2


_CHILD = """
import sys, time
from ingest_toolkit.channel import Event, FileChannel
root, mode = sys.argv[1], sys.argv[2]
ch = FileChannel(checkpoint_dir=root + "/checkpoint", data_dirs=[root + "/data"], min_free_bytes=0,
                 preallocate_bytes=0, checkpoint_interval=0.0, spill_bytes=4096, max_file_size=65536,
                 max_event_size=8192)
def done(tag):
    r = ch.find_tag(tag)
    print("TAG", r.tag, r.first_seq, r.count, r.commit_unix_ns, flush=True)
with ch.transaction("a") as tx:
    tx.put_many([Event(b"a" * 10) for _ in range(3)])
done("a")
if mode == "checkpoint":
    ch.checkpoint()
with ch.transaction("b") as tx:
    tx.put_many([Event(b"b" * 3000) for _ in range(4)])  # spills before its commit
    if mode == "checkpoint":
        ch.checkpoint()  # taken while "b" is open with spilled frames
done("b")
print("OK", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("mode", ["no-checkpoint", "checkpoint"])
def test_tags_survive_sigkill_after_commit(root: Path, mode: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(root), mode], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None
        lines = [child.stdout.readline().split() for _ in range(3)]
        assert lines[-1] == ["OK"], lines
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    expected = [TagRecord(w[1], int(w[2]), int(w[3]), int(w[4])) for w in lines[:2]]
    with FileChannel(**settings(root)) as ch:
        assert [ch.find_tag("a"), ch.find_tag("b")] == expected
        assert len(ch) == 7
        assert ch.last_checkpoint is not None  # the reopen replayed frames and checkpointed
    with FileChannel(**settings(root)) as ch:  # and from that checkpoint
        assert [ch.find_tag("a"), ch.find_tag("b")] == expected
    report = verify_channel(str(root / "checkpoint"), [str(root / "data")])
    assert report.ok, report.findings


# -- concurrency ------------------------------------------------------------------------------
def test_concurrent_transactions_with_different_tags(ch: FileChannel) -> None:
    results: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for i in range(20):
                tag = f"w{w}-{i}"
                results[tag] = put_tagged(ch, tag, 1 + (w + i) % 5)
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 120 and ch.stats()["tags"] == 120
    for tag, seqs in results.items():
        record = ch.find_tag(tag)
        assert record is not None and (record.first_seq, record.count) == (seqs[0], len(seqs))
    assert drain(ch) == sum(map(len, results.values()))
