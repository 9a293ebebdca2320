"""Every read of a log is bounded by what the format allows before anything is allocated.

A damaged length field must give CorruptLogError with the file and offset, never an allocation
of the claimed size (up to 1 GiB) before the checksum is verified. Allocations are measured with
the fuzz oracle (tracemalloc), not a process limit.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.errors import CorruptLogError
from tests.fuzz.harness import check_call

HEADER = fmt.SEGMENT_HEADER_SIZE
LIMIT = 8 << 20  # far below every claimed length below, far above what a take of one event needs


def settings(root: Path) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "data")], "max_file_size": 1 << 20,
            "max_event_size": 64 * 1024, "min_free_bytes": 0, "preallocate_bytes": 8192, "keep_alive": 0.0,
            "checkpoint_interval": 0}


def set_length(path: Path, offset: int, length: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset + 4)
        f.write(struct.pack("<I", length))


@pytest.mark.parametrize("claimed", [1 << 30, 512 << 20, (1 << 20) - 100, 70 * 1024])
@pytest.mark.parametrize("method", ["take", "take_columns", "take_arrow"])
def test_a_damaged_length_of_a_queued_put_frame_is_refused_before_it_is_allocated(
        tmp_path: Path, claimed: int, method: str) -> None:
    with FileChannel(**settings(tmp_path)) as channel:
        with channel.transaction() as tx:
            tx.put_many([Event(b"x" * 100) for _ in range(3)])
    log1 = tmp_path / "data" / "log-1"
    set_length(log1, HEADER, claimed)  # the head event: a take of one reads only this frame
    with FileChannel(**settings(tmp_path)) as channel:  # from the checkpoint: log-1 is not replayed
        with channel.transaction() as tx:
            outcome = check_call(lambda: getattr(tx, method)(1), allowed=(CorruptLogError,),
                                 max_alloc_bytes=LIMIT)
            tx.rollback()
        assert isinstance(outcome.error, CorruptLogError), outcome.value
        assert outcome.error.path == str(log1) and outcome.error.offset == HEADER
        assert len(channel) == 3  # nothing was taken


def test_a_frame_longer_than_the_configured_event_limit_is_still_read_when_intact(tmp_path: Path) -> None:
    """An event written under a larger max_event_size stays readable after the limit is lowered."""
    with FileChannel(**{**settings(tmp_path), "max_event_size": 200 * 1024}) as channel:
        with channel.transaction() as tx:
            tx.put(Event(b"y" * 150_000))
    with FileChannel(**settings(tmp_path)) as channel, channel.transaction() as tx:
        assert [len(e.body) for e in tx.take(1)] == [150_000]
