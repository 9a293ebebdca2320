"""Every single-bit flip of a valid record is rejected with the project's error, never returned
altered (issue 21). Records: the frames and header of a sealed segment (replay), PUT frames
read by pointer (the three take paths), ``checkpoint.meta``, and the checkpoint's queue and
inflight files. ``log-<id>.meta`` is not among them: it carries no checksum (see
docs/durability.md, "Damaged input")."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.checkpoint import decode_meta, load_checkpoint
from ingest_toolkit.channel.crypto import KeyChain, load_keyring
from ingest_toolkit.channel.fs import OsFileSystem
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
    assert replay(OsFileSystem(), [str(data_dir)], keys=keys).stats.frames == len(frames_of(original))
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
    puts = [(o, n) for o, t, n in frames_of(segment) if t == fmt.FrameType.PUT][:3]  # a0, a1 {k: v}, a2 * 50
    path = workdir / "log-1"
    path.write_bytes(segment)
    intact = EventReader(OsFileSystem(), {1: str(path)}, keys=keys)
    assert len(getattr(intact, method)([fmt.make_pointer(1, o) for o, _n in puts])) == 3  # imports done here
    intact.close()
    for offset, length in puts:
        pointer = fmt.make_pointer(1, offset)
        for bit, flipped in bit_flips(segment[offset:offset + length]):
            path.write_bytes(segment[:offset] + flipped + segment[offset + length:])
            reader = EventReader(OsFileSystem(), {1: str(path)}, keys=keys)
            try:
                outcome = check_call(lambda: getattr(reader, method)([pointer]))  # noqa: B023
            finally:
                reader.close()
            assert isinstance(outcome.error, CorruptLogError), f"frame at {offset}, bit {bit}: {outcome.value}"
            assert (outcome.error.path, outcome.error.offset) == (str(path), offset)


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
