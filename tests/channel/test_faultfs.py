"""Quick checks of the fault-injecting file layer itself (tests/channel/faultfs.py)."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import pytest

from tests.channel.faultfs import FaultyFileSystem, torn_mix


def _new_file(fs: FaultyFileSystem, path: Path, data: bytes, *, sync: bool = True) -> None:
    f = fs.create(str(path))
    f.pwrite(data, 0)
    if sync:
        f.sync()
    f.close()


def test_crash_drops_unsynced_bytes(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    path = tmp_path / "f"
    f = fs.create(str(path))
    fs.sync_dir(str(tmp_path))
    f.pwrite(b"abc", 0)
    f.sync()
    f.pwrite(b"def", 3)
    f.close()
    assert path.read_bytes() == b"abcdef"  # writes go through while running
    fs.crash()
    assert path.read_bytes() == b"abc"


def test_unsynced_create_vanishes_even_if_content_synced(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    _new_file(fs, tmp_path / "f", b"data")
    fs.crash()
    assert not (tmp_path / "f").exists()


def test_durable_name_without_content_sync_is_empty(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    _new_file(fs, tmp_path / "f", b"data", sync=False)
    fs.sync_dir(str(tmp_path))
    fs.crash()
    assert (tmp_path / "f").read_bytes() == b""


def test_rename_without_sync_dir_reverts(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    (tmp_path / "a").write_bytes(b"old")  # pre-existing: adopted as durable
    _new_file(fs, tmp_path / "a.tmp", b"new")
    fs.rename(str(tmp_path / "a.tmp"), str(tmp_path / "a"))
    assert (tmp_path / "a").read_bytes() == b"new"
    fs.crash()
    assert (tmp_path / "a").read_bytes() == b"old"
    assert not (tmp_path / "a.tmp").exists()  # its creation was never made durable either


def test_rename_with_sync_dir_is_durable(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    (tmp_path / "a").write_bytes(b"old")
    _new_file(fs, tmp_path / "a.tmp", b"new")
    fs.rename(str(tmp_path / "a.tmp"), str(tmp_path / "a"))
    fs.sync_dir(str(tmp_path))
    fs.crash()
    assert (tmp_path / "a").read_bytes() == b"new"
    assert not (tmp_path / "a.tmp").exists()


def test_unlink_without_sync_dir_is_undone(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    _new_file(fs, tmp_path / "f", b"keep")
    fs.sync_dir(str(tmp_path))
    fs.unlink(str(tmp_path / "f"))
    fs.crash()
    assert (tmp_path / "f").read_bytes() == b"keep"


def test_untouched_files_are_left_alone(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    (tmp_path / "other").write_bytes(b"x")
    _new_file(fs, tmp_path / "f", b"data")
    fs.crash()
    assert (tmp_path / "other").read_bytes() == b"x"


def test_nth_call_fails_once_then_passes(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    f = fs.create(str(tmp_path / "f"))
    fs.inject("pwrite", nth=2, error=errno.ENOSPC)
    f.pwrite(b"a", 0)
    with pytest.raises(OSError) as info:
        f.pwrite(b"b", 1)
    assert info.value.errno == errno.ENOSPC
    f.pwrite(b"c", 1)
    f.close()
    assert (tmp_path / "f").read_bytes() == b"ac"
    assert fs.calls["pwrite"] == 3 and fs.completed["pwrite"] == 2


def test_persistent_fault_keeps_failing_until_cleared(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    f = fs.create(str(tmp_path / "f"))
    fs.inject("sync", persistent=True)
    for _ in range(3):
        with pytest.raises(OSError, match="injected"):
            f.sync()
    fs.clear_faults()
    f.sync()
    f.close()


def test_partial_pwrite_writes_a_prefix_then_fails(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    f = fs.create(str(tmp_path / "f"))
    fs.inject("pwrite", error=errno.ENOSPC, partial=4)
    with pytest.raises(OSError):
        f.pwrite(b"0123456789", 0)
    f.close()
    assert (tmp_path / "f").read_bytes() == b"0123"


def test_short_pread_returns_a_prefix_once_then_reads_whole(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    fs = FaultyFileSystem()
    fs.inject("pread", short=3)
    f = fs.open_read(str(tmp_path / "f"))
    assert f.pread(10, 0) == b"012"
    assert f.pread(10, 0) == b"0123456789"
    f.close()
    with pytest.raises(ValueError, match="pread only"):
        fs.inject("pwrite", short=3)


def test_path_filter_and_free_bytes_override(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    fs.inject("create", path_pattern=r"\.meta$")
    fs.create(str(tmp_path / "log-1")).close()
    with pytest.raises(OSError):
        fs.create(str(tmp_path / "log-1.meta"))
    fs.free_bytes_override = 123
    assert fs.free_bytes(str(tmp_path)) == 123


def test_crash_after_cuts_the_power_and_kills_the_layer(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    f = fs.create(str(tmp_path / "f"))
    fs.sync_dir(str(tmp_path))
    f.pwrite(b"abc", 0)
    f.sync()
    fs.crash_after(2, "pwrite")
    f.pwrite(b"d", 3)
    assert fs.crashes == 0
    f.pwrite(b"ef", 4)  # the power goes right after this write returns
    assert fs.crashes == 1 and fs.dead
    assert (tmp_path / "f").read_bytes() == b"abc"
    with pytest.raises(OSError):
        f.pwrite(b"x", 0)  # a dead process writes nothing
    f.close()
    assert fs.open_files() == []


def test_torn_crash_keeps_a_prefix_of_the_unsynced_changes_in_whole_sectors() -> None:
    old, new = b"abc" + bytes(2000), b"abc" + bytes(range(256)) * 7 + b"end"
    results = {torn_mix(old, new, random.Random(seed)) for seed in range(50)}
    assert results <= {new[:k] + old[k:] for k in (0, 512, 1024, 1536, len(new))}
    assert len(results) > 2


def test_torn_crash_keeps_name_changes_in_order(tmp_path: Path) -> None:
    outcomes = set()
    for seed in range(40):
        root = tmp_path / str(seed)
        root.mkdir()
        fs = FaultyFileSystem()
        _new_file(fs, root / "a", b"A")
        _new_file(fs, root / "b", b"B")
        fs.unlink(str(root / "a"))
        fs.crash(random.Random(seed))
        outcomes.add(tuple(sorted(p.name for p in root.iterdir())))
    assert outcomes == {(), ("a",), ("a", "b"), ("b",)}  # ("b",): a was created, b too, a unlinked
    for seed in range(20):
        root = tmp_path / f"r{seed}"
        root.mkdir()
        fs = FaultyFileSystem()
        _new_file(fs, root / "t", b"new")
        fs.rename(str(root / "t"), str(root / "f"))
        fs.crash(random.Random(seed))
        assert {p.name: p.read_bytes() for p in root.iterdir()} in ({}, {"t": b"new"}, {"f": b"new"})
