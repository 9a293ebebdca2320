"""Sealed runs (docs/encryption.md, docs/log-format.md "Sealed runs"): an encrypted channel seals
the PUT frames of a put call in RUN frames, one AEAD call per run. Takes of any part of a run,
across runs, rolled back inside a run; crashes in the middle of a transaction's runs; damage to a
run; and segments of version 2 (one AEAD call per PUT frame) written by earlier releases.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.codec import decode_puts
from ingest_toolkit.channel.crypto import RUN_BYTES, KeyChain, Opener, load_keyring, run_limit
from ingest_toolkit.channel.proto import channel_pb2 as pb
from ingest_toolkit.channel.tools import repair_channel, verify_channel
from ingest_toolkit.errors import CorruptLogError

from .test_encryption import (
    drain,
    event,
    keyed,
    opened_runs,
    put,
    put_frames,
    run_frames,
    segments,
    session_key,
    tamper,
    unseal,
)


def bodies(events: list[Event]) -> list[bytes]:
    return [e.body for e in events]


def expected(first: int, n: int) -> list[bytes]:
    return [event(i).body for i in range(first, first + n)]


def keys_of(root: Path) -> KeyChain:
    return KeyChain(load_keyring(key_file=str(root / "keys"), key_env=None, active=None))


def dirs_of(root: Path) -> tuple[str, list[str]]:
    return str(root / "cp"), [str(root / "d0"), str(root / "d1")]


# -- how puts are sealed ---------------------------------------------------------------------
def test_a_put_many_is_sealed_in_as_few_runs_as_the_run_limit_allows(tmp_path: Path) -> None:
    """One AEAD call per run, not per event: 1,000 events of 256 bytes make five runs of at most
    RUN_BYTES of PUT frames (before sealed runs: 1,000 PUT frames, each encrypted alone)."""
    with FileChannel(**keyed(tmp_path, max_file_size=64 << 20, spill_bytes=4 << 20)) as channel:
        with channel.transaction() as tx:
            tx.put_many([Event(bytes([i % 256]) * 256) for i in range(1000)])
        with channel.transaction() as tx:
            tx.put(Event(b"alone"))  # a single put is a run of one
    [path] = segments(tmp_path)
    runs = run_frames(path)
    assert [len(inner) for inner in opened_runs(path)][-1] == 1
    frame = 256 + 3 + fmt.FRAME_OVERHEAD  # body, its field tag and length, the frame around it
    sizes = [length - fmt.RUN_OVERHEAD for _o, length, _t, _s in runs[:-1]]
    assert len(sizes) == -(-1000 // (RUN_BYTES // frame)) == 5
    assert all(size <= RUN_BYTES for size in sizes) and sum(sizes) == 1000 * frame
    assert run_limit(64 * 1024) == 16 * 1024  # small segments: a quarter of max_file_size


# -- takes -------------------------------------------------------------------------------------
@pytest.fixture
def many_runs(tmp_path: Path) -> Path:
    """Two put transactions of 100 events, each sealed in several runs (16 KiB each in 64 KiB
    segments), closed with a checkpoint: the next open reads the runs by pointer only."""
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 100)
        put(channel, 100, 100)
    assert sum(len(run_frames(p)) for p in segments(tmp_path)) >= 4  # 25 KB of frames per transaction
    return tmp_path


def test_single_events_from_the_middle_of_runs_and_across_run_boundaries(many_runs: Path) -> None:
    with FileChannel(**keyed(many_runs)) as channel:
        assert channel.replay_stats.frames == 0  # from the checkpoint: every event read by pointer
        at = 0
        for n in [1, 1, 37, 1, 60, 2, 1, 97]:  # sizes that start and end inside runs and cross them
            with channel.transaction() as tx:
                got = tx.take(n)
            assert bodies(got) == expected(at, n), (at, n)
            at += n
        assert at == 200 and len(channel) == 0


@pytest.mark.parametrize("how", ["take_payloads", "take_arrow"])
def test_other_take_forms_across_run_boundaries(many_runs: Path, how: str) -> None:
    with FileChannel(**keyed(many_runs)) as channel, channel.transaction() as tx:
        first = getattr(tx, how)(3)
        rest = getattr(tx, how)(197)
    if how == "take_arrow":
        got = [bytes(b) for b in first.bodies.to_pylist() + rest.bodies.to_pylist()]
        assert got == expected(0, 200)
    else:
        assert decode_puts(first[0] + rest[0], first[1] + rest[1]).bodies == expected(0, 200)


def test_small_takes_one_after_another_decrypt_each_run_once(many_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    unseal = Opener.unseal

    def counted(self: Opener, buf: bytes, pos: int, length: int, seq: int, offset: int | None = None) -> bytes | None:
        calls.append(seq)
        return unseal(self, buf, pos, length, seq, offset)

    monkeypatch.setattr(Opener, "unseal", counted)
    runs = sum(len(run_frames(p)) for p in segments(many_runs))
    with FileChannel(**keyed(many_runs)) as channel:
        for at in range(200):
            with channel.transaction() as tx:
                assert bodies(tx.take(1)) == expected(at, 1)
    assert len(calls) == len(set(calls)) == runs  # every run decrypted once, not once per event


def test_a_take_rolled_back_inside_a_run_returns_the_same_events(many_runs: Path) -> None:
    with FileChannel(**keyed(many_runs)) as channel:
        with channel.transaction() as tx:
            assert bodies(tx.take(5)) == expected(0, 5)
        tx = channel.transaction()
        taken = tx.take(7)  # events 5..11: inside the first run
        assert bodies(taken) == expected(5, 7)
        tx.rollback()
        with channel.transaction() as tx:
            again = tx.take(7)
        assert [(e.body, e.seq) for e in again] == [(e.body, e.seq) for e in taken]
        assert drain(channel) == expected(12, 188)


# -- crashes -----------------------------------------------------------------------------------
def crash_copy(root: Path, name: str) -> Path:
    """The channel's files as a crash leaves them (written, not closed): a copy made while it is open."""
    copy = root.parent / name
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("in_use.lock"))
    return copy


def test_spilled_runs_of_an_open_transaction_are_not_committed_after_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    with FileChannel(**keyed(root)) as channel:
        put(channel, 0, 10)
        tx = channel.transaction()
        tx.put_many([event(i) for i in range(100, 160)])  # spilled: its runs are in the log
        assert tx.spilled
        crashed = crash_copy(root, "crashed")
        tx.rollback()
    with FileChannel(**keyed(crashed)) as channel:
        assert drain(channel) == expected(0, 10)


@pytest.mark.parametrize("where", [24, 100, -21, -1])  # inside the header, the ciphertext, the tag, the CRC
def test_a_run_cut_by_a_crash_is_a_torn_write(tmp_path: Path, where: int) -> None:
    """The last transaction's run torn (its COMMIT never written): nothing of it appears."""
    root = tmp_path / "c"
    root.mkdir()
    with FileChannel(**keyed(root)) as channel:
        put(channel, 0, 10)
        with channel.transaction() as tx:
            tx.put_many([event(i) for i in range(10, 20)])
        crashed = crash_copy(root, "crashed")
    path = segments(crashed)[-1]
    offset, length, _txn, _seq = run_frames(path)[-1]
    path.write_bytes(path.read_bytes()[: offset + where % length])
    (crashed / "cp" / "checkpoint.meta").unlink(missing_ok=True)
    with FileChannel(**keyed(crashed)) as channel:
        assert channel.replay_stats.torn_bytes > 0
        assert drain(channel) == expected(0, 10)


# -- damage ------------------------------------------------------------------------------------
def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("crc", ["recomputed", "left"])
def test_a_flipped_byte_in_a_run_loses_its_run_as_a_checksum_failure_would(tmp_path: Path, crc: str) -> None:
    """A take of the run fails (the events stay queued); verify reports the run as one damaged
    range; repair drops its transaction and counts its events; the other runs stay readable."""
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 10)
        put(channel, 10, 10)
        put(channel, 20, 10)
    path = segments(tmp_path)[0]
    offset, length, txn, _seq = run_frames(path)[1]
    if crc == "recomputed":
        tamper(path, offset, length)
    else:
        flip(path, offset + length // 2)
    reason = "authentication" if crc == "recomputed" else "checksum"
    with FileChannel(**keyed(tmp_path)) as channel:
        with channel.transaction() as tx:
            assert bodies(tx.take(10)) == expected(0, 10)
        with pytest.raises(CorruptLogError) as raised, channel.transaction() as tx:
            tx.take(1)
        assert (raised.value.offset, reason in raised.value.reason) == (offset, True)
        assert len(channel) == 20
    cp, data = dirs_of(tmp_path)
    report = verify_channel(cp, data, keys=keys_of(tmp_path))
    [finding] = [f for f in report.findings if f.kind == "corrupt_frame"]
    assert (finding.data["offset"], finding.data["length"]) == (offset, length)
    plan = repair_channel(cp, data, dry_run=False, keys=keys_of(tmp_path))
    assert [(d.txn_id, d.events_lost) for d in plan.dropped] == [(txn, 10)]
    assert verify_channel(cp, data, keys=keys_of(tmp_path)).ok
    with FileChannel(**keyed(tmp_path)) as channel:
        assert drain(channel) == expected(20, 10)  # 0..9 were taken before the repair


def test_a_put_frame_outside_a_run_is_refused(tmp_path: Path) -> None:
    """In a version 3 segment every PUT frame is sealed in a run: a plaintext PUT frame with a
    valid CRC (a run replaced by its plaintext) is damage, never an event."""
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 3)
        put(channel, 3, 3)
    path = segments(tmp_path)[0]
    data = path.read_bytes()
    offset, length, txn, _seq = run_frames(path)[0]
    plain = b"".join(fmt.encode_frame(fmt.FrameType.PUT, txn, seq, payload)
                     for _o, seq, payload in opened_runs(path)[0])
    path.write_bytes(data[:offset] + plain + data[offset + length:])
    (path.parent / f"{path.name}.meta").unlink()
    (tmp_path / "cp" / "checkpoint.meta").unlink()
    with pytest.raises(CorruptLogError) as raised:
        FileChannel(**keyed(tmp_path))
    assert raised.value.offset == offset and "outside a sealed run" in raised.value.reason


# -- runs are bound to their place (version 4) --------------------------------------------------
def copy_run(src: Path, src_run: int, dst: Path, dst_run: int) -> tuple[int, int]:
    """Copy RUN frame ``src_run`` of segment ``src`` byte for byte over RUN frame ``dst_run`` of
    ``dst`` (the same length: header, ciphertext, tag, CRC); returns the overwritten frame's
    ``(offset, length)``."""
    offset, length, _txn, _seq = run_frames(dst)[dst_run]
    from_offset, from_length, _t, _s = run_frames(src)[src_run]
    assert from_length == length
    data = bytearray(dst.read_bytes())
    data[offset: offset + length] = src.read_bytes()[from_offset: from_offset + length]
    dst.write_bytes(bytes(data))
    return offset, length


@pytest.mark.parametrize("start", ["checkpoint", "full replay"])
def test_a_run_copied_over_another_is_refused_never_delivered_in_its_place(tmp_path: Path, start: str) -> None:
    """Issue 28, item 3: A0..A4 copied over B0..B4 must not come back as A0..A4 twice."""
    a, b = [Event(b"A%d" % i + bytes(200)) for i in range(5)], [Event(b"B%d" % i + bytes(200)) for i in range(5)]
    with FileChannel(**keyed(tmp_path)) as channel:
        for batch in (a, b):  # two transactions, two runs of the same length
            with channel.transaction() as tx:
                tx.put_many(batch)
    [path] = segments(tmp_path)
    offset, _length = copy_run(path, 0, path, 1)
    if start == "full replay":
        (tmp_path / "cp" / "checkpoint.meta").unlink()
        with pytest.raises(CorruptLogError) as refused:
            FileChannel(**keyed(tmp_path))
        assert refused.value.offset == offset and "authentication" in refused.value.reason
        return
    with FileChannel(**keyed(tmp_path)) as channel:
        with channel.transaction() as tx:
            assert bodies(tx.take(5)) == bodies(a)
        with channel.transaction() as tx, pytest.raises(CorruptLogError) as raised:
            tx.take_arrow(5)
        assert raised.value.offset == offset and "authentication" in raised.value.reason
        with channel.transaction() as tx, pytest.raises(CorruptLogError):
            tx.take(5)
        assert len(channel) == 5  # the events stay queued: nothing was delivered in their place
    report = verify_channel(*dirs_of(tmp_path), keys=keys_of(tmp_path))
    assert not report.ok and any(f.kind == "corrupt_frame" and str(offset) in f.message for f in report.findings)


def test_a_run_moved_to_another_segment_of_the_same_session_fails_authentication(tmp_path: Path) -> None:
    """Every segment has its own key, and a run's offset is in its nonce: the first run of one
    segment copied to the same offset of the next (written by the same session, same salt) fails."""
    with FileChannel(**keyed(tmp_path, spill_bytes=1 << 20)) as channel:
        for first in range(0, 400, 5):  # 64 KiB segments: several of them, runs of one length
            with channel.transaction() as tx:
                tx.put_many([Event(b"%04d" % i + bytes(200)) for i in range(first, first + 5)])
    first, second = segments(tmp_path)[:2]
    assert first.read_bytes()[48:56] == second.read_bytes()[48:56]  # one session: one salt
    assert run_frames(first)[0][0] == run_frames(second)[0][0] == fmt.SEGMENT_HEADER_SIZE
    copy_run(first, 0, second, 0)
    (tmp_path / "cp" / "checkpoint.meta").unlink()
    with pytest.raises(CorruptLogError) as refused:
        FileChannel(**keyed(tmp_path, spill_bytes=1 << 20))
    assert refused.value.path == str(second) and "authentication" in refused.value.reason


# -- version 3 segments (earlier releases) -----------------------------------------------------
def downgrade_to_version_3(root: Path) -> None:
    """Rewrite every segment of a closed encrypted channel as the release before bound runs wrote
    it (version 3: runs sealed under the session key, nonce first seq + type RUN, the RUN header
    the associated data). The frames keep their lengths and offsets, so the checkpoint stays valid."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    for path in segments(root):
        data = bytearray(path.read_bytes())
        aes = AESGCM(session_key(bytes(data)))
        plains = [(offset, length, seq, unseal(bytes(data), offset, length, seq))
                  for offset, length, _txn, seq in run_frames(path)]
        for offset, length, seq, plain in plains:
            header = bytes(data[offset: offset + 24])
            sealed = header + aes.encrypt(struct.pack("<QI", seq, fmt.FrameType.RUN), plain, header)
            data[offset: offset + length] = sealed + struct.pack("<I", crc32c(sealed))
        data[8:10] = b"\x03\x00"
        data[60:64] = struct.pack("<I", crc32c(bytes(data[:60])))
        path.write_bytes(bytes(data))


def test_version_3_segments_of_earlier_releases_stay_readable(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 40)
        put(channel, 40, 40)
    downgrade_to_version_3(tmp_path)
    assert {p.read_bytes()[8] for p in segments(tmp_path)} == {3}
    assert verify_channel(*dirs_of(tmp_path), keys=keys_of(tmp_path)).ok
    with FileChannel(**keyed(tmp_path)) as channel:  # from the checkpoint: runs read by pointer
        with channel.transaction() as tx:
            assert bodies(tx.take(5)) == expected(0, 5)
        put(channel, 80, 5)  # written in version 4 next to them
    assert {p.read_bytes()[8] for p in segments(tmp_path)} == {3, 4}
    (tmp_path / "cp" / "checkpoint.meta").unlink()
    with FileChannel(**keyed(tmp_path)) as channel:  # a full replay authenticates both versions
        with channel.transaction() as tx:
            assert [e.body for e in tx.take_arrow(75).events()] == expected(5, 75)
        assert drain(channel) == expected(80, 5)


# -- version 2 segments (earlier releases) -----------------------------------------------------
def downgrade_to_version_2(root: Path) -> None:
    """Rewrite every segment of a closed encrypted channel that only put events as an earlier
    release wrote it (version 2: each PUT frame encrypted alone, its nonce its seq and type PUT,
    its header the associated data), with its .meta; the checkpoint goes (the pointers moved)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    for path in segments(root):
        data = path.read_bytes()
        aes = AESGCM(session_key(data))
        runs = {run[0]: inner for run, inner in zip(run_frames(path), opened_runs(path), strict=True)}
        out = bytearray(data[: fmt.SEGMENT_HEADER_SIZE])
        out[8:10] = b"\x02\x00"
        out[60:64] = struct.pack("<I", crc32c(bytes(out[:60])))
        pos, frames = fmt.SEGMENT_HEADER_SIZE, 0
        while pos < len(data):
            ftype, length, txn, _seq = fmt.check_frame(data, pos, len(data))
            assert ftype != fmt.FrameType.TAKE  # TAKE frames would name the old offsets
            for _offset, seq, payload in runs.get(pos, [(0, 0, b"")]):
                if ftype != fmt.FrameType.RUN:
                    out += data[pos: pos + length]
                else:
                    header = fmt.FRAME_HEADER.pack(fmt.FRAME_MAGIC, fmt.FrameType.PUT, 0,
                                                   len(payload) + fmt.FRAME_OVERHEAD + 16, txn, seq)
                    frame = header + aes.encrypt(struct.pack("<QI", seq, fmt.FrameType.PUT), payload, header)
                    out += frame + struct.pack("<I", crc32c(frame))
                frames += 1
            pos += length
        path.write_bytes(bytes(out))
        meta = path.with_name(f"{path.name}.meta")
        if meta.exists():
            record = pb.SegmentMeta.FromString(meta.read_bytes())
            record.data_end, record.frames = len(out), frames
            meta.write_bytes(record.SerializeToString())
    (root / "cp" / "checkpoint.meta").unlink()


def test_version_2_segments_of_earlier_releases_stay_readable(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 40)
        put(channel, 40, 40)
    downgrade_to_version_2(tmp_path)
    assert {p.read_bytes()[8] for p in segments(tmp_path)} == {2}
    assert verify_channel(*dirs_of(tmp_path), keys=keys_of(tmp_path)).ok
    with FileChannel(**keyed(tmp_path)) as channel:  # a full replay of version 2 segments
        with channel.transaction() as tx:
            assert bodies(tx.take(5)) == expected(0, 5)
        put(channel, 80, 5)  # written in version 4 next to them
    assert {p.read_bytes()[8] for p in segments(tmp_path)} == {2, 4}
    with FileChannel(**keyed(tmp_path)) as channel:  # from the checkpoint: read by pointer
        assert channel.replay_stats.frames == 0
        with channel.transaction() as tx:
            assert [e.body for e in tx.take_arrow(75).events()] == expected(5, 75)
        assert drain(channel) == expected(80, 5)


def test_a_tampered_version_2_frame_still_loses_only_its_frame_to_a_take(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 10)
    downgrade_to_version_2(tmp_path)
    with FileChannel(**keyed(tmp_path)):
        pass  # replayed, checkpointed
    path = segments(tmp_path)[0]
    offset, length, _txn, _seq = put_frames(path)[4]
    tamper(path, offset, length)
    with FileChannel(**keyed(tmp_path)) as channel:
        with channel.transaction() as tx:
            assert bodies(tx.take(4)) == expected(0, 4)
        with pytest.raises(CorruptLogError) as raised, channel.transaction() as tx:
            tx.take(1)
        assert raised.value.offset == offset and "authentication" in raised.value.reason


def test_a_damaged_frame_header_before_a_run_stops_the_take_and_names_that_frame(tmp_path: Path) -> None:
    """A take finds runs through the headers before them: a COMMIT frame's damaged header stops
    takes of the events after it (named, nothing skipped) but not of those before it."""
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 5)
        put(channel, 5, 5)
    path = segments(tmp_path)[0]
    commit = put_frames(path, fmt.FrameType.COMMIT)[0][0]
    flip(path, commit)  # its magic
    with FileChannel(**keyed(tmp_path)) as channel:  # from the checkpoint: log-1 is not replayed
        with channel.transaction() as tx:
            assert bodies(tx.take(5)) == expected(0, 5)
        with pytest.raises(CorruptLogError) as raised, channel.transaction() as tx:
            tx.take(5)
        assert (raised.value.path, raised.value.offset) == (str(path), commit)
        assert len(channel) == 5


def test_an_empty_put_many_seals_no_run(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        with channel.transaction() as tx:
            tx.put_many([])
            tx.put_many([event(0)])
            tx.put_many([])
    assert [len(inner) for inner in opened_runs(segments(tmp_path)[0])] == [1]
    (tmp_path / "cp" / "checkpoint.meta").unlink()
    with FileChannel(**keyed(tmp_path)) as channel:  # a full replay
        assert drain(channel) == expected(0, 1)
