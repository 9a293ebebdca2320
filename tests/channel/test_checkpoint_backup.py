"""The backup copy of the checkpoint (``backup_checkpoint_dir``).

Each damaged primary (missing, truncated, checksum-bad, ahead of the logs) is opened with the
backup good, stale (its last copies failed, so it is older than the primary) or bad: the channel
always opens with every committed event in order, from the backup when it is usable and by a
full replay only when neither copy is; ``FileChannel.recovery_source`` says which path was
taken. Then: the segments a stale backup needs are kept until a copy succeeds again; a backup
older than the logs or ahead of them is reported and skipped; SIGKILL of a real child process at
every step of a backup copy leaves both copies usable.
"""

from __future__ import annotations

import random
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.channel.checkpoint import (
    CHECKPOINT_META,
    decode_meta,
    encode_meta,
    load_checkpoint,
    read_checkpoint_meta,
)
from ingest_toolkit.channel.tools import inspect_channel, verify_channel
from ingest_toolkit.channel.tools.reports import BackupInfo

from .checkpoint_helpers import bodies, crash, data_files, listing, put, queued, settings, take
from .child_driver import HERE, ChildLog, ChildProcess, crash_child
from .faultfs import FaultyFileSystem


def backup_settings(root: Path, **overrides: Any) -> dict[str, Any]:
    return settings(root, backup_checkpoint_dir=str(root / "backup"), **overrides)


def _meta_path(directory: Path) -> Path:
    return directory / CHECKPOINT_META


def _queue_file(directory: Path) -> Path:
    info = read_checkpoint_meta(str(directory))
    assert info is not None
    return directory / f"checkpoint-{info.checkpoint_id}.queue"


def _segment_ids(root: Path) -> list[int]:
    return sorted(int(n[4:]) for n in data_files(root) if n.startswith("log-") and n[4:].isdigit())


# -- damage ---------------------------------------------------------------------------------------
def _missing(directory: Path) -> None:
    _meta_path(directory).unlink()


def _truncated(directory: Path) -> None:
    meta = _meta_path(directory)
    meta.write_bytes(meta.read_bytes()[: meta.stat().st_size // 2])


def _checksum_bad(directory: Path) -> None:
    queue = _queue_file(directory)
    data = bytearray(queue.read_bytes())
    data[-3] ^= 0x40  # a pointer's byte: the CRC32C in checkpoint.meta no longer matches
    queue.write_bytes(bytes(data))


def _ahead(directory: Path) -> None:
    """A valid, checksummed meta whose log position lies beyond the newest segment."""
    meta = decode_meta(_meta_path(directory).read_bytes())
    meta.log_id += 3
    _meta_path(directory).write_bytes(encode_meta(meta))


PRIMARY_DAMAGE: dict[str, Callable[[Path], None]] = {
    "missing": _missing, "truncated": _truncated, "checksum-bad": _checksum_bad, "ahead": _ahead}


def _build(root: Path, *, stale_backup: bool) -> tuple[list[bytes], int]:
    """A channel with a history (segments drained and deleted), a checkpoint and its backup, then
    commits after it and a power loss. ``stale_backup``: the backup copies of the last two
    checkpoints fail. Returns the committed queue and the backup's checkpoint id."""
    fs = FaultyFileSystem()
    ch = FileChannel(fs=fs, **backup_settings(root))
    expected: list[bytes] = []
    for round_ in range(6):
        put(ch, items := bodies(f"r{round_}-", 40, 600))
        expected += items
        assert take(ch, 25) == expected[:25]
        del expected[:25]
        ch.checkpoint()
    backup_id = ch.last_checkpoint.meta.checkpoint_id if ch.last_checkpoint else 0
    if stale_backup:
        fs.inject("create", path_pattern=r"/backup/", persistent=True)
        for round_ in range(2):
            put(ch, items := bodies(f"s{round_}-", 40, 600))
            expected += items
            assert take(ch, 30) == expected[:30]
            del expected[:30]
            result = ch.checkpoint()
            assert result.backup_error is not None and "backup copy" in result.backup_error
        assert ch.stats()["backup"]["checkpoint_id"] == backup_id < ch.last_checkpoint.meta.checkpoint_id
    put(ch, items := bodies("after-", 30, 600))  # after the last checkpoint: replayed from the log
    expected += items
    assert take(ch, 5) == expected[:5]
    del expected[:5]
    crash(fs, ch)
    return expected, backup_id


def _bad_backup(directory: Path) -> None:
    _checksum_bad(directory)


@pytest.mark.parametrize("backup", ["good", "stale", "bad"])
@pytest.mark.parametrize("damage", sorted(PRIMARY_DAMAGE))
def test_a_damaged_primary_is_restored_from_a_usable_backup(tmp_path: Path, damage: str, backup: str) -> None:
    expected, backup_id = _build(tmp_path, stale_backup=backup == "stale")
    primary_id = read_checkpoint_meta(str(tmp_path / "checkpoint")).checkpoint_id  # type: ignore[union-attr]
    assert (backup_id < primary_id) if backup == "stale" else backup_id == primary_id
    PRIMARY_DAMAGE[damage](tmp_path / "checkpoint")
    if backup == "bad":
        _bad_backup(tmp_path / "backup")
    with FileChannel(**backup_settings(tmp_path)) as ch:
        assert queued(ch) == expected  # every committed event, in order, once
        if backup == "bad":
            assert ch.recovery_source == "full-replay"
            assert ch.backup_problem is not None and "checksum" in ch.backup_problem
        else:
            assert ch.recovery_source == "backup", ch.checkpoint_problem
            assert ch.backup_problem is None
        assert (ch.checkpoint_problem is None) == (damage == "missing")
        # the open wrote a new primary at once, and its backup
        info = read_checkpoint_meta(str(tmp_path / "checkpoint"))
        assert info is not None and info.checkpoint_id > primary_id and info.backup_current
        assert read_checkpoint_meta(str(tmp_path / "backup")).checkpoint_id == info.checkpoint_id  # type: ignore[union-attr]
    with FileChannel(**backup_settings(tmp_path)) as ch:
        assert ch.recovery_source == "checkpoint" and ch.replay_stats.frames == 0
        assert queued(ch) == expected


def test_a_full_replay_replays_more_than_the_restore_from_the_backup(tmp_path: Path) -> None:
    """The restore reads only the frames after the backup's position."""
    expected, _ = _build(tmp_path, stale_backup=False)
    pristine = tmp_path.with_name(tmp_path.name + "-copy")
    shutil.copytree(tmp_path, pristine)
    _missing(tmp_path / "checkpoint")
    with FileChannel(**backup_settings(tmp_path)) as ch:
        restored = ch.replay_stats.frames
        assert ch.recovery_source == "backup" and queued(ch) == expected
    _missing(pristine / "checkpoint")
    shutil.rmtree(pristine / "backup")
    with FileChannel(**backup_settings(pristine)) as ch:
        assert ch.recovery_source == "full-replay" and queued(ch) == expected
        assert ch.replay_stats.frames > restored > 0


def test_without_a_backup_dir_nothing_changes(tmp_path: Path) -> None:
    with FileChannel(**settings(tmp_path)) as ch:
        put(ch, bodies("a", 5))
        assert ch.stats()["backup"] is None and ch.checkpoint().backup_seconds == 0.0
    info = read_checkpoint_meta(str(tmp_path / "checkpoint"))
    assert info is not None and info.backup_checkpoint_id == 0 and info.backup_dir == ""
    _missing(tmp_path / "checkpoint")
    with FileChannel(**settings(tmp_path)) as ch:
        assert ch.recovery_source == "full-replay" and queued(ch) == bodies("a", 5)


# -- deletion keeps what the backup needs -----------------------------------------------------------
def test_segments_a_stale_backup_needs_are_kept_until_a_copy_succeeds(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    with FileChannel(fs=fs, **backup_settings(tmp_path)) as ch:
        put(ch, first := bodies("a", 250, 600))  # about three 64 KiB segments
        ch.checkpoint()
        backup = load_checkpoint(str(tmp_path / "backup"), None)
        assert backup is not None
        needed = {backup.meta.log_id, *backup.meta.log_refcounts}
        assert len(needed) >= 2
        fault = fs.inject("rename", path_pattern=r"/backup/", persistent=True)
        assert take(ch, 250) == first  # every segment the backup points into is drained now
        put(ch, bodies("b", 250, 600))
        failed = ch.checkpoint()
        assert failed.backup_error is not None
        assert min(failed.meta.log_refcounts) > min(needed), "the primary alone would delete some"
        assert needed <= set(_segment_ids(tmp_path)), "a segment the backup needs was deleted"
        assert failed.deleted_logs == []
        assert ch.stats()["backup"]["current"] is False
        fs.clear_faults()
        assert fault.fired
        done = ch.checkpoint()
        assert done.backup_error is None  # the copy caught up: what only the old backup needed goes now
        floor = min(done.meta.log_refcounts)
        assert done.deleted_logs == sorted(lid for lid in needed if lid < floor) != []
        assert min(_segment_ids(tmp_path)) == floor
        assert ch.stats()["backup"] == {"dir": str(tmp_path / "backup"), "checkpoint_id": done.meta.checkpoint_id,
                                        "current": True, "failures": 1, "problem": None}


def test_a_backup_older_than_the_logs_is_reported_and_skipped(tmp_path: Path) -> None:
    """A backup copied back from long ago points into deleted segments: never trusted."""
    with FileChannel(**backup_settings(tmp_path)) as ch:
        put(ch, bodies("a", 250, 600))
        ch.checkpoint()
        ancient = tmp_path / "ancient"
        shutil.copytree(tmp_path / "backup", ancient, ignore=shutil.ignore_patterns("in_use.lock"))
        take(ch, 250)
        put(ch, later := bodies("b", 250, 600))
        ch.checkpoint()
        assert 1 not in _segment_ids(tmp_path)  # the segments the ancient backup points into
    for name in listing(tmp_path / "backup"):
        (tmp_path / "backup" / name).unlink()
    for name in listing(ancient):
        shutil.copy(ancient / name, tmp_path / "backup" / name)
    _missing(tmp_path / "checkpoint")
    with FileChannel(**backup_settings(tmp_path)) as ch:
        assert ch.recovery_source == "full-replay"
        assert ch.backup_problem is not None and "older than the logs" in ch.backup_problem
        assert queued(ch) == later


def test_a_backup_ahead_of_the_logs_is_skipped(tmp_path: Path) -> None:
    with FileChannel(**backup_settings(tmp_path)) as ch:
        put(ch, items := bodies("a", 30, 600))
    _ahead(tmp_path / "backup")
    _missing(tmp_path / "checkpoint")
    with FileChannel(**backup_settings(tmp_path)) as ch:
        assert ch.recovery_source == "full-replay" and queued(ch) == items
        assert ch.backup_problem is not None and "ahead of the logs" in ch.backup_problem


def test_a_primary_ahead_of_the_logs_without_a_backup_is_replaced_by_a_full_replay(tmp_path: Path) -> None:
    with FileChannel(**settings(tmp_path)) as ch:
        put(ch, items := bodies("a", 30, 600))
    _ahead(tmp_path / "checkpoint")
    with FileChannel(**settings(tmp_path)) as ch:
        assert ch.recovery_source == "full-replay" and queued(ch) == items
        assert ch.checkpoint_problem is not None and "ahead of the logs" in ch.checkpoint_problem
        put(ch, more := bodies("b", 3))  # and the new segment's id does not collide with the meta's
    with FileChannel(**settings(tmp_path)) as ch:
        assert ch.recovery_source == "checkpoint" and queued(ch) == items + more


def test_backup_checkpoint_dir_must_be_its_own_directory(tmp_path: Path) -> None:
    from ingest_toolkit.errors import ConfigError

    for clash in (str(tmp_path / "checkpoint"), str(tmp_path / "data1")):
        with pytest.raises(ConfigError, match="backup_checkpoint_dir"):
            FileChannel(**settings(tmp_path, backup_checkpoint_dir=clash))


# -- tools ------------------------------------------------------------------------------------------
def test_inspect_and_verify_report_the_backup(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    dirs = (str(tmp_path / "checkpoint"), [str(tmp_path / "data1"), str(tmp_path / "data2")])
    with FileChannel(fs=fs, **backup_settings(tmp_path)) as ch:
        put(ch, bodies("a", 250, 600))
        ch.checkpoint()
        first = ch.last_checkpoint.meta.checkpoint_id  # type: ignore[union-attr]
        report = inspect_channel(*dirs)
        assert report.backup == BackupInfo(str(tmp_path / "backup"), first, report.backup.written_unix_ns, True)
        fs.inject("create", path_pattern=r"/backup/", persistent=True)  # every later copy fails, the close's too
        take(ch, 250)
        put(ch, bodies("b", 250, 600))
        ch.checkpoint()
        report = inspect_channel(*dirs)
        assert report.backup is not None and report.backup.checkpoint_id == first
        assert report.to_json()["backup"]["current"] is False
        assert report.to_json()["checkpoint"]["backup_checkpoint_id"] == first
    assert 1 in _segment_ids(tmp_path)  # kept for the stale backup
    result = verify_channel(*dirs)
    assert result.ok, result.findings  # the segments the stale backup keeps are not orphans
    assert any("backup" in note and f"#{first}" in note for note in result.notes), result.notes
    _checksum_bad(tmp_path / "backup")
    result = verify_channel(*dirs)
    # unusable, it keeps nothing: the segments only it needed are orphans now (the next open deletes them)
    assert {f.kind for f in result.findings} == {"backup_unusable", "orphaned_log"}
    assert inspect_channel(*dirs).to_json()["backup"]["current"] is False  # inspect reads the meta only
    _truncated(tmp_path / "backup")
    assert "truncated or damaged" in inspect_channel(*dirs).to_json()["backup"]["problem"]


# -- SIGKILL during the backup copy --------------------------------------------------------------------
CHILD_PATH = HERE / "checkpoint_child.py"
BACKUP_STEPS = 17  # file operations of one copy: 4 per data file, a directory sync, 5 for the meta, 3 removals


def _kill_during_backup(root: Path, seed: int, queue: list[int], start: int, step: int,
                        trial: int) -> tuple[list[int], int, str]:
    """Run checkpoint_child with a backup until it announces the ``step``-th backup file operation
    after opening; SIGKILL it while it waits before that operation. Returns the queue it left,
    its largest counter and the operation it died before."""
    argv = [sys.executable, str(CHILD_PATH), str(root / "checkpoint"), str(root / "data1"), str(root / "data2"),
            "--seed", str(seed), "--interval", "0", "--checkpoint-share", "0.3",
            "--backup-dir", str(root / "backup"), "--backup-delay", "0.02", "--wait-go"]
    child = ChildProcess(argv, stderr=root / f"child-{trial}.err")
    child.go(start)
    assert child.wait_for("READY"), child.describe()
    seen = child.count("BKUP")
    assert child.wait_count("BKUP", seen + step), child.describe()
    lines = child.kill()
    assert child.proc.returncode == -signal.SIGKILL, child.describe()
    report = ChildLog(queue)
    for line in lines:
        report.apply(line)
    assert report.in_checkpoint, "the kill did not land inside checkpoint()"
    (left,) = report.candidates()  # no transaction was open: the worker was in checkpoint()
    return left, report.max_counter, [line for line in lines if line.startswith("BKUP")][-1]


def test_sigkill_during_the_backup_copy_leaves_both_copies_usable(tmp_path: Path, crash_seed: int) -> None:
    """A real child process is killed before each file operation of a backup copy in turn (in a
    random order). Both copies are then complete: the primary as committed before the copy
    began, the backup the previous copy or the new one. Every other reopen first deletes the
    primary's checkpoint.meta, so that the state must come from the backup."""
    rng = random.Random(crash_seed)
    steps = rng.sample(range(1, BACKUP_STEPS + 1), 10)
    queue: list[int] = []
    start = 1
    sources: dict[str, int] = {}
    for trial, step in enumerate(steps, 1):
        left, max_counter, announced = _kill_during_backup(tmp_path, rng.randrange(1 << 31), queue, start, step,
                                                           trial)
        context = f"CRASH_SEED={crash_seed} trial {trial}: killed before {announced!r}"
        start = max(start, max_counter + 1)
        primary = load_checkpoint(str(tmp_path / "checkpoint"), None)
        backup = load_checkpoint(str(tmp_path / "backup"), None)  # raises if the kill left a partial one
        assert primary is not None and backup is not None, context
        assert backup.meta.checkpoint_id in (primary.meta.checkpoint_id - 1, primary.meta.checkpoint_id), context
        restore = trial % 2 == 0
        if restore:
            _missing(tmp_path / "checkpoint")
        cfg = crash_child.channel_settings(str(tmp_path / "checkpoint"),
                                           [str(tmp_path / "data1"), str(tmp_path / "data2")], "fsync")
        cfg.update(checkpoint_interval=0.0, backup_checkpoint_dir=str(tmp_path / "backup"))
        with FileChannel(**cfg) as ch:
            assert ch.recovery_source == ("backup" if restore else "checkpoint"), (context, ch.checkpoint_problem)
            sources[ch.recovery_source] = sources.get(ch.recovery_source, 0) + 1
            with ch.transaction() as tx:
                events = tx.take(len(ch))
                tx.rollback()
        counters = [crash_child.counter_of(e) for e in events]
        assert all(e.body == crash_child.body_for(c) for e, c in zip(events, counters, strict=True)), context
        assert counters == left, f"{context}: {len(counters)} events recovered, {len(left)} committed"
        queue = counters
    assert sources == {"backup": 5, "checkpoint": 5}


def test_repair_removes_the_backup_too_so_the_next_open_replays_in_full(tmp_path: Path) -> None:
    """A restored backup would point into the frames repair replaced by NOOPs."""
    from ingest_toolkit.channel import format as fmt
    from ingest_toolkit.channel.tools import repair_channel

    with FileChannel(**backup_settings(tmp_path)) as ch:
        for round_ in range(8):
            put(ch, bodies(f"r{round_}-", 30, 600))
    oldest = tmp_path / "data2" / "log-1"
    data = oldest.read_bytes()
    offset, puts = fmt.SEGMENT_HEADER_SIZE, []
    while offset < len(data):
        ftype, length, _txn, _seq = fmt.check_frame(data, offset, len(data))
        puts += [(offset, length)] if ftype == fmt.FrameType.PUT else []
        offset += length
    victim, length = puts[len(puts) // 2]
    damaged = bytearray(data)
    damaged[victim + length - 10] ^= 0xFF  # inside an event body: the frame's CRC fails
    oldest.write_bytes(bytes(damaged))
    dirs = (str(tmp_path / "checkpoint"), [str(tmp_path / "data1"), str(tmp_path / "data2")])
    report = repair_channel(*dirs, dry_run=False)
    assert report.checkpoint_removed and report.queue_after is not None and report.queue_after < 240
    assert not _meta_path(tmp_path / "checkpoint").exists() and not _meta_path(tmp_path / "backup").exists()
    with FileChannel(**backup_settings(tmp_path)) as ch:
        assert ch.recovery_source == "full-replay" and ch.backup_problem is None
        assert len(queued(ch)) == report.queue_after  # every event readable


def test_a_reader_without_the_backup_fields_still_reads_checkpoint_meta(tmp_path: Path) -> None:
    """checkpoint.meta is public: a reader generated from the .proto before the backup fields
    existed parses the new file (protobuf skips unknown fields) and sees the same values."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from ingest_toolkit.channel.proto import channel_pb2 as pb

    with FileChannel(**backup_settings(tmp_path)) as ch:
        put(ch, bodies("a", 10))
    data = _meta_path(tmp_path / "checkpoint").read_bytes()
    new = decode_meta(data)
    assert new.backup_checkpoint_id == new.checkpoint_id and new.backup_dir == str(tmp_path / "backup")
    proto = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(proto)
    meta_type = next(m for m in proto.message_type if m.name == "CheckpointMeta")
    kept = [f for f in meta_type.field if f.name not in ("backup_checkpoint_id", "backup_dir")]
    del meta_type.field[:]
    meta_type.field.extend(kept)
    pool = descriptor_pool.DescriptorPool()  # a pool of its own: the same names, the old fields
    pool.Add(proto)
    old_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{proto.package}.CheckpointMeta"))
    old = old_class.FromString(data[12:-4])  # the documented framing: 12-byte header, 4-byte CRC
    assert old.checkpoint_id == new.checkpoint_id and old.queue_size == new.queue_size == 10
    assert dict(old.log_refcounts) == dict(new.log_refcounts) and old.queue_file == new.queue_file
