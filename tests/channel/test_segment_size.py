"""Segments never grow past ``max_file_size``, whatever ``preallocate_bytes`` says."""

from __future__ import annotations

from pathlib import Path

from ingest_toolkit.channel import Event, FileChannel

KiB = 1024


def _segments(data: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in data.glob("log-*") if not p.name.endswith(".meta")}


def test_preallocation_never_grows_a_segment_past_max_file_size(tmp_path: Path) -> None:
    """The default preallocation (4 MiB) used to be reserved in full for 64 KiB segments: every
    segment file, the one being written included, was 64 times the size the setting allows."""
    data = tmp_path / "data"
    channel = FileChannel(checkpoint_dir=str(tmp_path / "cp"), data_dirs=[str(data)], min_free_bytes=0,
                          max_file_size=64 * KiB, checkpoint_interval=0)
    try:
        assert channel.config.preallocate_bytes == 4 * 1024 * KiB  # the default, larger than a segment
        assert all(size <= 64 * KiB for size in _segments(data).values()), _segments(data)
        for _ in range(6):  # about 200 KiB of frames: several segments, each preallocated
            with channel.transaction() as tx:
                tx.put_many([Event(b"x" * 1000) for _ in range(35)])
        sizes = _segments(data)
        assert len(sizes) >= 3 and all(size <= 64 * KiB for size in sizes.values()), sizes
    finally:
        channel.close()
    with FileChannel(checkpoint_dir=str(tmp_path / "cp"), data_dirs=[str(data)], min_free_bytes=0,
                     max_file_size=64 * KiB) as reopened:
        assert len(reopened) == 6 * 35
