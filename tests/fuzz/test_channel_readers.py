"""Fuzz targets for the channel's on-disk readers (issue 21, items 1, 2, 3 and 5).

Each target feeds damaged copies of real files the channel wrote (``channel_seeds.py``) to one
reader, under the oracle of ``harness.py``: the call returns or raises the toolkit's error,
within 2 s and 64 MiB. Some targets re-seal the CRC after the damage, so that crafted,
CRC-valid records reach the payload decoders too. ``test_channel_bitflips.py`` holds the
exhaustive single-bit flips.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.checkpoint import decode_meta, encode_meta, load_checkpoint
from ingest_toolkit.channel.crypto import KeyChain, load_keyring
from ingest_toolkit.channel.fs import OsFileSystem
from ingest_toolkit.channel.reader import EventReader
from ingest_toolkit.channel.replay import replay
from ingest_toolkit.channel.segment import read_meta

from .channel_seeds import (
    ENCRYPTION,
    KEYS,
    KEYS_ENV,
    ChannelFiles,
    NoSyncFileSystem,
    encrypted_seed_channel,
    reader_seeds,
    seed_channel,
    settings,
)
from .harness import FUZZ_SETTINGS, check_call, mutated


@pytest.fixture(scope="module")
def channel_files(tmp_path_factory: pytest.TempPathFactory) -> ChannelFiles:
    return seed_channel(tmp_path_factory.mktemp("seed-channel"))


@pytest.fixture(scope="module")
def seeds(channel_files: ChannelFiles) -> dict[str, list[bytes]]:
    return reader_seeds(channel_files)


@pytest.fixture()
def workdir() -> Iterator[Path]:
    """A directory for the test; hypothesis runs every example in the same one, so each example
    makes its own with :func:`fresh`."""
    with tempfile.TemporaryDirectory(prefix="fuzz-channel-") as d:
        yield Path(d)


def fresh(workdir: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=workdir))


def reseal_frames(data: bytes, start: int = 0) -> bytes:
    """Recompute the CRC of every frame that chains from ``start`` whose length fits: damage then
    reaches the checks after the CRC (payload decoding, counts, pointers)."""
    out, pos = bytearray(data), start
    while pos + fmt.FRAME_OVERHEAD <= len(out):
        length = struct.unpack_from("<I", out, pos + 4)[0]
        if not fmt.FRAME_OVERHEAD <= length <= len(out) - pos:
            break
        end = pos + length - 4
        struct.pack_into("<I", out, end, crc32c(bytes(out[pos:end])))
        pos += length
    return bytes(out)


def reseal_segment(data: bytes) -> bytes:
    head = bytearray(data[: fmt.SEGMENT_HEADER_SIZE])
    if len(head) == fmt.SEGMENT_HEADER_SIZE:
        struct.pack_into("<I", head, 60, crc32c(bytes(head[:60])))
    return bytes(head) + reseal_frames(data[fmt.SEGMENT_HEADER_SIZE:])


def write_segment(directory: Path, data: bytes, meta: bytes | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "log-1"
    path.write_bytes(data)
    if meta is not None:
        path.with_name("log-1.meta").write_bytes(meta)
    return path


# -- segment reader: replay of one damaged segment ------------------------------------------
@FUZZ_SETTINGS
@given(data=st.data(), sealed=st.booleans(), reseal=st.booleans())
def test_segment_replay(seeds: dict[str, list[bytes]], workdir: Path, data: st.DataObject, sealed: bool,
                        reseal: bool) -> None:
    image = data.draw(mutated(seeds["segment"]), label="segment")
    if reseal:
        image = reseal_segment(image)
    meta = data.draw(st.sampled_from(seeds["segment_meta"])) if sealed else None
    data_dir = fresh(workdir)
    write_segment(data_dir, image, meta)
    check_call(lambda: replay(OsFileSystem(), [str(data_dir)]))


# -- frame decoder: takes by pointer of damaged, possibly re-sealed, frames ------------------
@FUZZ_SETTINGS
@given(data=st.data(), reseal=st.booleans(), method=st.sampled_from(["read", "read_columns", "read_arrow"]))
def test_frame_reader(seeds: dict[str, list[bytes]], workdir: Path, data: st.DataObject, reseal: bool,
                      method: str) -> None:
    frames = data.draw(st.lists(mutated(seeds["frame"]), min_size=1, max_size=3), label="frames")
    if reseal:
        frames = [reseal_frames(f) for f in frames]
    header = fmt.encode_segment_header(1, bytes(16), 0)
    offsets, pos = [], fmt.SEGMENT_HEADER_SIZE
    for frame in frames:
        offsets.append(pos)
        pos += len(frame)
    path = write_segment(fresh(workdir), header + b"".join(frames))
    reader = EventReader(OsFileSystem(), {1: str(path)}, max_frame=8 * 1024 + fmt.FRAME_OVERHEAD)
    try:
        check_call(lambda: getattr(reader, method)([fmt.make_pointer(1, o) for o in offsets]))
    finally:
        reader.close()


# -- checkpoint parser ------------------------------------------------------------------------
@FUZZ_SETTINGS
@given(data=st.data())
def test_checkpoint_meta_parser(seeds: dict[str, list[bytes]], data: st.DataObject) -> None:
    raw = data.draw(mutated(seeds["checkpoint_meta"]), label="checkpoint.meta")
    check_call(lambda: decode_meta(raw, "checkpoint.meta"))


@FUZZ_SETTINGS
@given(data=st.data(), target=st.sampled_from(["meta", "queue", "inflight"]))
def test_checkpoint_loader(channel_files: ChannelFiles, seeds: dict[str, list[bytes]], workdir: Path,
                           data: st.DataObject, target: str) -> None:
    """The whole checkpoint, one file damaged. The damaged protobuf of checkpoint.meta is
    re-framed (length, CRC), and a damaged data file is re-registered in it (size, CRC), so the
    damage reaches the parsers behind the checksums."""
    base = fresh(workdir)
    cp = base / "cp"
    cp.mkdir()
    for name, content in channel_files.files.items():
        if name.startswith("cp/"):
            (base / name).write_bytes(content)
    meta = decode_meta(seeds["checkpoint_meta"][0])
    if target == "meta":
        body = data.draw(mutated([meta.SerializeToString()]), label="CheckpointMeta")
        head = struct.pack("<8sI", b"ITKCKPT\n", len(body)) + body
        (cp / "checkpoint.meta").write_bytes(head + struct.pack("<I", crc32c(head)))
    else:
        damaged = data.draw(mutated(seeds[target]), label=target)
        (cp / (meta.queue_file if target == "queue" else meta.inflight_file)).write_bytes(damaged)
        if target == "queue":
            meta.queue_bytes, meta.queue_crc32c = len(damaged), crc32c(damaged)
        else:
            meta.inflight_bytes, meta.inflight_crc32c = len(damaged), crc32c(damaged)
        (cp / "checkpoint.meta").write_bytes(encode_meta(meta))
    check_call(lambda: load_checkpoint(str(cp), None))


# -- recovery: open a channel directory with one damaged file --------------------------------
FILE_KINDS = ["segment", "segment_meta", "checkpoint_meta", "queue", "inflight", "channel_id"]


@pytest.mark.parametrize("kind", FILE_KINDS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_recovery_with_one_damaged_file(channel_files: ChannelFiles, workdir: Path, kind: str,
                                        data: st.DataObject) -> None:
    root = channel_files.copy_to(fresh(workdir) / "channel")
    candidates = channel_files.of_kind(kind)
    name = data.draw(st.sampled_from(sorted(candidates)), label="file")
    damaged = data.draw(mutated([candidates[name]]), label="bytes")
    (root / name).write_bytes(damaged)

    def open_and_drain() -> list[bytes]:
        with FileChannel(fs=NoSyncFileSystem(), **settings(root)) as channel, channel.transaction() as tx:
            bodies = [e.body for e in tx.take(len(channel))]
            tx.rollback()
            return bodies

    outcome = check_call(open_and_drain)
    if outcome.error is None and kind in ("checkpoint_meta", "queue", "inflight", "channel_id"):
        # the logs are intact: whatever the checkpoint says, nothing committed is lost or invented
        assert outcome.value == channel_files.expected


# -- an encrypted channel (docs/encryption.md) -------------------------------------------------
@pytest.fixture(scope="module")
def encrypted_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChannelFiles]:
    """The seed channel written with encryption at rest; its keys stay in the environment for
    the module's encrypted tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEYS_ENV, KEYS)
        yield encrypted_seed_channel(tmp_path_factory.mktemp("seed-encrypted"))


@FUZZ_SETTINGS
@given(data=st.data(), sealed=st.booleans())
def test_encrypted_segment_replay(encrypted_files: ChannelFiles, workdir: Path, data: st.DataObject,
                                  sealed: bool) -> None:
    """Damaged encrypted segments with every CRC recomputed: only authentication can refuse an
    altered PUT payload, and nothing but the toolkit's errors may come out."""
    keys = KeyChain(load_keyring(key_file=None, key_env=KEYS_ENV, active=None))
    image = reseal_segment(data.draw(mutated(list(encrypted_files.of_kind("segment").values())), label="segment"))
    meta = data.draw(st.sampled_from(list(encrypted_files.of_kind("segment_meta").values()))) if sealed else None
    data_dir = fresh(workdir)
    write_segment(data_dir, image, meta)
    check_call(lambda: replay(OsFileSystem(), [str(data_dir)], keys=keys))


@pytest.mark.parametrize("kind", ["segment", "checkpoint_meta", "queue"])
@FUZZ_SETTINGS
@given(data=st.data())
def test_recovery_of_an_encrypted_channel_with_one_damaged_file(encrypted_files: ChannelFiles, workdir: Path,
                                                                kind: str, data: st.DataObject) -> None:
    root = encrypted_files.copy_to(fresh(workdir) / "channel")
    candidates = encrypted_files.of_kind(kind)
    name = data.draw(st.sampled_from(sorted(candidates)), label="file")
    (root / name).write_bytes(data.draw(mutated([candidates[name]]), label="bytes"))

    def open_and_drain() -> list[bytes]:
        with FileChannel(fs=NoSyncFileSystem(), **settings(root), **ENCRYPTION) as channel, \
                channel.transaction() as tx:
            bodies = [e.body for e in tx.take(len(channel))]
            tx.rollback()
            return bodies

    outcome = check_call(open_and_drain)
    if outcome.error is None and kind != "segment":
        assert outcome.value == encrypted_files.expected


def test_the_seeds_are_what_the_channel_wrote(channel_files: ChannelFiles) -> None:
    assert set(map(channel_files.kind, channel_files.files)) == set(FILE_KINDS)
    root = channel_files.root
    assert read_meta(str(root / "data" / "log-1")) is not None
    assert load_checkpoint(str(root / "cp"), None) is not None
    assert os.path.exists(root / "cp" / "checkpoint.meta")
