"""The recount of a checkpoint's reference counts and the deletion floor, on real checkpoints.

``channel verify`` and the Dagster channel checks judge a checkpoint by these two functions
(tests/channel/test_tools.py and tests/dagster/test_channel_checks.py cover what each reports).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.checkpoint import Checkpoint, load_checkpoint
from ingest_toolkit.channel.tools.refcounts import deletion_floor, recount

PAD = b"." * 400  # ~150 events per 64 KiB segment


def _settings(root: Path, **extra: Any) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "d")], "max_file_size": 64 * 1024,
            "min_free_bytes": 0, "preallocate_bytes": 8192, "keep_alive": 0.0, "checkpoint_interval": 0,
            "capacity": 10_000, **extra}


def _put(channel: FileChannel, n: int) -> None:
    with channel.transaction() as tx:
        tx.put_many([Event(b"%05d|" % i + PAD, {}) for i in range(n)])


def _checkpoint(root: Path) -> Checkpoint:
    checkpoint = load_checkpoint(str(root / "cp"), None)
    assert checkpoint is not None
    return checkpoint


def test_the_recount_counts_the_queue_and_open_takes_and_agrees_with_the_channel(tmp_path: Path) -> None:
    with FileChannel(**_settings(tmp_path)) as channel:
        _put(channel, 500)  # several segments
        with channel.transaction() as tx:
            tx.take(120)
            channel.checkpoint()  # the open take is in the checkpoint, not in its queue
            tx.rollback()
    counts = recount(_checkpoint(tmp_path))
    assert counts.ok and counts.mismatches == {}
    assert sum(counts.recounted.values()) == counts.queue_size_recounted == 500
    assert dict(counts.recounted) == counts.recorded and len(counts.recorded) >= 3


def test_the_recount_names_each_disagreeing_segment_with_both_numbers(tmp_path: Path) -> None:
    with FileChannel(**_settings(tmp_path)) as channel:
        _put(channel, 300)
    checkpoint = _checkpoint(tmp_path)
    first, last = min(checkpoint.meta.log_refcounts), max(checkpoint.meta.log_refcounts)
    truth = dict(checkpoint.meta.log_refcounts)
    checkpoint.meta.log_refcounts[first] += 2
    checkpoint.meta.log_refcounts[last + 5] = 1  # a segment no event points into
    checkpoint.meta.queue_size += 3
    counts = recount(checkpoint)
    assert counts.mismatches == {first: (truth[first] + 2, truth[first]), last + 5: (1, 0)}
    assert (counts.queue_size_recorded, counts.queue_size_recounted) == (303, 300) and not counts.ok


def test_the_floor_stays_below_every_segment_an_event_points_into(tmp_path: Path) -> None:
    with FileChannel(**_settings(tmp_path, spill_bytes=4096)) as channel:
        _put(channel, 300)
        with channel.transaction() as tx:
            tx.take(300)  # everything so far drained
        with channel.transaction() as spilling:  # an open put past spill_bytes: its frames are in a segment
            spilling.put_many([Event(b"open|" + PAD, {}) for _ in range(200)])
            other = threading.Thread(target=_put, args=(channel, 10))  # one transaction per thread
            other.start()
            other.join()
            channel.checkpoint()
            checkpoint = _checkpoint(tmp_path)  # read now: closing writes a checkpoint without the put
            spilling.rollback()
    assert checkpoint.puts, "the open put should have spilled"
    spilled_from = min(p >> 32 for _txn, pointers in checkpoint.puts for p in pointers)
    floor = deletion_floor(checkpoint)
    assert floor.log_id == spilled_from < checkpoint.meta.log_id  # the spill holds the floor down
    assert spilled_from in floor.needed and set(recount(checkpoint).recounted) <= floor.needed
