"""The checkpoint and segment readers raise the project's errors, with the file and offset, on
damaged or crafted (CRC-valid) input: never struct.error, protobuf's DecodeError, ValueError or
OverflowError (issue 21, item 5). Found by tests/fuzz/test_channel_readers.py; pinned here."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.checkpoint import decode_meta, encode_meta, load_checkpoint
from ingest_toolkit.channel.fs import OsFileSystem
from ingest_toolkit.channel.replay import replay
from ingest_toolkit.errors import ChannelError, CheckpointInvalid, CorruptLogError, IngestError


def settings(root: Path) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "data")], "min_free_bytes": 0,
            "checkpoint_interval": 0, "checkpoint_on_close": True}


def make_channel(root: Path) -> None:
    with FileChannel(**settings(root)) as channel:
        with channel.transaction() as tx:
            tx.put_many([Event(b"a"), Event(b"b")])
        take = channel.transaction()
        take.take(1)
        channel.checkpoint()  # an inflight file with an open take
        take.rollback()


def rewrite_checkpoint(root: Path, **changes: Any) -> None:
    """Change checkpoint.meta fields and keep it CRC-valid; ``queue``/``inflight`` bytes replace
    those files and are re-registered with their size and CRC."""
    cp = root / "cp"
    meta = decode_meta((cp / "checkpoint.meta").read_bytes())
    for kind in ("queue", "inflight"):
        if kind in changes:
            data = changes.pop(kind)
            (cp / getattr(meta, f"{kind}_file")).write_bytes(data)
            setattr(meta, f"{kind}_bytes", len(data))
            setattr(meta, f"{kind}_crc32c", crc32c(data))
    for key, value in changes.items():
        setattr(meta, key, value)
    (cp / "checkpoint.meta").write_bytes(encode_meta(meta))


def test_checkpoint_invalid_is_a_project_error() -> None:
    assert issubclass(CheckpointInvalid, ChannelError) and issubclass(CheckpointInvalid, IngestError)


CRAFTED = {
    "queue file shorter than its header": {"queue": b""},  # was struct.error
    "inflight file not a protobuf": {"inflight": b"\xff\xff\xff"},  # was DecodeError
    "file name with a NUL byte": {"queue_file": "checkpoint-2.qu\0eue"},  # was ValueError
    "file name outside the directory": {"inflight_file": "../checkpoint-2.inflight"},
    "queue pointer beyond 2^63": {"queue": b"ITKQUEUE" + struct.pack("<IIQQQ", 1, 0, 0, 1, 2**64 - 1)},
    "channel id of 3 bytes": {"channel_id": b"abc"},
    "log position beyond 2^32": {"log_id": 2**40},
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_checkpoint_is_checkpoint_invalid_and_open_replays_in_full(tmp_path: Path, case: str) -> None:
    make_channel(tmp_path)
    changes = dict(CRAFTED[case])
    if "queue" in changes and changes["queue"].startswith(b"ITKQUEUE"):
        checkpoint_id = decode_meta((tmp_path / "cp" / "checkpoint.meta").read_bytes()).checkpoint_id
        changes["queue"] = changes["queue"][:16] + struct.pack("<Q", checkpoint_id) + changes["queue"][24:]
    rewrite_checkpoint(tmp_path, **changes)
    with pytest.raises(CheckpointInvalid) as raised:
        load_checkpoint(str(tmp_path / "cp"), None)
    assert str(tmp_path / "cp") in raised.value.path
    with FileChannel(**settings(tmp_path)) as channel:
        assert channel.checkpoint_problem is not None
        with channel.transaction() as tx:
            assert [e.body for e in tx.take(5)] == [b"a", b"b"]  # the logs are intact: nothing lost


def crafted_frame(ftype: int, payload: bytes) -> bytes:
    return fmt.encode_frame(ftype, 42, 0, payload)  # CRC-valid, payload garbage


@pytest.mark.parametrize("ftype", [fmt.FrameType.COMMIT, fmt.FrameType.TAKE])
def test_a_crc_valid_frame_with_a_garbage_payload_is_corrupt_log_error_at_its_offset(tmp_path: Path,
                                                                                    ftype: int) -> None:
    data = tmp_path / "data"
    data.mkdir()
    frame = crafted_frame(ftype, b"\xff\xff\xff\xff")
    (data / "log-1").write_bytes(fmt.encode_segment_header(1, bytes(16), 0) + frame)
    with pytest.raises(CorruptLogError) as raised:
        replay(OsFileSystem(), [str(data)])
    assert (raised.value.path, raised.value.offset) == (str(data / "log-1"), fmt.SEGMENT_HEADER_SIZE)


@pytest.mark.parametrize("method", ["take", "take_columns", "take_arrow"])
def test_a_crc_valid_put_frame_with_a_garbage_payload_is_refused_by_a_take(tmp_path: Path, method: str) -> None:
    with FileChannel(**settings(tmp_path)) as channel:
        with channel.transaction() as tx:
            tx.put(Event(b"x" * 10, {"h": "v"}))
    log1 = tmp_path / "data" / "log-1"
    image = bytearray(log1.read_bytes())
    offset = fmt.SEGMENT_HEADER_SIZE
    length = struct.unpack_from("<I", image, offset + 4)[0]
    image[offset + 24: offset + length - 4] = b"\x12\xff" + bytes(length - 30)  # a map entry that runs past the end
    struct.pack_into("<I", image, offset + length - 4, crc32c(bytes(image[offset: offset + length - 4])))
    log1.write_bytes(bytes(image))
    with FileChannel(**settings(tmp_path)) as channel, channel.transaction() as tx:
        with pytest.raises(CorruptLogError) as raised:
            getattr(tx, method)(1)
        assert (raised.value.path, raised.value.offset) == (str(log1), offset)
        tx.rollback()
        assert len(channel) == 1
