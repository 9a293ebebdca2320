"""A segment the channel's own files prove was written is never taken for an interrupted creation.

Proof that a segment was written: it is sealed (its ``.meta`` exists), a later segment exists,
or the checkpoint refers to it. Such a segment that comes back empty, shorter than its 64-byte
header or with a zeroed header is damage: open refuses, naming the file and the repair command,
``channel verify`` reports it, and ``channel repair`` says what it would lose before it changes
anything. Only the newest segment with no such proof is an interrupted creation, removed on open.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.cli import main
from ingest_toolkit.errors import CorruptLogError, SegmentLostError
from tests.channel.checkpoint_helpers import queued, take

HEADER = fmt.SEGMENT_HEADER_SIZE


def settings(root: Path) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "data")], "max_file_size": 64 * 1024,
            "min_free_bytes": 0, "preallocate_bytes": 8192, "keep_alive": 0.0, "checkpoint_interval": 0}


def dir_args(root: Path) -> list[str]:
    return ["--checkpoint-dir", str(root / "cp"), "--data-dir", str(root / "data")]


def put(channel: FileChannel, *bodies: bytes) -> None:
    with channel.transaction() as tx:
        tx.put_many([Event(b) for b in bodies])


def segment(root: Path, log_id: int) -> Path:
    return root / "data" / f"log-{log_id}"


def issue_history(root: Path) -> None:
    """``a b`` in log-1; ``c d`` put and ``a`` taken in log-2, sealed by the close."""
    with FileChannel(**settings(root)) as channel:
        put(channel, b"a", b"b")
    with FileChannel(**settings(root)) as channel:
        put(channel, b"c", b"d")
        assert take(channel, 1) == [b"a"]
    assert segment(root, 2).with_name("log-2.meta").exists() and not segment(root, 3).exists()


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "in_use.lock"}


LOSSES = {
    "empty": lambda data: b"",
    "shorter than its header": lambda data: data[:30],
    "zeroed header, frames intact": lambda data: bytes(HEADER) + data[HEADER:],
}


@pytest.mark.parametrize("loss", LOSSES)
def test_a_sealed_segment_that_lost_its_header_is_refused_not_removed(tmp_path: Path, loss: str) -> None:
    """The scenario of the issue: the queue must never silently become [a, b]."""
    issue_history(tmp_path)
    log2 = segment(tmp_path, 2)
    log2.write_bytes(LOSSES[loss](log2.read_bytes()))
    (tmp_path / "cp" / "checkpoint.meta").unlink()  # no usable checkpoint: a full replay
    before = snapshot(tmp_path)
    with pytest.raises(SegmentLostError) as raised:
        FileChannel(**settings(tmp_path))
    err = raised.value
    assert isinstance(err, CorruptLogError) and err.path == str(log2)
    assert "channel repair" in str(err) and "sealed" in str(err) and "\n" not in str(err)
    assert snapshot(tmp_path) == before  # nothing removed, nothing rewritten


def crashed_history(root: Path) -> Path:
    """The issue's history as a crash leaves it: ``a b`` in sealed log-1; ``c d`` put (each commit
    synced) and ``a`` taken in log-2, which no .meta and no checkpoint names yet (the case for up
    to ``checkpoint_interval`` after every roll). Returns the copy's root."""
    live = root / "live"
    with FileChannel(**settings(live)) as channel:
        put(channel, b"a", b"b")
    channel = FileChannel(**{**settings(live), "checkpoint_interval": 3600})
    try:
        put(channel, b"c", b"d")
        assert take(channel, 1) == [b"a"]
        crashed = root / "crashed"
        shutil.copytree(live, crashed, ignore=shutil.ignore_patterns("in_use.lock"))
    finally:
        channel.close()
    assert not segment(crashed, 2).with_name("log-2.meta").exists()
    return crashed


def test_a_newest_segment_with_a_zeroed_header_and_frames_behind_it_is_refused(tmp_path: Path) -> None:
    """Issue 28, item 1: frames behind a zeroed header prove the segment was written (its header
    was synced before any frame), so it is damage: never removed as an interrupted creation."""
    root = crashed_history(tmp_path)
    log2 = segment(root, 2)
    log2.write_bytes(bytes(HEADER) + log2.read_bytes()[HEADER:])
    before = snapshot(root)
    with pytest.raises(SegmentLostError, match="frames follow the header") as raised:
        FileChannel(**settings(root))
    assert raised.value.path == str(log2) and "channel repair" in str(raised.value)
    assert snapshot(root) == before  # nothing removed, nothing rewritten
    result = CliRunner().invoke(main, ["channel", "verify", *dir_args(root), "--json"])
    doc = json.loads(result.output)
    assert result.exit_code != 0 and [f["path"] for f in doc["findings"] if f["kind"] == "lost_segment"] == [str(log2)]
    applied = CliRunner().invoke(main, ["channel", "repair", "--yes", *dir_args(root)])
    assert applied.exit_code == 0 and "events lost: 0" in applied.output, applied.output
    with FileChannel(**settings(root)) as channel:
        assert queued(channel) == [b"b", b"c", b"d"]


def test_an_empty_segment_before_a_later_one_is_refused(tmp_path: Path) -> None:
    issue_history(tmp_path)
    with FileChannel(**settings(tmp_path)) as channel:  # log-3
        put(channel, b"e")
    segment(tmp_path, 2).with_name("log-2.meta").unlink()
    segment(tmp_path, 2).write_bytes(b"")
    (tmp_path / "cp" / "checkpoint.meta").unlink()
    with pytest.raises(SegmentLostError, match="a later segment"):
        FileChannel(**settings(tmp_path))


def test_a_newest_segment_the_checkpoint_refers_to_is_refused(tmp_path: Path) -> None:
    issue_history(tmp_path)
    with FileChannel(**settings(tmp_path)) as channel:  # log-3 holds e; the checkpoint points at it
        put(channel, b"e")
    segment(tmp_path, 3).with_name("log-3.meta").unlink()  # as if the seal had not happened
    segment(tmp_path, 3).write_bytes(bytes(HEADER))
    with pytest.raises(SegmentLostError, match="checkpoint"):
        FileChannel(**settings(tmp_path))
    dry = CliRunner().invoke(main, ["channel", "repair", "--dry-run", *dir_args(tmp_path)])
    text = " ".join(dry.output.split())
    assert dry.exit_code == 0 and "no .meta" in text and "checkpoint counts 1 queued" in text, dry.output


def test_an_interrupted_creation_is_still_removed(tmp_path: Path) -> None:
    issue_history(tmp_path)
    (tmp_path / "cp" / "checkpoint.meta").unlink()
    segment(tmp_path, 3).write_bytes(bytes(30))  # newest, unsealed, unknown to the checkpoint
    with FileChannel(**settings(tmp_path)) as channel:
        assert queued(channel) == [b"b", b"c", b"d"]
    assert not segment(tmp_path, 3).with_name("log-3.meta").exists() or segment(tmp_path, 3).stat().st_size >= HEADER


def test_verify_reports_and_repair_states_the_loss_first(tmp_path: Path) -> None:
    issue_history(tmp_path)
    log2 = segment(tmp_path, 2)
    log2.write_bytes(b"")
    (tmp_path / "cp" / "checkpoint.meta").unlink()

    result = CliRunner().invoke(main, ["channel", "verify", *dir_args(tmp_path), "--json"])
    doc = json.loads(result.output)
    assert result.exit_code != 0 and not doc["ok"]
    [lost] = [f for f in doc["findings"] if f["kind"] == "lost_segment"]
    assert lost["path"] == str(log2) and "channel repair" in lost["message"]

    before = snapshot(tmp_path)
    dry = CliRunner().invoke(main, ["channel", "repair", "--dry-run", *dir_args(tmp_path)])
    assert dry.exit_code == 0, dry.output
    text = " ".join(dry.output.split())
    assert "log-2" in text and "5 frames" in text and "lost" in text
    assert snapshot(tmp_path) == before

    applied = CliRunner().invoke(main, ["channel", "repair", "--yes", *dir_args(tmp_path)])
    assert applied.exit_code == 0, applied.output
    assert CliRunner().invoke(main, ["channel", "verify", *dir_args(tmp_path)]).exit_code == 0
    with FileChannel(**settings(tmp_path)) as channel:
        assert queued(channel) == [b"a", b"b"]  # what the repair said it would lose, and only that


def test_repair_of_a_zeroed_header_keeps_every_frame(tmp_path: Path) -> None:
    issue_history(tmp_path)
    log2 = segment(tmp_path, 2)
    data = log2.read_bytes()
    log2.write_bytes(bytes(HEADER) + data[HEADER:])
    applied = CliRunner().invoke(main, ["channel", "repair", "--yes", *dir_args(tmp_path)])
    assert applied.exit_code == 0, applied.output
    assert "events lost: 0" in applied.output
    with FileChannel(**settings(tmp_path)) as channel:
        assert queued(channel) == [b"b", b"c", b"d"]


def test_a_segment_that_vanished_but_left_its_meta_is_refused(tmp_path: Path) -> None:
    """A lost inode can leave no file at all: the .meta of the newest segment still proves it."""
    issue_history(tmp_path)
    segment(tmp_path, 2).unlink()
    (tmp_path / "cp" / "checkpoint.meta").unlink()
    with pytest.raises(SegmentLostError, match="is missing"):
        FileChannel(**settings(tmp_path))
    assert segment(tmp_path, 2).with_name("log-2.meta").exists()
    result = CliRunner().invoke(main, ["channel", "verify", *dir_args(tmp_path), "--json"])
    assert [f["path"] for f in json.loads(result.output)["findings"] if f["kind"] == "lost_segment"] == [
        str(segment(tmp_path, 2))]
    dry = CliRunner().invoke(main, ["channel", "repair", "--dry-run", *dir_args(tmp_path)])
    assert dry.exit_code == 0 and "5 frames" in " ".join(dry.output.split()), dry.output
    applied = CliRunner().invoke(main, ["channel", "repair", "--yes", *dir_args(tmp_path)])
    assert applied.exit_code == 0, applied.output
    with FileChannel(**settings(tmp_path)) as channel:
        assert queued(channel) == [b"a", b"b"]


def test_the_meta_left_by_deleting_a_drained_segment_is_still_removed(tmp_path: Path) -> None:
    issue_history(tmp_path)
    with FileChannel(**settings(tmp_path)) as channel:
        assert take(channel, 3) == [b"b", b"c", b"d"]
        channel.checkpoint()  # log-1 and log-2 are drained and deleted
    assert not segment(tmp_path, 1).exists()
    segment(tmp_path, 1).with_name("log-1.meta").write_bytes(b"")  # a crash between the two deletions
    with FileChannel(**settings(tmp_path)) as channel:
        assert len(channel) == 0
    assert not segment(tmp_path, 1).with_name("log-1.meta").exists()
