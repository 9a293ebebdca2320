"""Tail source: complete lines only, rotation by rename, truncation, restarts, exactly once."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.collect.sources import TailSettings, TailSource

from .conftest import ChannelFactory, bodies, simple_pipeline


def make_source(tmp_path: Path, channel: FileChannel, patterns: list[str], **settings: Any) -> TailSource:
    config = TailSettings(type="tail", paths=patterns, channels=["ch"], **settings)
    return TailSource("tail", config, simple_pipeline(channel), state_dir=tmp_path / "state")


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_complete_lines_only_and_partial_line_waits(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    log = tmp_path / "app.log"
    log.write_bytes(b"a\nb\npart")
    source = make_source(tmp_path, ch, [str(tmp_path / "*.log")])
    source.poll()
    assert bodies(ch) == [b"a", b"b"]
    source.poll()
    assert bodies(ch) == []
    append(log, b"ial\nc\n")
    source.poll()
    assert bodies(ch) == [b"partial", b"c"]


def test_rename_rotation_reads_the_old_file_to_its_end_first(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    log = tmp_path / "app.log"
    log.write_bytes(b"old-1\n")
    source = make_source(tmp_path, ch, [str(log)], rotate_grace=0.0, path_header="path")
    source.poll()
    assert bodies(ch) == [b"old-1"]
    with open(log, "ab") as writer:  # the writer keeps its descriptor across the rename
        writer.write(b"old-2\n")
        os.rename(log, tmp_path / "app.log.1")
        writer.write(b"old-3\nold-tail")  # written after the rotation, before the writer reopens
        writer.flush()
        log.write_bytes(b"new-1\n")
        source.poll()
    events = [(e.body, e.headers["path"]) for e in _drain(ch)]
    assert [b for b, _ in events] == [b"old-2", b"old-3", b"old-tail", b"new-1"]
    assert source.stats()["rotations"] == 1 and source.stats()["files"] == 1
    append(log, b"new-2\n")
    source.poll()
    assert bodies(ch) == [b"new-2"]


def test_rotated_file_matched_by_the_pattern_just_continues(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    log = tmp_path / "app.log"
    log.write_bytes(b"1\n")
    source = make_source(tmp_path, ch, [str(tmp_path / "app.log*")])
    source.poll()
    append(log, b"2\n")
    os.rename(log, tmp_path / "app.log.1")
    log.write_bytes(b"3\n")
    source.poll()
    assert bodies(ch) == [b"1", b"2", b"3"]


def test_truncation_restarts_at_zero(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    log = tmp_path / "app.log"
    log.write_bytes(b"line-1\nline-2\nline-3\n")
    source = make_source(tmp_path, ch, [str(log)])
    source.poll()
    assert len(bodies(ch)) == 3
    with open(log, "r+b") as f:  # copytruncate: same inode, shorter content
        f.truncate(0)
    append(log, b"fresh\n")
    source.poll()
    assert bodies(ch) == [b"fresh"]
    log.write_bytes(b"rewritten and longer than before, same inode\n")  # truncated and regrown between polls
    source.poll()
    assert bodies(ch) == [b"rewritten and longer than before, same inode"]
    assert source.stats()["truncations"] == 2


def test_crash_after_commit_then_restart_is_exactly_once(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(b"%d\n" % i for i in range(50)))
    first = make_source(tmp_path, ch, [str(log)], batch_size=10)
    calls = {"n": 0}

    def crash(point: str) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated crash")

    first.crash_hook = crash
    with pytest.raises(RuntimeError):
        first.poll()
    append(log, b"".join(b"%d\n" % i for i in range(50, 70)))  # more data before the restart
    second = make_source(tmp_path, ch, [str(log)], batch_size=25)
    second.poll()
    assert bodies(ch) == [b"%d" % i for i in range(70)]
    assert second.stats()["duplicates"] == 1


def test_restart_resumes_and_detects_a_replaced_file(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    log = tmp_path / "app.log"
    log.write_bytes(b"a\nb\n")
    first = make_source(tmp_path, ch, [str(log)])
    first.poll()
    first.stop(1)
    append(log, b"c\n")
    second = make_source(tmp_path, ch, [str(log)])
    second.poll()
    second.stop(1)
    assert bodies(ch) == [b"a", b"b", b"c"]
    log.unlink()
    log.write_bytes(b"x\ny\nz\nw\n")  # another file under the same name (maybe even the same inode)
    third = make_source(tmp_path, ch, [str(log)])
    third.poll()
    assert bodies(ch) == [b"x", b"y", b"z", b"w"]


def test_start_at_end_symlinks_and_background_thread(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    log = tmp_path / "app.log"
    log.write_bytes(b"history\n")
    (tmp_path / "link.log").symlink_to(log)
    source = make_source(tmp_path, ch, [str(tmp_path / "*.log")], start_at="end", poll_interval=0.02)
    source.start()
    try:
        deadline = time.monotonic() + 10
        while source.stats()["files"] < 1:  # start_at=end: lines written before discovery are skipped
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for i in range(5):
            append(log, b"live-%d\n" % i)
            time.sleep(0.01)
        deadline = time.monotonic() + 10
        got: list[bytes] = []
        while len(got) < 5 and time.monotonic() < deadline:
            got += bodies(ch)
            time.sleep(0.02)
    finally:
        source.stop(5)
    assert got == [b"live-%d" % i for i in range(5)]
    assert source.stats()["files_refused"] == 1


def _drain(ch: FileChannel) -> list[Any]:
    from .conftest import drain
    return drain(ch)


def test_oversized_fail_stops_only_that_file(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    (tmp_path / "a.log").write_bytes(b"ok\n" + b"x" * 50 + b"\nafter\n")
    (tmp_path / "b.log").write_bytes(b"b-line\n")
    source = make_source(tmp_path, ch, [str(tmp_path / "*.log")], max_event_bytes=10, oversized="fail")
    source.poll()
    source.poll()
    assert bodies(ch) == [b"ok", b"b-line"]
    assert source.stats()["errors"] == 1
