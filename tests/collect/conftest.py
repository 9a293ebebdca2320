"""Fixtures for the collector tests: real FileChannels in tmp dirs, helpers to drain them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.collect.pipeline import Pipeline
from ingest_toolkit.collect.selectors import ReplicatingSelector

ChannelFactory = Callable[..., FileChannel]


def channel_settings(root: Path, **overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "data")],
                                "min_free_bytes": 0, "preallocate_bytes": 0, "checkpoint_interval": 0,
                                "keep_alive": 0.0, "max_file_size": 8 << 20, "max_event_size": 1 << 20}
    settings.update(overrides)
    return settings


@pytest.fixture
def make_channel(tmp_path: Path) -> Iterator[ChannelFactory]:
    opened: list[FileChannel] = []

    def make(name: str = "ch", **overrides: Any) -> FileChannel:
        channel = FileChannel(**channel_settings(tmp_path / "channels" / name, **overrides))
        opened.append(channel)
        return channel

    yield make
    for channel in opened:
        try:
            channel.close()
        except Exception:
            pass


def drain(channel: FileChannel) -> list[Event]:
    """Take (and commit) every committed event, oldest first."""
    out: list[Event] = []
    while True:
        with channel.transaction() as tx:
            events = tx.take(min(1000, channel.config.transaction_capacity))
        if not events:
            return out
        out.extend(events)


def bodies(channel: FileChannel) -> list[bytes]:
    return [e.body for e in drain(channel)]


def simple_pipeline(channel: FileChannel, name: str = "test") -> Pipeline:
    return Pipeline({"ch": channel}, selector=ReplicatingSelector(["ch"]), interceptors=[], name=name)
