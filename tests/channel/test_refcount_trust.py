"""Reference counts are never trusted over the queue they describe (issue 28, item 4).

``checkpoint.meta`` carries a CRC, but a CRC-valid file can still hold counts its queue does not
support (a field lost by a writer bug, an edit, a flip before the CRC was computed). Segment
deletion rests on those counts, so: a checkpoint whose counts disagree with its own queue and
open takes is refused at open (the backup copy or a full replay recounts them), a checkpoint the
frames after it contradict falls back to a full replay instead of failing with a bare
``ValueError``, and the checkpointer keeps any segment an event still points into, whatever the
counts say.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.checkpoint import CHECKPOINT_META, decode_meta, encode_meta

from .checkpoint_helpers import queued, take


def settings(root: Path, **more: Any) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "data")], "min_free_bytes": 0,
            "keep_alive": 0.0, "checkpoint_interval": 0, **more}


def three_sessions(root: Path) -> None:
    """``x0`` in log-1, ``x1`` in log-2, ``x2`` in log-3 (every open starts a segment)."""
    for i in range(3):
        with FileChannel(**settings(root)) as channel, channel.transaction() as tx:
            tx.put(Event(b"x%d" % i))


def edit_meta(root: Path, change: Any) -> None:
    path = root / "cp" / CHECKPOINT_META
    meta = decode_meta(path.read_bytes())
    change(meta)
    path.write_bytes(encode_meta(meta))  # a valid CRC: only the counts are wrong


def segments(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "data").glob("log-*") if p.name[4:].isdigit())


def test_a_checkpoint_without_its_reference_counts_is_refused_and_nothing_is_deleted(tmp_path: Path) -> None:
    """The issue's case: with ``log_refcounts`` missing, the close deleted log-1 and log-2 while
    three queued events pointed into them, and every later take failed."""
    three_sessions(tmp_path)
    edit_meta(tmp_path, lambda meta: meta.ClearField("log_refcounts"))
    with FileChannel(**settings(tmp_path)) as channel:
        assert channel.recovery_source == "full-replay"
        assert "reference counts do not match the queue" in (channel.checkpoint_problem or "")
        assert len(channel) == 3
    assert {"log-1", "log-2", "log-3"} <= set(segments(tmp_path))
    with FileChannel(**settings(tmp_path)) as channel:
        assert take(channel, 3) == [b"x0", b"x1", b"x2"]


@pytest.mark.parametrize("change", ["moved to another log", "one more", "queue size"])
def test_counts_that_disagree_with_the_queue_are_refused(tmp_path: Path, change: str) -> None:
    three_sessions(tmp_path)

    def wrong(meta: Any) -> None:
        if change == "moved to another log":  # the same sum, in the wrong segments
            meta.log_refcounts[1] = 0
            meta.log_refcounts[3] = 2
        elif change == "one more":
            meta.log_refcounts[2] = 2
        else:
            meta.queue_size = 2
    edit_meta(tmp_path, wrong)
    with FileChannel(**settings(tmp_path)) as channel:
        assert channel.recovery_source == "full-replay" and channel.checkpoint_problem
        assert queued(channel) == [b"x0", b"x1", b"x2"]


def test_a_committed_take_after_counts_that_lie_falls_back_to_a_full_replay(tmp_path: Path) -> None:
    """The issue: the counts lost, and a committed take replayed after the checkpoint drove a
    count to -1, and opening raised a bare ValueError."""
    three_sessions(tmp_path)
    channel = FileChannel(**settings(tmp_path, checkpoint_interval=3600))
    try:
        edit_meta(tmp_path, lambda meta: meta.ClearField("log_refcounts"))  # the checkpoint of this open
        assert take(channel, 1) == [b"x0"]  # a TAKE commit after the checkpoint's position
    finally:
        channel._checkpointer.run = lambda: None  # type: ignore[method-assign]  # close as a crash would
        channel.close()
    with FileChannel(**settings(tmp_path)) as channel:
        assert channel.recovery_source == "full-replay"
        assert queued(channel) == [b"x1", b"x2"]


def test_the_checkpointer_keeps_a_segment_an_event_points_into_whatever_the_counts_say(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    three_sessions(tmp_path)
    with FileChannel(**settings(tmp_path)) as channel:
        assert take(channel, 1) == [b"x0"]
        with channel._cond:  # a bookkeeping bug: log-2 and log-3 counted as drained
            channel._refcounts.clear()
        with caplog.at_level(logging.ERROR):
            result = channel.checkpoint()
        assert result.deleted_logs == [1]  # drained for real; log-2 holds x1
        assert "an event still points into log 2" in caplog.text
        assert take(channel, 2) == [b"x1", b"x2"]
