"""Every single-bit flip of a valid record is rejected with the project's error, never returned
altered (issue 21). Records: the frames and header of a sealed segment (replay), PUT frames
read by pointer (the three take paths; in an encrypted segment the sealed run holding them),
``checkpoint.meta``, and the checkpoint's queue and inflight files. ``log-<id>.meta`` is not
among them: it carries no checksum (see docs/durability.md, "Damaged input")."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.checkpoint import decode_meta, load_checkpoint
from ingest_toolkit.channel.codec import encode_put
from ingest_toolkit.channel.crypto import KeyChain, load_keyring
from ingest_toolkit.channel.fs import OsFileSystem
from ingest_toolkit.channel.proto import channel_pb2 as pb
from ingest_toolkit.channel.reader import EventReader
from ingest_toolkit.channel.replay import replay
from ingest_toolkit.errors import CheckpointInvalid, CorruptLogError

from .channel_seeds import ChannelFiles, build_channel, frames_of
from .harness import bit_flips, check_call


@pytest.fixture(scope="module")
def channel_files(tmp_path_factory: pytest.TempPathFactory) -> ChannelFiles:
    return build_channel(tmp_path_factory.mktemp("seed-channel"))


KEYS_ENV = "ITK_FUZZ_CHANNEL_KEYS"


@pytest.fixture(scope="module", params=["plain", "aes256gcm"])
def segment_seed(request: pytest.FixtureRequest, channel_files: ChannelFiles,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChannelFiles, KeyChain | None]]:
    """The seed channel, and the same channel written with encryption at rest (docs/encryption.md)
    with the keys that read it: the frame flips run against both."""
    if request.param == "plain":
        yield channel_files, None
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEYS_ENV, f"1:{bytes(range(32)).hex()}")
        files = build_channel(tmp_path_factory.mktemp("seed-encrypted"), encryption_key_env=KEYS_ENV,
                              encryption_key_id=1)
        assert fmt.segment_key(files.files["data/log-2"][: fmt.SEGMENT_HEADER_SIZE]) is not None
        yield files, KeyChain(load_keyring(key_file=None, key_env=KEYS_ENV, active=None))


@pytest.fixture()
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-flips-") as d:
        yield Path(d)


def test_every_bit_flip_of_a_sealed_segment_is_refused_by_replay(
        segment_seed: tuple[ChannelFiles, KeyChain | None], workdir: Path) -> None:
    channel_files, keys = segment_seed
    original = channel_files.files["data/log-2"]
    meta = channel_files.files["data/log-2.meta"]
    data_dir = workdir / "data"
    data_dir.mkdir()
    (data_dir / "log-2.meta").write_bytes(meta)
    (data_dir / "log-2").write_bytes(original)
    frames = replay(OsFileSystem(), [str(data_dir)], keys=keys).stats.frames
    assert frames == pb.SegmentMeta.FromString(meta).frames  # a sealed run's PUT frames counted one by one
    assert frames == len(frames_of(original)) or keys is not None
    for bit, flipped in bit_flips(original):
        (data_dir / "log-2").write_bytes(flipped)
        outcome = check_call(lambda: replay(OsFileSystem(), [str(data_dir)], keys=keys))
        assert isinstance(outcome.error, CorruptLogError), f"bit {bit}: replay accepted a flipped segment"
        assert outcome.error.path == str(data_dir / "log-2")


@pytest.mark.parametrize("method", ["read", "read_columns", "read_arrow"])
def test_every_bit_flip_of_a_put_frame_is_refused_by_a_take(segment_seed: tuple[ChannelFiles, KeyChain | None],
                                                            workdir: Path, method: str) -> None:
    channel_files, keys = segment_seed
    segment = channel_files.files["data/log-1"]
    frames = event_frames(segment)  # a0, a1 {k: v}, a2 * 50: as (frame offset, length, pointers in it)
    path = workdir / "log-1"
    path.write_bytes(segment)
    intact = EventReader(OsFileSystem(), {1: str(path)}, keys=keys)
    assert len(getattr(intact, method)([p for _o, _n, pointers in frames for p in pointers])) == 3  # imports
    intact.close()
    for offset, length, pointers in frames:
        for bit, flipped in bit_flips(segment[offset:offset + length]):
            pointer = pointers[bit % len(pointers)]
            path.write_bytes(segment[:offset] + flipped + segment[offset + length:])
            reader = EventReader(OsFileSystem(), {1: str(path)}, keys=keys)
            try:
                outcome = check_call(lambda: getattr(reader, method)([pointer]))  # noqa: B023
            finally:
                reader.close()
            assert isinstance(outcome.error, CorruptLogError), f"frame at {offset}, bit {bit}: {outcome.value}"
            assert (outcome.error.path, outcome.error.offset) == (str(path), offset)


def event_frames(segment: bytes) -> list[tuple[int, int, list[int]]]:
    """The frames holding the first three events of the seed's log-1 (a0, a1 {k: v}, a2 * 50), as
    ``(offset, length, pointers)``: three PUT frames, or in an encrypted segment the one RUN frame
    sealing their transaction, its PUT frames at known offsets inside (GCM keeps lengths)."""
    if fmt.segment_key(segment[: fmt.SEGMENT_HEADER_SIZE]) is None:
        puts = [(o, n) for o, t, n in frames_of(segment) if t == fmt.FrameType.PUT][:3]
        return [(o, n, [fmt.make_pointer(1, o)]) for o, n in puts]
    [(offset, _t, length), *_] = [f for f in frames_of(segment) if f[1] == fmt.FrameType.RUN]
    sizes = [fmt.FRAME_OVERHEAD + len(encode_put(body, headers))
             for body, headers in [(b"a0", {}), (b"a1", {"k": "v"}), (b"a2" * 50, {})]]
    assert length == sum(sizes) + fmt.RUN_OVERHEAD
    starts = [offset + fmt.FRAME_HEADER.size + sum(sizes[:k]) for k in range(3)]
    return [(offset, length, [fmt.make_pointer(1, start) for start in starts])]


def test_every_bit_flip_of_checkpoint_meta_is_refused(channel_files: ChannelFiles) -> None:
    original = channel_files.files["cp/checkpoint.meta"]
    decode_meta(original)
    for bit, flipped in bit_flips(original):
        outcome = check_call(lambda: decode_meta(flipped, "checkpoint.meta"))  # noqa: B023
        assert isinstance(outcome.error, CheckpointInvalid), f"bit {bit}: {outcome.value}"


@pytest.mark.parametrize("kind", ["queue", "inflight"])
def test_every_bit_flip_of_a_checkpoint_data_file_is_refused(channel_files: ChannelFiles, workdir: Path,
                                                             kind: str) -> None:
    shutil.copytree(channel_files.root / "cp", workdir / "cp", ignore=shutil.ignore_patterns("in_use.lock"))
    [(name, original)] = channel_files.of_kind(kind).items()
    target = workdir / name
    for bit, flipped in bit_flips(original):
        target.write_bytes(flipped)
        outcome = check_call(lambda: load_checkpoint(str(workdir / "cp"), None))
        assert isinstance(outcome.error, CheckpointInvalid), f"bit {bit}: the checkpoint loaded"
