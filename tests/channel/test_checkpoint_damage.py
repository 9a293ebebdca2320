"""Bad checkpoints: every bad-checkpoint case of Flume's ``TestFileChannelRestart``, on one history
with deleted segments, an open take and a spilled open put: each either recovers exactly (full
replay, ``checkpoint_problem`` naming the file) or stops with an error naming the file.

Tests that caught library bugs (all fixed since) say so in their docstrings: fallback replay
after deletion, truncated meta accepted, stray ``.meta`` files, checkpoint ids restarting, a
failed open changing files. The ``slow`` tests run only with ``-m slow``.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c

from ingest_toolkit.channel import Event, FileChannel, Transaction
from ingest_toolkit.channel.checkpoint import (
    CHECKPOINT_META,
    decode_meta,
    encode_meta,
    read_checkpoint_meta,
)
from ingest_toolkit.channel.proto import channel_pb2 as pb
from ingest_toolkit.errors import ChannelFullError, ChannelIdentityError, CorruptLogError

from .checkpoint_helpers import (
    SPILL,
    KiB,
    assert_one_checkpoint,
    bodies,
    check_meta,
    checkpoint_names,
    crash,
    data_files,
    listing,
    open_put,
    open_take,
    put,
    queued,
    settings,
    take,
)
from .faultfs import FaultyFileSystem


# == 3. bad checkpoints ===========================================================================
# The history: three sessions in segments that roll only at (re)open (1 MiB max_file_size), so
# every transaction lies in one segment; the first segment is drained and deleted, the last
# session crashes after a checkpoint taken with an open take and an open spilled put, followed
# by more commits. The expected queue is known exactly.
def case_settings(root: Path, **overrides: Any) -> dict[str, Any]:
    return settings(root, max_file_size=1 << 20, max_event_size=64 * KiB, **overrides)


@dataclass(frozen=True)
class History:
    pristine: Path
    expected: list[bytes]
    checkpoint_id: int
    previous: dict[str, bytes]  # checkpoint.meta, queue and inflight files of the checkpoint before
    other: Path  # root of another channel
    puts_committed: int
    takes_committed: int

    def copy(self, root: Path) -> Path:
        shutil.copytree(self.pristine, root)
        return root


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    base = tmp_path_factory.mktemp("history")
    root = base / "channel"
    cfg = case_settings(root)
    with FileChannel(**cfg) as ch:  # log-1
        put(ch, a := bodies("a", 10))
        put(ch, a2 := bodies("a", 10))
    with FileChannel(**cfg) as ch:  # log-2; the close checkpoint deletes the drained log-1
        assert take(ch, 20) == a + a2
        put(ch, b := bodies("b", 12))
        assert take(ch, 2) == b[:2]
    assert "log-1" not in data_files(root)
    previous = {n: (root / "checkpoint" / n).read_bytes() for n in listing(root / "checkpoint")
                if n.startswith("checkpoint")}
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **cfg)  # log-3
    put(ch, c := bodies("c", 10))
    assert take(ch, 3) == b[2:5]
    _tx, taken = open_take(ch, 2)
    assert taken == b[5:7]
    open_put(ch, [b"S" * (SPILL + 100)])
    meta = ch.checkpoint().meta
    assert meta.inflight_takes == 2 and meta.inflight_puts == 1
    put(ch, d := bodies("d", 5))
    assert take(ch, 2) == b[7:9]
    stats = ch.stats()
    crash(fs, ch)
    expected = b[5:7] + b[9:] + c + d
    other = base / "other"
    with FileChannel(**case_settings(other)) as och:
        put(och, [b"other channel"])
    return History(root, expected, meta.checkpoint_id, previous, other,
                   stats["puts_committed"], stats["takes_committed"])


@dataclass(frozen=True)
class Case:
    name: str
    damage: Callable[[Path, History], object]
    names: str | None  # recovery: the file checkpoint_problem must name (None: no problem)
    error: type[Exception] | None = None  # the open must fail with this, naming ``names``
    reason: str | None = None  # also in checkpoint_problem


def _cp(root: Path, name: str) -> Path:
    return root / "checkpoint" / name


def _queue(h: History) -> str:
    return checkpoint_names(h.checkpoint_id)[0]


def _inflight(h: History) -> str:
    return checkpoint_names(h.checkpoint_id)[1]


def _rewrite_meta(root: Path, change: Callable[[pb.CheckpointMeta], None]) -> None:
    """Change a field and write the meta back in its valid framing (length and checksum)."""
    meta = decode_meta(_cp(root, CHECKPOINT_META).read_bytes())
    change(meta)
    _cp(root, CHECKPOINT_META).write_bytes(encode_meta(meta))


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x5A
    path.write_bytes(bytes(data))


def _previous_file(root: Path, h: History, suffix: str, *, forge: bool) -> None:
    """The file of the previous checkpoint under the current one's name (optionally with the
    meta's size and checksum made to match, so that only the id inside tells them apart)."""
    old = next(data for name, data in h.previous.items() if name.endswith(suffix))
    _cp(root, _queue(h) if suffix == ".queue" else _inflight(h)).write_bytes(old)
    if forge:
        def change(meta: pb.CheckpointMeta) -> None:
            prefix = "queue" if suffix == ".queue" else "inflight"
            setattr(meta, f"{prefix}_bytes", len(old))
            setattr(meta, f"{prefix}_crc32c", crc32c(old))
        _rewrite_meta(root, change)


def _remove_checkpoint_files(root: Path) -> None:
    for name in listing(root / "checkpoint"):
        if name.startswith("checkpoint"):
            _cp(root, name).unlink()


def _previous_checkpoint(root: Path, h: History) -> None:
    _remove_checkpoint_files(root)
    for name, data in h.previous.items():
        _cp(root, name).write_bytes(data)


def _copy_other(root: Path, h: History, *, whole: bool) -> None:
    for name in listing(h.other / "checkpoint"):
        if name == CHECKPOINT_META or (whole and name.startswith("checkpoint-")):
            shutil.copy(h.other / "checkpoint" / name, _cp(root, name))


def _newest_log(root: Path) -> int:
    return max(int(n.removeprefix("log-")) for n in data_files(root) if not n.endswith(".meta"))


def _log_path(root: Path, log_id: int) -> Path:
    return root / ("data1", "data2")[log_id % 2] / f"log-{log_id}"


def _truncate_inside_a_field(root: Path, _h: History) -> None:
    data = _cp(root, CHECKPOINT_META).read_bytes()
    _cp(root, CHECKPOINT_META).write_bytes(data[: data.index(b"checkpoint-") + 4])


def _random_meta(seed: int) -> Callable[[Path, History], None]:
    def damage(root: Path, _h: History) -> None:
        rng = random.Random(seed)
        _cp(root, CHECKPOINT_META).write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))))
    return damage


CASES = [
    Case("meta-without-queue-file", lambda r, h: _cp(r, _queue(h)).unlink(), "queue", reason="missing"),
    Case("meta-without-inflight-file", lambda r, h: _cp(r, _inflight(h)).unlink(), "inflight", reason="missing"),
    Case("queue-and-inflight-files-without-meta", lambda r, h: _cp(r, CHECKPOINT_META).unlink(), None),
    Case("no-checkpoint-files-at-all", lambda r, h: _remove_checkpoint_files(r), None),
    Case("empty-meta", lambda r, h: _cp(r, CHECKPOINT_META).write_bytes(b""), CHECKPOINT_META, reason="empty"),
    Case("truncated-meta", _truncate_inside_a_field, CHECKPOINT_META),
    *(Case(f"random-bytes-in-meta-{seed}", _random_meta(seed), CHECKPOINT_META) for seed in range(4)),
    Case("meta-format-version-2", lambda r, h: _rewrite_meta(r, lambda m: setattr(m, "format_version", 2)),
         CHECKPOINT_META, reason="format version 2"),
    Case("queue-file-of-previous-checkpoint", lambda r, h: _previous_file(r, h, ".queue", forge=False), "queue"),
    Case("inflight-file-of-previous-checkpoint", lambda r, h: _previous_file(r, h, ".inflight", forge=False),
         "inflight"),
    Case("queue-file-of-previous-checkpoint-with-matching-checksum",
         lambda r, h: _previous_file(r, h, ".queue", forge=True), "queue", reason="belongs to checkpoint"),
    Case("inflight-file-of-previous-checkpoint-with-matching-checksum",
         lambda r, h: _previous_file(r, h, ".inflight", forge=True), "inflight", reason="belongs to checkpoint"),
    Case("meta-naming-files-of-another-checkpoint-id",
         lambda r, h: _rewrite_meta(r, lambda m: setattr(m, "checkpoint_id", m.checkpoint_id + 1)), "queue",
         reason="belongs to checkpoint"),
    Case("previous-checkpoint-restored-whole", _previous_checkpoint, None),
    Case("damaged-inflight-file", lambda r, h: _flip(_cp(r, _inflight(h)), 9), "inflight", reason="damaged"),
    Case("truncated-inflight-file",
         lambda r, h: _cp(r, _inflight(h)).write_bytes(_cp(r, _inflight(h)).read_bytes()[:-3]), "inflight"),
    Case("damaged-queue-pointer", lambda r, h: _flip(_cp(r, _queue(h)), 32 + 8 * 3 + 4), "queue", reason="damaged"),
    Case("damaged-queue-header", lambda r, h: _flip(_cp(r, _queue(h)), 2), "queue"),
    Case("truncated-queue-file",
         lambda r, h: _cp(r, _queue(h)).write_bytes(_cp(r, _queue(h)).read_bytes()[:-8]), "queue"),
    Case("queue-file-with-extra-pointer",
         lambda r, h: _cp(r, _queue(h)).write_bytes(_cp(r, _queue(h)).read_bytes() + bytes(8)), "queue"),
    Case("meta-of-another-channel", lambda r, h: _copy_other(r, h, whole=False), CHECKPOINT_META,
         error=ChannelIdentityError),
    Case("checkpoint-of-another-channel", lambda r, h: _copy_other(r, h, whole=True), CHECKPOINT_META,
         error=ChannelIdentityError),
    Case("stray-files-of-an-unfinished-checkpoint",
         lambda r, h: [_cp(r, n).write_bytes(b"\x00" * 40) for n in checkpoint_names(h.checkpoint_id + 1)], None),
    Case("stray-checkpoint-meta-tmp", lambda r, h: _cp(r, CHECKPOINT_META + ".tmp").write_bytes(b"junk"), None),
    Case("stray-segment-meta-tmp", lambda r, h: (r / "data1" / "log-2.meta.tmp").write_bytes(b"junk"), None),
    Case("stray-empty-newest-log",
         lambda r, h: _log_path(r, _newest_log(r) + 1).write_bytes(b""), None),
    # Flume's testWithExtraLogs: an empty log file with a high id in every data dir. Empty files
    # hold no frames wherever they are: recovery ignores and removes them, as Flume recovers.
    Case("stray-empty-logs-in-every-data-dir",
         lambda r, h: [(r / d / f"log-{1000 + i}").write_bytes(b"") for i, d in enumerate(("data1", "data2"))],
         None),
    Case("stray-empty-log-below-the-checkpoint", lambda r, h: (r / "data1" / "log-0").write_bytes(b""), None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_checkpoint(tmp_path: Path, history: History, case: Case) -> None:
    root = history.copy(tmp_path / "channel")
    case.damage(root, history)
    cfg = case_settings(root)
    if case.error is not None:
        before = set(data_files(root)) | set(listing(root / "checkpoint"))
        with pytest.raises(case.error) as raised:
            FileChannel(**cfg)
        assert case.names is not None and case.names in str(raised.value)
        after = set(data_files(root)) | set(listing(root / "checkpoint"))
        assert before - after == set(), "a failed open removed files"
        return
    with FileChannel(**cfg) as ch:
        problem = ch.checkpoint_problem
        if case.names is None:
            assert problem is None
        else:
            assert problem is not None and case.names in problem, problem
            assert str(root / "checkpoint") in problem, "the problem must name the file by its path"
            assert case.reason is None or case.reason in problem, problem
            assert ch.replay_stats.frames > 0, "an unusable checkpoint must lead to a full replay"
        assert queued(ch) == history.expected
        assert ch.stats()["puts_committed"] - ch.stats()["takes_committed"] == len(history.expected)
    check_meta(root)
    with FileChannel(**cfg) as ch:  # the recovery's checkpoint is good
        assert (ch.checkpoint_problem, ch.replay_stats.frames) == (None, 0)
        assert queued(ch) == history.expected
        put(ch, [b"after"])
        assert take(ch, 1) == history.expected[:1]
    assert_one_checkpoint(root)
    with FileChannel(**cfg) as ch:
        assert queued(ch) == history.expected[1:] + [b"after"]


def test_checkpoint_id_keeps_increasing_after_a_fallback(tmp_path: Path, history: History) -> None:
    """Caught a bug: after a fallback full replay, checkpoint ids restarted at 1."""
    root = history.copy(tmp_path / "channel")
    _cp(root, CHECKPOINT_META).write_bytes(b"")
    with FileChannel(**case_settings(root)) as ch:
        assert ch.checkpoint_problem is not None
    info = read_checkpoint_meta(str(root / "checkpoint"))
    assert info is not None and info.checkpoint_id > history.checkpoint_id, info


def test_missing_segment_needed_by_the_queue_is_reported_by_name(tmp_path: Path, history: History) -> None:
    root = history.copy(tmp_path / "channel")
    _log_path(root, 2).unlink()
    with pytest.raises(CorruptLogError) as raised:
        FileChannel(**case_settings(root))
    assert raised.value.path == str(_log_path(root, 2)) and "missing" in raised.value.reason


def test_restoring_a_missing_segment_from_a_backup_recovers(tmp_path: Path, history: History) -> None:
    """Caught a bug: the failed open had already removed the missing segment's ``.meta`` (as
    the leftover of a deletion), so restoring the segment, as the error advises, did not help."""
    root = history.copy(tmp_path / "channel")
    backup = tmp_path / "log-2.backup"
    shutil.move(_log_path(root, 2), backup)
    before = set(data_files(root))
    with pytest.raises(CorruptLogError):
        FileChannel(**case_settings(root))
    removed = before - set(data_files(root))
    shutil.move(backup, _log_path(root, 2))
    try:
        with FileChannel(**case_settings(root)) as ch:
            recovered = queued(ch)
    except CorruptLogError as err:
        raise AssertionError(f"the failed open removed {sorted(removed)}; after the restore: {err}") from None
    assert not removed and recovered == history.expected


def test_history_recovers_from_its_checkpoint(tmp_path: Path, history: History) -> None:
    root = history.copy(tmp_path / "channel")
    with FileChannel(**case_settings(root)) as ch:
        assert ch.checkpoint_problem is None
        # after the checkpoint: 5 PUT + COMMIT, TAKE + COMMIT; the take open at checkpoint time
        # wrote nothing; the spilled put's frame was before the checkpoint
        assert ch.replay_stats.frames == 8
        assert queued(ch) == history.expected
        assert ch.stats()["puts_committed"] == history.puts_committed
        assert ch.stats()["takes_committed"] == history.takes_committed


def test_capacity_lowered_below_the_queue(tmp_path: Path, history: History) -> None:
    root = history.copy(tmp_path / "channel")
    expected = history.expected
    capacity = len(expected) - 3
    cfg = case_settings(root, capacity=capacity, transaction_capacity=10)
    with FileChannel(**cfg) as ch:
        assert ch.checkpoint_problem is None
        assert len(ch) == len(expected) and ch.stats()["used"] == len(expected)
        with pytest.raises(ChannelFullError):
            put(ch, [b"refused"])
        assert take(ch, 3) == expected[:3]
        with pytest.raises(ChannelFullError):  # capacity slots in use: still full
            put(ch, [b"refused"])
        assert take(ch, 1) == expected[3:4]
        put(ch, [b"fits"])
        with pytest.raises(ChannelFullError):
            put(ch, [b"refused"])
    info = check_meta(root)
    assert (info.capacity, info.queue_size) == (capacity, capacity)
    with FileChannel(**case_settings(root)) as ch:  # the default capacity again
        assert queued(ch) == expected[4:] + [b"fits"]


def _truncated_meta_runs(tmp_path: Path, history: History, every: bool) -> int:
    """Open the history with its meta cut at each length (every 7th, or every one with
    ``every``); each must be detected, and the full replay must be exact."""
    data = (history.pristine / "checkpoint" / CHECKPOINT_META).read_bytes()
    cuts = range(len(data)) if every else sorted({*range(0, len(data), 7), *range(len(data) - 12, len(data))})
    for cut in cuts:
        root = history.copy(tmp_path / f"cut-{cut}")
        _cp(root, CHECKPOINT_META).write_bytes(data[:cut])
        with FileChannel(**case_settings(root)) as ch:
            problem = ch.checkpoint_problem
            assert problem is not None and str(_cp(root, CHECKPOINT_META)) in problem, (cut, problem)
            assert queued(ch) == history.expected, f"cut at {cut} of {len(data)}: {problem}"
            assert ch.stats()["puts_committed"] - ch.stats()["takes_committed"] == len(history.expected)
        check_meta(root)
        shutil.rmtree(root)
    return len(cuts)


def test_truncated_meta_at_any_length_is_detected(tmp_path: Path, history: History) -> None:
    """Caught a bug: before checkpoint.meta had a checksum, a cut at a protobuf field boundary
    parsed and was loaded with puts_committed, takes_committed, capacity... reset to 0."""
    assert _truncated_meta_runs(tmp_path, history, every=False) > 20


@pytest.mark.slow
def test_truncated_meta_at_every_length_is_detected(tmp_path: Path, history: History) -> None:
    _truncated_meta_runs(tmp_path, history, every=True)


def test_full_replay_fallback_after_deletion_with_a_transaction_spanning_segments(tmp_path: Path) -> None:
    """Caught a bug: the fallback full replay failed the COMMIT count check of a transaction
    whose first frames were in a deleted segment, blaming the healthy log-2."""
    cfg = settings(tmp_path, data_dirs=[str(tmp_path / "data1")])
    with FileChannel(**cfg) as ch:
        put(ch, bodies("x", 100, 1000))  # 100 KB in one commit: starts in log-1, ends in log-2
        assert ch.stats()["writing"] == 2
        take(ch, 100)
        put(ch, keep := bodies("keep", 3))
        assert ch.checkpoint().deleted_logs == [1]
    info = read_checkpoint_meta(cfg["checkpoint_dir"])
    assert info is not None
    _cp(tmp_path, checkpoint_names(info.checkpoint_id)[0]).unlink()
    with FileChannel(**cfg) as ch:  # a full replay of log-2, whose first transaction began in log-1
        assert ch.checkpoint_problem is not None and ch.replay_stats.partial_txns == 1
        assert queued(ch) == keep
    check_meta(tmp_path)


def _random_workload(ch: FileChannel, rng: random.Random, steps: int) -> None:
    """Puts (some spilling, some rolling into the next segment, some rolled back), takes (some
    rolled back, some held open across checkpoints and commits) and checkpoints."""
    counter = 0
    held: Transaction | None = None
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.45:
            items = bodies(f"w{counter:05d}-", rng.choice([1, 3, 10, 40]), rng.choice([10, 300, 2000, SPILL + 100]))
            counter += 1
            with ch.transaction() as tx:
                tx.put_many([Event(b) for b in items])
                if rng.random() < 0.1:
                    tx.rollback()
        elif roll < 0.8:
            with ch.transaction() as tx:
                tx.take(rng.randint(1, max(1, len(ch) // 2)))
                if rng.random() < 0.15:
                    tx.rollback()
        elif roll < 0.9:
            ch.checkpoint()
        elif held is None:
            held = open_take(ch, rng.randint(1, 20))[0]
        else:
            held.commit() if rng.random() < 0.5 else held.rollback()
            held = None
    if held is not None:
        held.rollback()


def _fallback_matches_checkpoint(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    cfg = settings(root / "a")
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **cfg)
    _random_workload(ch, rng, 150)
    ch.checkpoint()
    _random_workload(ch, rng, 10)  # frames after the last checkpoint
    expected = queued(ch)
    deleted = ch.stats()["writing"] - len([n for n in data_files(root / "a") if not n.endswith(".meta")])
    crash(fs, ch)
    shutil.copytree(root / "a", root / "b")
    (root / "b" / "checkpoint" / CHECKPOINT_META).unlink()
    context = f"seed {seed}, {deleted} segments deleted"
    with FileChannel(**cfg) as ch:
        assert ch.checkpoint_problem is None, context
        assert queued(ch) == expected, context
    with FileChannel(**settings(root / "b")) as ch:  # full replay of what deletion left
        assert queued(ch) == expected, context
        assert ch.stats()["puts_committed"] - ch.stats()["takes_committed"] == len(expected)
    check_meta(root / "b")


@pytest.mark.parametrize("seed", range(4))
def test_full_replay_of_what_deletion_left_equals_the_checkpoint_state(tmp_path: Path, seed: int) -> None:
    _fallback_matches_checkpoint(tmp_path, seed)


@pytest.mark.slow
def test_full_replay_of_what_deletion_left_many_seeds(tmp_path: Path) -> None:
    for seed in range(4, 104):
        _fallback_matches_checkpoint(tmp_path / str(seed), seed)
