"""Fuzz targets for moved and replayed sealed runs of an encrypted channel (issue 28, item 3).

An attacker (or a confused tool) with write access to the data directory but not the key copies
whole RUN frames: over another run of the same length in the same segment or in another segment
of the same session, or appended again after the last frame (a stale run replayed). Every CRC
stays valid; only the binding of a run to its place (segment key per log id, offset in the nonce,
log id and offset in the associated data) can tell. The oracle: opening the channel and draining
it either refuses with the toolkit's error, or gives exactly the acknowledged events in order, or
(a replayed run appended as the newest segment's tail) cuts that tail and records the cut as an
incident. A moved run must never come back as events, nor stand in for the events it replaced.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt

from .channel_seeds import ENCRYPTION, KEYS, KEYS_ENV, NoSyncFileSystem, frames_of, settings
from .harness import FUZZ_SETTINGS, check_call

MOVES = ("same_segment", "other_segment", "replayed_at_the_end")


@dataclass(frozen=True)
class SealedSeed:
    """A stopped encrypted channel of several segments of one session, every put transaction one
    run of the same length; ``runs``: per segment (relative path), the ``(offset, length)`` of its
    RUN frames; ``expected``: the queued bodies, head first."""

    root: Path
    runs: dict[str, list[tuple[int, int]]]
    expected: list[bytes]

    def copy_to(self, target: Path) -> Path:
        shutil.copytree(self.root, target, ignore=shutil.ignore_patterns("in_use.lock"))
        return target


def sealed_seed(root: Path) -> SealedSeed:
    """Build the seed in ``root``; ``KEYS_ENV`` must hold ``KEYS``."""
    cfg = {**settings(root), **ENCRYPTION}  # 64 KiB segments
    expected = []
    with FileChannel(**cfg) as channel:
        for first in range(0, 1000, 5):  # 200 transactions of 5 events of 200 bytes: several segments
            batch = [Event(b"%05d" % i + bytes(195)) for i in range(first, first + 5)]
            with channel.transaction() as tx:
                tx.put_many(batch)
            expected += [e.body for e in batch]
        with channel.transaction() as tx:  # a committed take: the head moved
            assert [e.body for e in tx.take(5)] == expected[:5]
    runs = {}
    for path in sorted((root / "data").glob("log-*")):
        if path.name[4:].isdigit():
            frames = frames_of(path.read_bytes())
            runs[str(path.relative_to(root))] = [(o, n) for o, t, n in frames if t == fmt.FrameType.RUN]
    assert len(runs) >= 3 and all(runs.values()), runs
    return SealedSeed(root, runs, expected[5:])


@pytest.fixture(scope="module")
def sealed_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SealedSeed]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEYS_ENV, KEYS)
        yield sealed_seed(tmp_path_factory.mktemp("seed-sealed-runs"))


@pytest.fixture()
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-sealed-") as d:
        yield Path(d)


def _move(root: Path, seed: SealedSeed, move: str, data: st.DataObject) -> None:
    """Copy one RUN frame as ``move`` says (every CRC stays valid: the frame is copied whole)."""
    segments = sorted(seed.runs)
    source = data.draw(st.sampled_from(segments), label="source segment")
    offset, length = data.draw(st.sampled_from(seed.runs[source]), label="source run")
    run = (root / source).read_bytes()[offset:offset + length]
    if move == "replayed_at_the_end":
        target = data.draw(st.sampled_from(segments[segments.index(source):]), label="target segment")
        with open(root / target, "r+b") as handle:  # after the last frame (over the preallocated zeros)
            last = max(o + n for o, _t, n in frames_of((root / target).read_bytes()))
            handle.seek(last)
            handle.write(run)
        return
    others = [s for s in segments if s != source] if move == "other_segment" else [source]
    target = data.draw(st.sampled_from(others), label="target segment")
    places = [(o, n) for o, n in seed.runs[target] if n == length and (target, o) != (source, offset)]
    if not places:
        return  # no run of that length there: the channel is left as it was (and must read whole)
    at, _n = data.draw(st.sampled_from(places), label="target run")
    image = bytearray((root / target).read_bytes())
    image[at:at + length] = run
    (root / target).write_bytes(bytes(image))


@pytest.mark.parametrize("move", MOVES)
@FUZZ_SETTINGS
@given(data=st.data(), full_replay=st.booleans(), arrow=st.booleans())
def test_a_moved_or_replayed_sealed_run_is_refused_never_read_as_events(
        sealed_runs: SealedSeed, workdir: Path, move: str, data: st.DataObject, full_replay: bool,
        arrow: bool) -> None:
    os.environ[KEYS_ENV] = KEYS
    root = sealed_runs.copy_to(Path(tempfile.mkdtemp(dir=workdir)) / "channel")
    _move(root, sealed_runs, move, data)
    if full_replay:
        (root / "cp" / "checkpoint.meta").unlink()

    def open_and_drain() -> tuple[list[bytes], int]:
        with FileChannel(fs=NoSyncFileSystem(), **settings(root), **ENCRYPTION) as channel:
            bodies: list[bytes] = []
            while len(channel):
                with channel.transaction() as tx:
                    if arrow:
                        taken = [bytes(b) for b in tx.take_arrow(250).bodies.to_pylist()]
                    else:
                        taken = [e.body for e in tx.take(250)]
                if not taken:
                    break
                bodies += taken
            return bodies, len(channel.incidents())

    outcome = check_call(open_and_drain, max_seconds=10.0)
    if outcome.error is not None:
        return  # refused: the toolkit's error, nothing delivered in the run's place
    bodies, incidents = outcome.value
    if bodies == sealed_runs.expected:
        return
    # Only a cut newest tail may lose events, and only with an incident that records it.
    pairs = enumerate(zip(bodies, sealed_runs.expected, strict=False))
    assert incidents > 0 and bodies == sealed_runs.expected[:len(bodies)], (
        f"{move}: {len(bodies)} events read, {incidents} incidents; the first difference at "
        f"{next((i for i, (a, b) in pairs if a != b), len(bodies))}")
