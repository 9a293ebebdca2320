"""Spooling-directory source: exactly once, restarts, crashes, refusals, policies."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.collect.errors import RefusedFileError
from ingest_toolkit.collect.sources import SpoolDirSettings, SpoolDirSource
from ingest_toolkit.collect.sources.files import open_dir, open_nofollow

from .conftest import ChannelFactory, bodies, channel_settings, drain, simple_pipeline

REPO = Path(__file__).resolve().parents[2]


def make_source(tmp_path: Path, channel: FileChannel, **settings: Any) -> SpoolDirSource:
    spool = tmp_path / "spool"
    spool.mkdir(parents=True, exist_ok=True)
    config = SpoolDirSettings(type="spool_dir", dir=spool, channels=["ch"], **settings)
    return SpoolDirSource("spool", config, simple_pipeline(channel), state_dir=tmp_path / "state")


def drop(spool: Path, name: str, data: bytes) -> None:
    """The drop-then-rename convention: write under a hidden temporary name, then rename."""
    tmp = spool / f".{name}.tmp"
    tmp.write_bytes(data)
    os.rename(tmp, spool / name)


def lines(prefix: str, n: int) -> bytes:
    return b"".join(f"{prefix}-{i}\n".encode() for i in range(n))


def by_file(channel: FileChannel) -> dict[str, list[bytes]]:
    grouped: dict[str, list[bytes]] = defaultdict(list)
    for event in drain(channel):
        grouped[event.headers["file"]].append(event.body)
    return dict(grouped)


def expected(files: dict[str, int]) -> dict[str, list[bytes]]:
    return {name: lines(name, n).splitlines() for name, n in files.items()}


def wait_for(condition: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_many_files_every_line_once_in_order(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = make_source(tmp_path, ch, batch_size=64, file_header="file", poll_interval=0.05)
    files = {f"f{i:02d}.log": 100 + 37 * i for i in range(20)}
    for name, n in list(files.items())[:10]:
        drop(source.settings.dir, name, lines(name, n))
    source.start()
    for name, n in list(files.items())[10:]:  # arriving while the source runs
        drop(source.settings.dir, name, lines(name, n))
    wait_for(lambda: source.stats()["files_completed"] == 20)
    source.stop(5)
    assert by_file(ch) == expected(files)
    assert sorted(p.name for p in source.settings.dir.iterdir()) == sorted(f"{n}.COMPLETED" for n in files)
    stats = source.stats()
    assert stats["events"] == sum(files.values()) and stats["duplicates"] == 0 and stats["errors"] == 0


def test_stop_midway_and_resume_with_a_new_instance(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    first = make_source(tmp_path, ch, batch_size=10, file_header="file", poll_interval=0.05)
    files = {"a.log": 95, "b.log": 42}
    for name, n in files.items():
        drop(first.settings.dir, name, lines(name, n))
    commits = {"n": 0}

    def stop_after_three(point: str) -> None:
        commits["n"] += point == "after_commit"
        if commits["n"] == 3:
            threading.Thread(target=first.stop).start()

    first.crash_hook = stop_after_three
    first.start()
    wait_for(lambda: not first.stats()["running"])
    assert first.stats()["batches"] == 3
    second = make_source(tmp_path, ch, batch_size=7, file_header="file")  # a different batch size is fine
    second.poll()
    assert by_file(ch) == expected(files)
    assert second.stats()["duplicates"] == 0


def test_crash_between_commit_and_position_write_is_exactly_once(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    first = make_source(tmp_path, ch, batch_size=10, file_header="file")
    drop(first.settings.dir, "a.log", lines("a.log", 55))
    calls = {"n": 0}

    def crash(point: str) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated crash after the channel commit")

    first.crash_hook = crash
    with pytest.raises(RuntimeError):
        first.poll()
    second = make_source(tmp_path, ch, batch_size=25, file_header="file")
    second.poll()
    assert second.stats()["duplicates"] == 1  # the re-sent batch was recognised by its batch id
    assert by_file(ch) == expected({"a.log": 55})


@pytest.mark.parametrize(("point", "after"), [("after_commit", 1), ("after_commit", 4), ("before_finish", 1)])
def test_sigkill_at_any_point_then_restart_is_exactly_once(tmp_path: Path, point: str, after: int) -> None:
    settings = channel_settings(tmp_path / "ch")
    spool, state = tmp_path / "spool", tmp_path / "state"
    spool.mkdir()
    files = {"a.log": 33, "b.log": 20}
    for name, n in files.items():
        drop(spool, name, lines(name, n))
    args = {"channel": settings, "spool": str(spool), "state": str(state), "point": point, "after": after,
            "batch": 8}
    child = subprocess.run([sys.executable, str(Path(__file__).with_name("spool_child.py")), json.dumps(args)],
                           cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60,
                           capture_output=True)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    ch = FileChannel(**settings)
    try:
        source = SpoolDirSource("spool", SpoolDirSettings(type="spool_dir", dir=spool, channels=["ch"], batch_size=8,
                                                          file_header="file"),
                                simple_pipeline(ch), state_dir=state)
        source.poll()
        assert by_file(ch) == expected(files)
        # killed after a commit but before the position write: the re-sent batch is a duplicate
        assert source.stats()["duplicates"] == (point == "after_commit")
    finally:
        ch.close()


def test_symlinks_hardlinks_subdirs_and_escapes_are_refused(tmp_path: Path, make_channel: ChannelFactory,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    ch = make_channel()
    source = make_source(tmp_path, ch)
    spool = source.settings.dir
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"password\n")
    (spool / "link.log").symlink_to(secret)
    (spool / "dirlink").symlink_to(tmp_path)
    os.link(secret, spool / "hard.log")
    (spool / "sub").mkdir()
    (spool / "sub" / "inner.log").write_bytes(b"inner\n")
    os.mkfifo(spool / "pipe.log")
    drop(spool, "good.log", b"good\n")
    with caplog.at_level(logging.ERROR, logger="ingest_toolkit.collect.spool_dir"):
        source.poll()
        source.poll()  # refusals are logged and counted once per file
    assert bodies(ch) == [b"good"]
    assert source.stats()["files_refused"] == 3  # two symlinks and the hard link
    assert (spool / "link.log").is_symlink() and secret.read_bytes() == b"password\n"
    assert (spool / "sub" / "inner.log").exists() and (spool / "hard.log").exists()
    assert sum("symbolic link" in r.getMessage() for r in caplog.records) == 2
    fd = open_dir(str(spool))
    try:
        for name in ("../secret.txt", "sub/inner.log", "..", "link.log"):
            with pytest.raises(RefusedFileError):
                os.close(open_nofollow(name, dir_fd=fd)[0])
    finally:
        os.close(fd)


def test_temporary_and_ignored_names_wait_for_the_rename(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = make_source(tmp_path, ch, ignore_pattern=r"\.partial$", file_header="file")
    spool = source.settings.dir
    (spool / ".x.log.tmp").write_bytes(b"hidden\n")
    (spool / "y.log.tmp").write_bytes(b"suffix\n")
    (spool / "z.log.partial").write_bytes(b"pattern\n")
    source.poll()
    assert bodies(ch) == []
    os.rename(spool / ".x.log.tmp", spool / "x.log")
    os.rename(spool / "y.log.tmp", spool / "y.log")
    source.poll()
    assert by_file(ch) == {"x.log": [b"hidden"], "y.log": [b"suffix"]}
    assert (spool / "z.log.partial").exists()


BAD = b"first\nsecond \xff\xfe here\nthird\n"


def test_decode_errors_fail_moves_the_file_aside_and_delivers_nothing(
        tmp_path: Path, make_channel: ChannelFactory, caplog: pytest.LogCaptureFixture) -> None:
    ch = make_channel()
    source = make_source(tmp_path, ch)
    drop(source.settings.dir, "bad.log", BAD)
    drop(source.settings.dir, "ok.log", b"fine\n")
    with caplog.at_level(logging.ERROR, logger="ingest_toolkit.collect.spool_dir"):
        source.poll()
    assert bodies(ch) == [b"fine"]
    assert (source.settings.dir / "bad.log.FAILED").read_bytes() == BAD  # nothing lost
    assert source.stats()["files_failed"] == 1
    assert any("byte offset 13 (line 2)" in r.getMessage() for r in caplog.records)


def test_decode_errors_replace_and_skip_file(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = make_source(tmp_path / "r", ch, decode_errors="replace")
    drop(source.settings.dir, "bad.log", BAD)
    source.poll()
    assert bodies(ch) == [b"first", "second \ufffd\ufffd here".encode(), b"third"]
    assert source.stats()["decode_replaced"] == 1
    skip = make_source(tmp_path / "s", ch, decode_errors="skip-file")
    drop(skip.settings.dir, "bad.log", BAD)
    skip.poll()
    skip.poll()
    assert bodies(ch) == [] and (skip.settings.dir / "bad.log").read_bytes() == BAD
    assert skip.stats()["files_skipped"] == 1


def test_other_encodings_are_stored_as_utf8(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = make_source(tmp_path, ch, encoding="latin-1")
    drop(source.settings.dir, "l1.log", "caf\xe9\n".encode("latin-1"))
    source.poll()
    assert bodies(ch) == ["caf\xe9".encode()]
    with pytest.raises(ValueError, match="ASCII-compatible"):
        SpoolDirSettings(type="spool_dir", dir=tmp_path, channels=["ch"], encoding="utf-16")


def test_oversized_lines_policies(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    data = b"short\n" + b"x" * 25 + b"\nend\n"
    results = {}
    for policy in ("fail", "truncate", "split"):
        source = make_source(tmp_path / policy, ch, max_event_bytes=10, oversized=policy)
        drop(source.settings.dir, "big.log", data)
        source.poll()
        results[policy] = bodies(ch)
    assert results["fail"] == [] and (tmp_path / "fail" / "spool" / "big.log.FAILED").exists()
    assert results["truncate"] == [b"short", b"x" * 10, b"end"]
    assert results["split"] == [b"short", b"x" * 10, b"x" * 10, b"x" * 5, b"end"]


def test_file_unit_delete_policy_and_empty_file(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = make_source(tmp_path, ch, unit="file", completed="delete")
    drop(source.settings.dir, "one.bin", b"\x00\x01two\nlines\n")
    drop(source.settings.dir, "empty.bin", b"")
    source.poll()
    assert bodies(ch) == [b"\x00\x01two\nlines\n"]
    assert list(source.settings.dir.iterdir()) == []


def test_file_changed_after_pickup_is_kept_aside(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = make_source(tmp_path, ch)
    drop(source.settings.dir, "grow.log", b"a\nb\n")

    def append(point: str) -> None:
        if point == "before_finish":
            with open(source.settings.dir / "grow.log", "ab") as f:
                f.write(b"late\n")

    source.crash_hook = append
    source.poll()
    assert bodies(ch) == [b"a", b"b"]
    assert (source.settings.dir / "grow.log.FAILED").read_bytes() == b"a\nb\nlate\n"
    assert source.stats()["files_modified"] == 1


def test_full_channel_is_retried_without_losing_data(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel(capacity=10, transaction_capacity=5)
    source = make_source(tmp_path, ch, batch_size=5, poll_interval=0.05, max_backoff=0.1)
    drop(source.settings.dir, "a.log", lines("a", 30))
    source.start()
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 30 and time.monotonic() < deadline:
        got += bodies(ch)
        time.sleep(0.05)
    source.stop(5)
    assert got == lines("a", 30).splitlines()
    assert source.stats()["retries"] > 0


def test_completed_name_clash_keeps_both(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = make_source(tmp_path, ch)
    drop(source.settings.dir, "same.log", b"1\n")
    source.poll()
    drop(source.settings.dir, "same.log", b"2\n")
    source.poll()
    assert bodies(ch) == [b"1", b"2"]
    done = sorted(p.name for p in source.settings.dir.iterdir())
    assert len(done) == 2 and all(n.startswith("same.log.") and n.endswith(".COMPLETED") for n in done)


def test_a_file_renamed_while_interrupted_is_resumed_by_identity(tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    first = make_source(tmp_path, ch, batch_size=5)
    drop(first.settings.dir, "a.log", lines("a", 23))

    def crash(point: str) -> None:
        if first.counters.snapshot()["batches"] == 2:
            raise RuntimeError("simulated crash")

    first.crash_hook = crash
    with pytest.raises(RuntimeError):
        first.poll()
    os.rename(first.settings.dir / "a.log", first.settings.dir / "renamed.log")
    drop(first.settings.dir, "0-older-name.log", b"other\n")
    os.utime(first.settings.dir / "0-older-name.log", (1, 1))  # older: would be picked first otherwise
    second = make_source(tmp_path, ch, batch_size=4)  # other batch ids: only the position can help
    second.poll()
    assert bodies(ch) == lines("a", 23).splitlines() + [b"other"]


def test_new_files_on_reused_inodes_are_all_stored(tmp_path: Path, make_channel: ChannelFactory) -> None:
    """ext4 gives a deleted file's inode to the next new file at once. Files of the same size on a
    reused inode once had the same batch ids, and the second was dropped as a duplicate."""
    ch = make_channel()
    source = make_source(tmp_path, ch, completed="delete", file_header="file")
    spool = source.settings.dir
    inodes: set[int] = set()
    reused, files = 0, {}
    for i in range(30):
        name = f"f{i:02d}.log"
        drop(spool, name, lines(name, 10))  # every file has the same size, its own content
        inode = (spool / name).stat().st_ino
        reused += inode in inodes
        inodes.add(inode)
        files[name] = 10
        source.poll()
        if reused >= 3:
            break
    if not reused:
        pytest.skip("this filesystem does not reuse the inodes of deleted files")
    assert by_file(ch) == expected(files)
    assert list(spool.iterdir()) == []
    assert source.stats()["duplicates"] == 0 and source.stats()["files_completed"] == len(files)


def test_crash_before_the_position_is_cleared_does_not_skip_a_new_file_on_the_inode(
        tmp_path: Path, make_channel: ChannelFactory) -> None:
    """Killed after a file was completed but before its position was cleared: the position still
    names that file's inode. A new file on that inode, with the same size and even the same
    mtime, must be read in full (its content digest differs), not taken as already done."""
    ch = make_channel()
    first = make_source(tmp_path, ch, file_header="file")
    spool = first.settings.dir
    drop(spool, "a.log", lines("a.log", 10))

    def crash(point: str) -> None:
        if point == "before_clear":
            raise RuntimeError("simulated crash after the completed rename")

    first.crash_hook = crash
    with pytest.raises(RuntimeError):
        first.poll()
    done = spool / "a.log.COMPLETED"
    before = done.stat()
    with open(done, "r+b") as f:  # same inode and size, other content: what inode reuse produces
        f.write(lines("b.log", 10))
    os.utime(done, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.rename(done, spool / "b.log")
    second = make_source(tmp_path, ch, file_header="file")
    second.poll()
    assert by_file(ch) == expected({"a.log": 10, "b.log": 10})
    assert second.stats()["duplicates"] == 0


def test_the_identity_is_stable_for_the_same_file_and_in_the_position_file(
        tmp_path: Path, make_channel: ChannelFactory) -> None:
    ch = make_channel()
    source = make_source(tmp_path, ch, batch_size=4)
    drop(source.settings.dir, "a.log", lines("a", 10))
    saved: list[dict[str, Any]] = []
    source.crash_hook = lambda point: saved.append(json.loads((tmp_path / "state" / "spool_dir.json").read_text()))
    source.poll()
    st = (source.settings.dir / "a.log.COMPLETED").stat()
    tracked = [doc for doc in saved if doc["file"] == "a.log"]
    assert tracked and all(doc["digest"] == tracked[0]["digest"] and len(doc["digest"]) == 16 for doc in tracked)
    assert all((doc["ino"], doc["size"], doc["mtime_ns"]) == (st.st_ino, st.st_size, st.st_mtime_ns)
               for doc in tracked)


def test_a_position_without_a_digest_is_not_trusted(tmp_path: Path, make_channel: ChannelFactory,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A position file written before identities had a digest cannot tell the file it names from a
    new one on the same inode: the file is read from its start (duplicates, never a loss)."""
    ch = make_channel()
    source = make_source(tmp_path, ch, file_header="file")
    drop(source.settings.dir, "a.log", lines("a.log", 6))
    st = (source.settings.dir / "a.log").stat()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "spool_dir.json").write_text(json.dumps(
        {"version": 1, "file": "a.log", "dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "offset": st.st_size,
         "pending": None}))
    with caplog.at_level(logging.WARNING, logger="ingest_toolkit.collect.spool_dir"):
        source.poll()
    assert by_file(ch) == expected({"a.log": 6})
    assert any("without a content digest" in r.getMessage() for r in caplog.records)
