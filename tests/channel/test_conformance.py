"""Run the transaction-contract conformance suite against FileChannel in several configurations.

Each ``Test*`` class is one configuration: durability ``fsync`` or ``page_cache``, one or two data
directories, 64 KiB segments (so the suite's larger tests roll segments), a 4 KiB ``spill_bytes``
(so large put transactions reach the log before they commit), and the way a reopen recovers:
from the checkpoint written on close, by a full replay of the log (no checkpoint), or from a
background checkpoint plus the log written after it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ingest_toolkit.channel import Event, FileChannel
from tests.channel.conformance import ChannelConformance, ChannelLike, OpenChannel, evs, put_committed

KiB = 1024


class FileChannelSuite(ChannelConformance):
    """Provides ``open_channel`` for FileChannel; subclasses pick the configuration."""

    settings: ClassVar[dict[str, Any]] = {}
    data_dir_count: ClassVar[int] = 1

    @pytest.fixture
    def open_channel(self, tmp_path: Path) -> Iterator[OpenChannel]:
        opened: list[FileChannel] = []

        def open_channel(**overrides: Any) -> ChannelLike:
            opened.append(FileChannel(**{**self.channel_settings(tmp_path), **overrides}))
            return opened[-1]

        yield open_channel
        for channel in opened:
            channel.close()

    @classmethod
    def channel_settings(cls, root: Path) -> dict[str, Any]:
        dirs = [str(root / f"data{i}") for i in range(cls.data_dir_count)]
        return {"checkpoint_dir": str(root / "checkpoint"), "data_dirs": dirs,
                "min_free_bytes": 0, **cls.settings}


class TestFsyncOneDir(FileChannelSuite):
    settings: ClassVar[dict[str, Any]] = {"durability": "fsync"}

    def test_configuration_reopens_from_the_close_checkpoint(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        put_committed(ch, evs(0, 10))
        ch.close()
        ch = open_channel()
        assert isinstance(ch, FileChannel)
        assert ch.replay_stats.frames == 0 and len(ch) == 10


NO_CHECKPOINT: dict[str, Any] = {"checkpoint_on_close": False, "checkpoint_interval": 0}
BACKGROUND_CHECKPOINTS: dict[str, Any] = {"checkpoint_on_close": False, "checkpoint_interval": 0.02}


class TestPageCacheOneDirFullReplay(FileChannelSuite):
    settings: ClassVar[dict[str, Any]] = {"durability": "page_cache", **NO_CHECKPOINT}

    def test_configuration_reopens_by_full_replay(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        put_committed(ch, evs(0, 10))
        ch.close()
        ch = open_channel()
        assert isinstance(ch, FileChannel)
        assert ch.replay_stats.frames == 11 and len(ch) == 10  # ten PUTs and their COMMIT


SMALL_SEGMENTS: dict[str, Any] = {"max_file_size": 64 * KiB, "max_event_size": 16_000,
                                  "preallocate_bytes": 16 * KiB}


class TestFsyncTwoDirsSmallSegmentsBackgroundCheckpoints(FileChannelSuite):
    settings: ClassVar[dict[str, Any]] = {"durability": "fsync", **SMALL_SEGMENTS, **BACKGROUND_CHECKPOINTS}
    data_dir_count = 2

    def test_configuration_rolls_segments_across_both_dirs(self, open_channel: OpenChannel) -> None:
        ch = open_channel()
        put_committed(ch, evs(0, 200, size=1000))
        assert isinstance(ch, FileChannel)
        paths = [entry["path"] for entry in ch.stats()["log_files"].values()]
        assert len(paths) >= 3
        assert len({os.path.dirname(p) for p in paths}) == 2


class TestFsyncSpill(FileChannelSuite):
    settings: ClassVar[dict[str, Any]] = {"durability": "fsync", "spill_bytes": 4 * KiB, **SMALL_SEGMENTS}

    def test_configuration_spills_before_commit(self, open_channel: OpenChannel, tmp_path: Path) -> None:
        ch = open_channel()
        before = _data_bytes(tmp_path)
        with ch.transaction() as tx:
            tx.put_many([Event(body=b"s" * 3000) for _ in range(4)])
            assert _data_bytes(tmp_path) >= before + 12_000  # written before the commit
            tx.rollback()
        assert len(ch) == 0


class TestPageCacheTwoDirsSmallSegmentsSpillFullReplay(FileChannelSuite):
    settings: ClassVar[dict[str, Any]] = {"durability": "page_cache", "spill_bytes": 4 * KiB, **SMALL_SEGMENTS,
                                          **NO_CHECKPOINT}
    data_dir_count = 2


def _data_bytes(root: Path) -> int:
    """Bytes of frames written so far (file sizes, which preallocation does not inflate here)."""
    return sum(_written(p) for p in root.glob("data*/log-*") if not p.name.endswith(".meta"))


def _written(path: Path) -> int:
    data = path.read_bytes()
    return len(data.rstrip(b"\x00"))
