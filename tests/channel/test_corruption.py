"""Damaged logs: torn tails are cut, everything else is reported with its file and offset.

The newest segment of a crashed channel is made by writing with the channel, closing it (which
seals the segment) and deleting ``log-<id>.meta``, so the segment counts as unsealed again; the
bytes are then cut, padded or overwritten as a crash or a bad disk would leave them.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.incidents import load_incidents
from ingest_toolkit.errors import CorruptLogError, TailRefusedError

from .checkpoint_helpers import queued, take
from .encryption import encrypted, with_encryption

SEGMENT_HEADER = fmt.SEGMENT_HEADER_SIZE


# -- helpers ------------------------------------------------------------------------------
def settings(root: Path, **more: Any) -> dict[str, Any]:
    """Encrypted while the test runs encrypted: the tests taking the ``cipher`` fixture run both ways
    (tests/channel/encryption.py); they are the representative ones: torn tails, flips in PUT frames,
    in headers, behind a checkpoint, and takes of damaged frames."""
    return with_encryption({"checkpoint_dir": str(root / "checkpoint"), "data_dirs": [str(root / "data")],
                            "max_file_size": 64 * 1024, "max_event_size": 16_000, "min_free_bytes": 0,
                            "preallocate_bytes": 8192, "keep_alive": 0.0, **more})


def open_channel(root: Path) -> FileChannel:
    """Open after removing the checkpoint, so that recovery is a full replay of every segment.

    With a checkpoint, segments before its position are not read on open; damage in them is
    found by the take that reads the frame (see test_flip_behind_checkpoint_is_reported_by_take).
    """
    (root / "checkpoint" / "checkpoint.meta").unlink(missing_ok=True)
    return FileChannel(**settings(root))


def put(channel: FileChannel, *bodies: bytes) -> None:
    with channel.transaction() as tx:
        tx.put_many([Event(b, {"name": b.decode()} if b.endswith(b"h") else {}) for b in bodies])


def reopen_and_read(root: Path) -> list[bytes]:
    with open_channel(root) as channel:
        return queued(channel)


def segment(root: Path, log_id: int) -> Path:
    return root / "data" / f"log-{log_id}"


@dataclass(frozen=True)
class Frame:
    offset: int
    type: int
    length: int
    txn: int

    @property
    def end(self) -> int:
        return self.offset + self.length


def frames_of(path: Path) -> list[Frame]:
    """The valid frames of a segment, in order (stops at the first invalid byte)."""
    data = path.read_bytes()
    frames, pos = [], SEGMENT_HEADER
    while pos < len(data):
        try:
            ftype, length, txn, _seq = fmt.check_frame(data, pos, len(data))
        except fmt.FrameError:
            break
        frames.append(Frame(pos, ftype, length, txn))
        pos += length
    return frames


def frames_of_type(path: Path, ftype: fmt.FrameType) -> list[Frame]:
    return [f for f in frames_of(path) if f.type == ftype]


def event_frames(path: Path) -> list[Frame]:
    """The frames that hold events: PUT frames, or when encrypted the RUN frames sealing them
    (one per put transaction here), whose damage loses the whole run (docs/encryption.md)."""
    return frames_of_type(path, fmt.FrameType.RUN if encrypted() else fmt.FrameType.PUT)


def flip(path: Path, offset: int) -> None:
    """Invert one byte in place (calling it twice restores the file)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0xFF]))


def unseal(root: Path, log_id: int) -> None:
    """Make a closed channel's newest segment look like one a crash left behind."""
    segment(root, log_id).with_name(f"log-{log_id}.meta").unlink()


def open_fails(root: Path) -> CorruptLogError:
    with pytest.raises(CorruptLogError) as raised:
        open_channel(root)
    return raised.value


def has_commit_frame(data: bytes) -> bool:
    at = data.find(fmt.FRAME_MAGIC)
    while at != -1:
        try:
            if fmt.check_frame(data, at, len(data))[0] == fmt.FrameType.COMMIT:
                return True
        except fmt.FrameError:
            pass
        at = data.find(fmt.FRAME_MAGIC, at + 1)
    return False


# -- torn tails at every byte of the last transaction ------------------------------------
@dataclass(frozen=True)
class History:
    """A channel whose last transaction occupies ``data[start:]`` of its only segment."""

    checkpoint: Path
    data: bytes
    start: int
    boundaries: list[int]  # where each valid frame ends
    before: list[bytes]  # the queue without the last transaction
    after: list[bytes]  # the queue with it


def write_history(root: Path, last: str) -> History:
    with open_channel(root) as channel:
        put(channel, b"a0", b"a1h", b"a2")
        put(channel, b"b0h" + bytes(3000))
        take(channel, 2)
        put(channel, b"c0", b"c1h")
        before = queued(channel)
        if last == "put":
            put(channel, b"d0", b"d1h")
        else:
            take(channel, 2)
        after = queued(channel)
    unseal(root, 1)
    data = segment(root, 1).read_bytes()
    frames = frames_of(segment(root, 1))
    assert frames[-1].end == len(data) and frames[-1].type == fmt.FrameType.COMMIT
    start = min(f.offset for f in frames if f.txn == frames[-1].txn)
    assert start == max(f.end for f in frames if f.txn != frames[-1].txn)  # the tail is one transaction
    return History(root / "checkpoint", data, start, [f.end for f in frames], before, after)


def garbage(rng: random.Random) -> bytes:
    """Random bytes holding frame magics and a COMMIT frame with one bad byte, but no valid COMMIT."""
    broken = bytearray(fmt.encode_frame(fmt.FrameType.COMMIT, 99, 0, b"\x08\x01\x10\x01"))
    broken[rng.randrange(len(broken))] ^= 0x01
    data = rng.randbytes(rng.randrange(1, 90)) + fmt.FRAME_MAGIC + rng.randbytes(40) + bytes(broken)
    assert not has_commit_frame(data)
    return data + rng.randbytes(rng.randrange(0, 60))


SUFFIXES: dict[str, Callable[[random.Random], bytes]] = {
    "cut": lambda rng: b"",
    "cut+zeros": lambda rng: bytes(8192),  # preallocated space after the cut
    "cut+garbage": garbage,
}


def build_case(root: Path, history: History, data: bytes) -> None:
    (root / "checkpoint").mkdir(parents=True)
    (root / "data").mkdir()
    shutil.copy(history.checkpoint / "channel.id", root / "checkpoint" / "channel.id")
    segment(root, 1).write_bytes(data)


def common_prefix_length(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def crc_partly_written(history: History, cut: int) -> bool:
    """The one torn write that reads as damage (docs/log-format.md 5.4): the cut leaves only the
    last 1-3 bytes of a frame, its CRC, unwritten, and not at a 512-byte sector boundary. A disk
    never tears inside a sector; the byte-granular cuts of these tests can."""
    ends = [end for end in history.boundaries if end > cut]
    return bool(ends) and 0 < ends[0] - cut < 4 and cut % 512 != 0


def check_cut(root: Path, history: History, cut: int, suffix: bytes, *, write_after: bool,
              mode: str = "torn_tail") -> None:
    """Recover from the cut; with ``write_after``, also write afterwards and recover again.

    A cut followed by nothing or by zeros is what a crash leaves (a torn write): recovery cuts it
    (the default mode refuses only a cut inside the last three bytes of a frame that is not on a
    sector boundary: see :func:`crc_partly_written`). Anything else after the cut (``garbage``) is
    not a crash's doing: the default mode refuses it and changes nothing, or, where the garbage
    reads like a torn frame, cuts it; ``set_aside`` always cuts, keeping a copy. Never silently:
    a cut that drops the last transaction's events records an incident."""
    written = history.data[:cut] + suffix
    build_case(root, history, written)
    # A random suffix may begin with the very bytes the cut removed (one time in 256 for a
    # one-byte cut): what the file holds is then the longer history, and recovery must say so.
    intact = cut + common_prefix_length(written[cut:], history.data[cut:])
    complete = intact == len(history.data)
    expected = history.after if complete else history.before
    where = f"cut at {cut} of {len(history.data)} (last transaction from {history.start})"
    damage = any(written[intact:])  # bytes after what the history wrote that are not zero
    zeros_after = bool(suffix) and not any(suffix)
    try:
        channel = FileChannel(**settings(root, recovery_mode=mode))
    except TailRefusedError as refused:
        assert mode == "torn_tail" and (damage or (zeros_after and crc_partly_written(history, cut))), where
        assert not refused.torn and refused.path == str(segment(root, 1)), where
        assert segment(root, 1).read_bytes() == written, f"{where}: a refused open changed the segment"
        return
    assert not (zeros_after and crc_partly_written(history, cut) and mode == "torn_tail"), f"{where}: not refused"
    with channel:
        assert queued(channel) == expected, where
        if write_after:
            put(channel, b"new")
    valid_end = max(end for end in history.boundaries if end <= intact)
    assert segment(root, 1).stat().st_size == valid_end, f"{where}: not cut back to the last valid frame"
    commit_at = history.boundaries[-2]  # the last transaction's COMMIT frame starts where its last PUT ends
    if len(history.after) > len(history.before) and not complete and cut > commit_at:  # part of a put's COMMIT
        [incident] = load_incidents(str(root / "checkpoint"))  # its events are gone: never in silence
        assert incident.events == len(history.after) - len(history.before) and incident.offset == commit_at, where
    if write_after:
        assert reopen_and_read(root) == [*expected, b"new"], where


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("last", ["put", "take"])
def test_torn_tail_at_every_offset_of_the_last_transaction(tmp_path: Path, last: str, suffix: str) -> None:
    history = write_history(tmp_path / "history", last)
    rng = random.Random(f"{last}/{suffix}")
    for cut in range(history.start, len(history.data) + 1):
        check_cut(tmp_path / f"cut-{cut}", history, cut, SUFFIXES[suffix](rng), write_after=suffix == "cut")


@pytest.mark.parametrize("suffix", ["cut+zeros", "cut+garbage"])
def test_every_cut_recovers_when_damage_is_set_aside(tmp_path: Path, suffix: str) -> None:
    """recovery_mode = "set_aside": damage after the cut is cut too, and what the crash left of
    the history comes back, whatever the bytes after it."""
    history = write_history(tmp_path / "history", "put")
    rng = random.Random(suffix)
    for cut in range(history.start, len(history.data) + 1):
        check_cut(tmp_path / f"cut-{cut}", history, cut, SUFFIXES[suffix](rng), write_after=False, mode="set_aside")


@pytest.mark.parametrize("suffix", ["cut", "cut+garbage"])
def test_torn_tail_at_every_offset_encrypted(tmp_path: Path, suffix: str, encrypted_env: None) -> None:
    """The same with encryption at rest on (the last transaction a put: encrypted PUT frames)."""
    test_torn_tail_at_every_offset_of_the_last_transaction(tmp_path, "put", suffix)


@pytest.mark.parametrize("last", ["put", "take"])
def test_a_suffix_that_restores_the_cut_bytes_recovers_the_whole_transaction(tmp_path: Path, last: str) -> None:
    """The whole history followed by garbage: the default mode refuses the garbage (damage after
    the last COMMIT: a whole transaction may be in it); set aside, every transaction comes back."""
    history = write_history(tmp_path / "history", last)
    rng = random.Random(last)
    end = len(history.data)
    for missing in (1, 2, 3):
        suffix = history.data[end - missing :] + garbage(rng)
        check_cut(tmp_path / f"refused-{missing}", history, end - missing, suffix, write_after=False)
        check_cut(tmp_path / f"restored-{missing}", history, end - missing, suffix, write_after=False,
                  mode="set_aside")
        with open_channel(tmp_path / f"restored-{missing}") as channel:
            assert queued(channel) == history.after


# -- damage that must be reported --------------------------------------------------------
@pytest.fixture
def two_segments(tmp_path: Path) -> Path:
    """log-1 (older, sealed) and log-2 (newest, sealed), each with several transactions."""
    with open_channel(tmp_path) as channel:
        put(channel, b"a0", b"a1h")
        put(channel, b"a2", b"a3h", b"a4")
    with open_channel(tmp_path) as channel:
        put(channel, b"b0", b"b1h")
        take(channel, 1)
        put(channel, b"b2")
    assert (fmt.segment_key(segment(tmp_path, 1).read_bytes()[:SEGMENT_HEADER]) is not None) == encrypted()
    return tmp_path


EXPECTED_TWO_SEGMENTS = [b"a1h", b"a2", b"a3h", b"a4", b"b0", b"b1h", b"b2"]
FRAME_POSITIONS = [0, 1, 2, 3, 4, 7, 8, 15, 16, 23, 24, -5, -1]  # magic .. seq, payload, CRC


def test_fixture_reads_back_intact(two_segments: Path) -> None:
    assert reopen_and_read(two_segments) == EXPECTED_TWO_SEGMENTS


@pytest.mark.parametrize("position", FRAME_POSITIONS)
def test_flip_in_put_frame_of_sealed_segment_is_reported(cipher: str, two_segments: Path, position: int) -> None:
    path = segment(two_segments, 1)
    frame = event_frames(path)[1]
    flip(path, frame.offset + position % frame.length)
    err = open_fails(two_segments)
    assert (err.path, err.offset) == (str(path), frame.offset)
    flip(path, frame.offset + position % frame.length)  # repaired: the channel opens (locks were released)
    assert reopen_and_read(two_segments) == EXPECTED_TWO_SEGMENTS


def test_flip_behind_checkpoint_is_reported_by_take(cipher: str, two_segments: Path) -> None:
    """With a checkpoint, open does not read log-1; the take that reads the damaged frame reports it."""
    path = segment(two_segments, 1)
    frame = event_frames(path)[1]  # b"a1h", the queue head (encrypted: the run of b"a2", b"a3h", b"a4")
    with FileChannel(**settings(two_segments)) as channel:  # writes a checkpoint on close
        assert len(channel) == len(EXPECTED_TWO_SEGMENTS)
    flip(path, frame.offset + 30)
    with FileChannel(**settings(two_segments)) as channel:
        assert channel.replay_stats.frames == 0  # restarted from the checkpoint
        with pytest.raises(CorruptLogError) as info, channel.transaction() as tx:
            tx.take(3)
        assert (info.value.path, info.value.offset) == (str(path), frame.offset)
        assert len(channel) == len(EXPECTED_TWO_SEGMENTS)  # nothing was lost or skipped


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "unsealed"])
@pytest.mark.parametrize("position", [0, 4, 24, -1])
def test_flip_in_newest_segment_before_a_commit_is_reported(cipher: str, two_segments: Path, position: int,
                                                            sealed: bool) -> None:
    if not sealed:
        unseal(two_segments, 2)
    path = segment(two_segments, 2)
    frame = event_frames(path)[0]
    flip(path, frame.offset + position % frame.length)
    err = open_fails(two_segments)
    assert (err.path, err.offset) == (str(path), frame.offset)


def test_flip_in_last_commit_of_sealed_newest_segment_is_reported(two_segments: Path) -> None:
    path = segment(two_segments, 2)
    commit = frames_of(path)[-1]
    flip(path, commit.offset + 26)
    err = open_fails(two_segments)
    assert (err.path, err.offset) == (str(path), commit.offset)  # .meta says the frame was sealed


def test_flip_in_last_commit_of_unsealed_newest_segment_is_refused_not_dropped(cipher: str,
                                                                               two_segments: Path) -> None:
    """Issue 28, item 2: a complete COMMIT frame of the right length that fails its checksum was
    written whole (a crash cannot tear a frame that was synced before its commit returned): it is
    damage, and the default recovery mode refuses it instead of dropping the acknowledged b2."""
    unseal(two_segments, 2)
    path = segment(two_segments, 2)
    commit = frames_of(path)[-1]
    flip(path, commit.offset + 26)
    before = path.read_bytes()
    err = open_fails(two_segments)
    assert isinstance(err, TailRefusedError) and not err.torn
    assert (err.path, err.offset, err.events, err.transactions) == (str(path), commit.offset, 1, 1)
    assert path.read_bytes() == before  # nothing cut

    with FileChannel(**settings(two_segments, recovery_mode="set_aside")) as channel:  # the operator's choice
        assert queued(channel) == EXPECTED_TWO_SEGMENTS[:-1]
        [incident] = channel.incidents()
    assert (incident.kind, incident.segment, incident.offset, incident.events) == ("damaged_tail", str(path),
                                                                                   commit.offset, 1)
    assert incident.acknowledged_data and incident.open
    assert Path(incident.quarantine).read_bytes() == before[commit.offset: commit.end]  # the cut bytes, kept


@pytest.mark.parametrize("log_id", [1, 2], ids=["older", "newest"])
@pytest.mark.parametrize("position", [0, 7, 8, 10, 12, 16, 24, 39, 40, 48, 59, 60, 63])
def test_flip_in_segment_header_is_reported_at_offset_0(cipher: str, two_segments: Path, log_id: int,
                                                        position: int) -> None:
    path = segment(two_segments, log_id)
    flip(path, position)
    err = open_fails(two_segments)
    assert (err.path, err.offset) == (str(path), 0)


@pytest.mark.parametrize("log_id", [1, 2], ids=["older", "newest"])
@pytest.mark.parametrize("frames_kept", [0, 1, -2])
def test_sealed_segment_cut_at_a_frame_boundary_is_reported(two_segments: Path, log_id: int,
                                                            frames_kept: int) -> None:
    path = segment(two_segments, log_id)
    end = ([SEGMENT_HEADER] + [f.end for f in frames_of(path)])[frames_kept]
    with open(path, "r+b") as f:
        f.truncate(end)
    err = open_fails(two_segments)
    assert (err.path, err.offset) == (str(path), end)


@pytest.mark.parametrize("log_id", [1, 2], ids=["older", "newest"])
def test_sealed_segment_with_bytes_appended_is_reported(two_segments: Path, log_id: int) -> None:
    path = segment(two_segments, log_id)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(bytes(4096))
    err = open_fails(two_segments)
    assert (err.path, err.offset) == (str(path), size)


def _current_segment(channel: FileChannel) -> Path:
    stats = channel.stats()
    return Path(stats["log_files"][stats["writing"]]["path"])


@pytest.mark.parametrize("method", ["take", "take_payloads"])  # decoded, or passed on as stored (remote takes)
@pytest.mark.parametrize("where", ["sealed", "current"])
def test_take_of_a_corrupt_frame_raises_and_keeps_the_events(cipher: str, two_segments: Path, where: str,
                                                             method: str) -> None:
    with open_channel(two_segments) as channel:
        put(channel, b"c0", b"c1h", b"c2")
        expected = [*EXPECTED_TWO_SEGMENTS, b"c0", b"c1h", b"c2"]
        path = segment(two_segments, 1) if where == "sealed" else _current_segment(channel)
        frames = event_frames(path)  # the victim is not at the head of the queue (encrypted: the run of c0..c2
        victim = frames[-2] if len(frames) > 1 else frames[-1]  # in the current segment, the only one)
        flip(path, victim.offset + victim.length - 1)
        with pytest.raises(CorruptLogError) as raised, channel.transaction() as tx:
            getattr(tx, method)(len(expected))
        assert (raised.value.path, raised.value.offset) == (str(path), victim.offset)
        assert len(channel) == len(expected)
        flip(path, victim.offset + victim.length - 1)
        assert take(channel, len(expected)) == expected  # still all there, in order


# -- a newest segment whose creation did not finish --------------------------------------
def _partial_real_header(root: Path) -> bytes:
    return segment(root, 1).read_bytes()[:30]


INCOMPLETE_HEADERS: dict[str, Callable[[Path], bytes]] = {
    "empty": lambda root: b"",
    "30 zero bytes": lambda root: bytes(30),
    "zero header, preallocated": lambda root: bytes(SEGMENT_HEADER + 8192),
    "30 bytes of a header": _partial_real_header,
}


@pytest.mark.parametrize("content", INCOMPLETE_HEADERS)
def test_newest_segment_with_incomplete_header_is_ignored(tmp_path: Path, content: str) -> None:
    with open_channel(tmp_path) as channel:
        put(channel, b"a0", b"a1h")
    segment(tmp_path, 2).write_bytes(INCOMPLETE_HEADERS[content](tmp_path))
    with open_channel(tmp_path) as channel:
        assert queued(channel) == [b"a0", b"a1h"]
        put(channel, b"a2")
    for path in (tmp_path / "data").glob("log-*[0-9]"):
        fmt.decode_segment_header(path.read_bytes()[:SEGMENT_HEADER])  # every segment left is whole
    assert reopen_and_read(tmp_path) == [b"a0", b"a1h", b"a2"]
