"""Encryption at rest (docs/encryption.md): keys, rotation, wrong and missing keys, tampering,
and no event data in clear anywhere in the channel's files.

The crash, corruption and state-machine suites run encrypted too (``test_crash.py``
``..._encrypted``, the ``cipher``-parametrized tests of ``test_corruption.py``,
``test_state_machine.py`` ``..._encrypted``).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from crc32c import crc32c

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.checkpoint import read_checkpoint_meta
from ingest_toolkit.channel.codec import encode_put
from ingest_toolkit.channel.crypto import TAG_BYTES, KeyChain, load_keyring
from ingest_toolkit.channel.tools import repair_channel, verify_channel
from ingest_toolkit.cli import main
from ingest_toolkit.errors import ConfigError, CorruptLogError, EncryptionKeyError, TailRefusedError

KEY_A = bytes(range(32)).hex()
KEY_B = bytes(range(50, 82)).hex()
KEY_C = bytes(range(200, 232)).hex()
ENV = "ITK_TEST_ENCRYPTION_KEYS"
SECRET = b"TOP-SECRET-BODY-"
HEADER_SECRET = "TOP-SECRET-HEADER"


def write_keys(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def settings(root: Path, **more: Any) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "d0"), str(root / "d1")],
            "max_file_size": 64 * 1024, "max_event_size": 8000, "min_free_bytes": 0, "preallocate_bytes": 8192,
            "spill_bytes": 4096, "keep_alive": 0.0, **more}


def keyed(root: Path, key_id: int | None = 1, keys: str | None = None, **more: Any) -> dict[str, Any]:
    """Settings with the keys in a 0600 key file (``keys`` default: 1 and 2)."""
    path = write_keys(root / "keys", keys if keys is not None else f"1:{KEY_A}\n2:{KEY_B}\n")
    return settings(root, encryption_key_file=str(path), encryption_key_id=key_id, **more)


def event(i: int) -> Event:
    return Event(SECRET + str(i).encode() + bytes(200), {"h": HEADER_SECRET} if i % 3 == 0 else {})


def put(channel: FileChannel, first: int, n: int) -> None:
    with channel.transaction() as tx:
        tx.put_many([event(i) for i in range(first, first + n)])


def drain(channel: FileChannel) -> list[bytes]:
    with channel.transaction() as tx:
        return [e.body for e in tx.take(len(channel))]


def segments(root: Path) -> list[Path]:
    found = [p for d in ("d0", "d1") for p in (root / d).glob("log-*") if p.name[4:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[4:]))


def key_id_of(path: Path) -> int | None:
    key = fmt.segment_key(path.read_bytes()[: fmt.SEGMENT_HEADER_SIZE])
    return key.key_id if key else None


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a digest of its bytes and its mode: "nothing changed" checks."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode)
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "in_use.lock"}


def put_frames(path: Path, ftype: int = fmt.FrameType.PUT) -> list[tuple[int, int, int, int]]:
    """``(offset, length, txn, seq)`` of every top-level PUT frame (or frame of ``ftype``) of a segment."""
    data, found, pos = path.read_bytes(), [], fmt.SEGMENT_HEADER_SIZE
    while pos < len(data):
        try:
            frame_type, length, txn, seq = fmt.check_frame(data, pos, len(data))
        except fmt.FrameError:
            break
        if frame_type == ftype:
            found.append((pos, length, txn, seq))
        pos += length
    return found


def run_frames(path: Path) -> list[tuple[int, int, int, int]]:
    """``(offset, length, txn, first seq)`` of every RUN frame (sealed run) of a segment."""
    return put_frames(path, fmt.FrameType.RUN)


def session_key(data: bytes, key: str = KEY_A) -> bytes:
    """The AES key of the session that wrote the segment ``data``, derived as docs/log-format.md says."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    channel_id, salt, check = data[24:40], data[48:56], data[56:60]
    out = HKDF(hashes.SHA256(), 36, salt=None,
               info=b"ingest-toolkit log v2 session key\x00" + channel_id + salt).derive(bytes.fromhex(key))
    assert out[32:] == check
    return out[:32]


def segment_key(data: bytes, key: str = KEY_A) -> bytes:
    """The key of a version 4 segment: HKDF-SHA256 of its session key and its log id (the spec)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    info = b"ingest-toolkit log v4 segment key\x00" + data[16:24]  # the log id field: u64, little-endian
    return HKDF(hashes.SHA256(), 32, salt=None, info=info).derive(session_key(data, key))


def unseal(data: bytes, offset: int, length: int, seq: int) -> bytes:
    """The plaintext of the RUN frame at ``offset`` of the segment ``data``, decrypted with the spec
    alone. Version 4: the segment's key, nonce first seq + offset (u32), associated data the RUN
    header + log id + offset (u64 each); version 3: the session key, nonce first seq + type RUN,
    associated data the RUN header."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    frame = data[offset: offset + length]
    if data[8] == 4:
        aad = frame[:24] + data[16:24] + struct.pack("<Q", offset)
        return AESGCM(segment_key(data)).decrypt(struct.pack("<QI", seq, offset), frame[24:-4], aad)
    return AESGCM(session_key(data)).decrypt(struct.pack("<QI", seq, fmt.FrameType.RUN), frame[24:-4], frame[:24])


def opened_runs(path: Path) -> list[list[tuple[int, int, bytes]]]:
    """Per RUN frame of a segment: ``(offset in the file, seq, payload)`` of each PUT frame it seals,
    decrypted with the spec alone (:func:`unseal`)."""
    data = path.read_bytes()
    runs = []
    for offset, length, _txn, seq in run_frames(path):
        plain = unseal(data, offset, length, seq)
        inner, pos = [], 0
        while pos < len(plain):
            _ftype, size, _t, inner_seq = fmt.check_frame(plain, pos, len(plain))
            inner.append((offset + 24 + pos, inner_seq, plain[pos + 24: pos + size - 4]))
            pos += size
        runs.append(inner)
    return runs


def tamper(path: Path, offset: int, length: int) -> None:
    """Change one ciphertext byte of the frame at ``offset`` and fix its CRC: only the AEAD tag
    can tell (what a deliberate change does, unlike a random bit flip)."""
    data = bytearray(path.read_bytes())
    data[offset + fmt.FRAME_HEADER.size + 1] ^= 0x01
    end = offset + length - 4
    data[end:end + 4] = struct.pack("<I", crc32c(bytes(data[offset:end])))
    path.write_bytes(bytes(data))


# -- the basics --------------------------------------------------------------------------
def test_encrypted_channel_round_trips_and_writes_version_4_segments(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 30)
        assert channel.stats()["writing"]
    assert all(key_id_of(p) == 1 for p in segments(tmp_path))
    path = segments(tmp_path)[0]
    assert path.read_bytes()[8:10] == b"\x04\x00"  # version 4: sealed runs bound to their place
    assert put_frames(path) == []  # no PUT frame outside a run
    [(_offset, length, _txn, _seq)] = run_frames(path)  # one put_many: one run, one AEAD call
    [inner] = opened_runs(path)
    assert [payload for _o, _s, payload in inner] == [encode_put(event(i).body, event(i).headers) for i in range(30)]
    assert length == sum(fmt.FRAME_OVERHEAD + len(p) for _o, _s, p in inner) + fmt.FRAME_OVERHEAD + TAG_BYTES
    with FileChannel(**keyed(tmp_path)) as channel:
        events = channel.transaction().take(30)
        assert [(e.body, dict(e.headers)) for e in events] == [(event(i).body, event(i).headers) for i in range(30)]


def test_no_event_bytes_in_clear_in_any_file(tmp_path: Path) -> None:
    """Bodies and header values, put in small and spilled transactions, taken, rolled back,
    checkpointed (with a backup copy): none of their bytes appear in any file of the channel."""
    backup = {"backup_checkpoint_dir": str(tmp_path / "backup")}
    with FileChannel(**keyed(tmp_path, **backup)) as channel:
        put(channel, 0, 50)
        put(channel, 50, 60)  # over spill_bytes: frames written ahead of the commit
        tx = channel.transaction()
        tx.put_many([event(i) for i in range(200, 240)])  # spilled, then rolled back
        tx.rollback()
        with channel.transaction() as take_tx:
            take_tx.take(20)
        channel.checkpoint()
        put(channel, 300, 5)
    with FileChannel(**keyed(tmp_path, **backup)) as channel:  # a second session, a second checkpoint
        put(channel, 400, 5)
        channel.checkpoint()
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "keys"]
    assert any(p.name == "checkpoint.meta" for p in files) and any(p.name.endswith(".queue") for p in files)
    assert any(p.parent.name == "backup" and p.name.endswith(".queue") for p in files)
    for path in files:
        data = path.read_bytes()
        assert SECRET not in data and HEADER_SECRET.encode() not in data, path
        assert bytes(event(7).body[:12]) not in data, path
    # checkpoint.meta stays in clear: anyone can read it without a key
    info = read_checkpoint_meta(str(tmp_path / "cp"))
    assert info is not None and info.queue_size == 50 + 60 + 5 + 5 - 20


def test_every_nonce_is_used_once_per_session_key(tmp_path: Path) -> None:
    """(key id, salt, seq) never repeats across frames, segments, rollbacks and restarts."""
    for _session in range(3):
        with FileChannel(**keyed(tmp_path, max_file_size=64 * 1024)) as channel:
            put(channel, 0, 120)  # more than one segment
            tx = channel.transaction()
            tx.put_many([event(i) for i in range(60)])  # spilled and rolled back
            tx.rollback()
            put(channel, 0, 3)
    seen: set[tuple[int, bytes, int]] = set()
    sealed: set[tuple[bytes, int]] = set()  # (salt, seq) of every event sealed in a run
    salts = set()
    for path in segments(tmp_path):
        key = fmt.segment_key(path.read_bytes()[: fmt.SEGMENT_HEADER_SIZE])
        assert key is not None and key.runs
        salts.add(key.salt)
        for (_offset, _length, _txn, seq), inner in zip(run_frames(path), opened_runs(path), strict=True):
            nonce = (key.key_id, key.salt, seq)  # a RUN frame's nonce: its first seq (and type RUN)
            assert nonce not in seen, f"nonce {nonce} repeats in {path}"
            seen.add(nonce)
            assert inner[0][1] == seq
            events = {(key.salt, inner_seq) for _o, inner_seq, _p in inner}
            assert not events & sealed, f"an event is sealed twice in {path}"
            sealed |= events
    assert len(salts) == 3  # one per session (every open writes new segments)
    assert len(sealed) >= 3 * (120 + 3)
    assert len(seen) >= 3 * 3  # several runs per session: 120 events of a 64 KiB channel make more than one


# -- keys --------------------------------------------------------------------------------
def test_rotation_across_a_restart(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path, key_id=1)) as channel:
        put(channel, 0, 10)
    with FileChannel(**keyed(tmp_path, key_id=2)) as channel:  # rotated: new segments use key 2
        put(channel, 10, 10)
    assert [key_id_of(p) for p in segments(tmp_path)] == [1, 2]
    with FileChannel(**keyed(tmp_path, key_id=2)) as channel:  # key 1 segments still read
        assert drain(channel) == [event(i).body for i in range(20)]
        put(channel, 20, 5)
    assert 1 not in [key_id_of(p) for p in segments(tmp_path)]  # drained: the key 1 segment is gone
    with FileChannel(**keyed(tmp_path, key_id=2, keys=f"2:{KEY_B}\n")) as channel:  # key 1 no longer needed
        assert drain(channel) == [event(i).body for i in range(20, 25)]


def test_a_key_still_needed_cannot_be_dropped(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path, key_id=1)) as channel:
        put(channel, 0, 10)
    before = tree(tmp_path)
    with pytest.raises(EncryptionKeyError) as raised:
        FileChannel(**keyed(tmp_path, key_id=2, keys=f"2:{KEY_B}\n"))
    err = raised.value
    assert err.key_id == 1 and err.path == str(segments(tmp_path)[0])
    message = str(err)
    assert "key id 1" in message and "log-" in message and "channel.encryption_key_file" in message
    assert "nothing was changed" in message
    before["keys"] = tree(tmp_path)["keys"]  # the test rewrote the key file, nothing else may differ
    assert tree(tmp_path) == before


def test_wrong_key_under_the_same_id_changes_nothing(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 10)
    os.remove(tmp_path / "cp" / "checkpoint.meta")  # the next open would replay in full
    before = tree(tmp_path)
    with pytest.raises(EncryptionKeyError) as raised:
        FileChannel(**keyed(tmp_path, keys=f"1:{KEY_C}\n"))
    assert raised.value.key_id == 1 and "different key" in str(raised.value)
    before["keys"] = tree(tmp_path)["keys"]
    assert tree(tmp_path) == before
    with FileChannel(**keyed(tmp_path)) as channel:  # the right key: everything is there
        assert drain(channel) == [event(i).body for i in range(10)]


def test_missing_keys_change_nothing(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 10)
    before = tree(tmp_path)
    with pytest.raises(EncryptionKeyError) as raised:
        FileChannel(**settings(tmp_path))  # encryption settings forgotten
    assert "no encryption key is configured" in str(raised.value)
    assert "channel.encryption_key_file or channel.encryption_key_env" in str(raised.value)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_key_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = write_keys(tmp_path / "keys", f"1:{KEY_A}\n", mode)
    with pytest.raises(ConfigError) as raised:
        FileChannel(**settings(tmp_path, encryption_key_file=str(path), encryption_key_id=1))
    assert raised.value.key == "channel.encryption_key_file"
    assert str(path) in str(raised.value) and "chmod 600" in str(raised.value)
    assert not (tmp_path / "cp").exists()  # refused before anything was created


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_key_file_only_its_owner_reads_is_accepted(tmp_path: Path, mode: int) -> None:
    path = write_keys(tmp_path / "keys", f"# comment\n7:{KEY_A}  # the 2026 key\n", mode)
    with FileChannel(**settings(tmp_path, encryption_key_file=str(path), encryption_key_id=7)) as channel:
        put(channel, 0, 1)
    assert key_id_of(segments(tmp_path)[0]) == 7


def test_keys_from_an_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    monkeypatch.setenv(ENV, f"3:{base64.b64encode(bytes.fromhex(KEY_A)).decode()},4:{KEY_B}")
    with FileChannel(**settings(tmp_path, encryption_key_env=ENV, encryption_key_id=4)) as channel:
        put(channel, 0, 3)
    assert key_id_of(segments(tmp_path)[0]) == 4
    monkeypatch.delenv(ENV)
    with pytest.raises(ConfigError) as raised:
        FileChannel(**settings(tmp_path, encryption_key_env=ENV, encryption_key_id=4))
    assert raised.value.key == "channel.encryption_key_env" and ENV in str(raised.value)


@pytest.mark.parametrize(("text", "problem"), [
    ("", "holds no key"),
    (f"x:{KEY_A}", "entry 1"),
    (f"0:{KEY_A}", "entry 1"),
    (f"1:{KEY_A[:-2]}", "not a 32-byte key"),
    (f"1:{KEY_A} 1:{KEY_B}", "given twice"),
    (f"2:{KEY_A}", "holds no key with that id"),
])
def test_bad_key_material_is_a_config_error(tmp_path: Path, text: str, problem: str) -> None:
    path = write_keys(tmp_path / "keys", text)
    with pytest.raises(ConfigError) as raised:
        FileChannel(**settings(tmp_path, encryption_key_file=str(path), encryption_key_id=1))
    assert problem in str(raised.value)
    assert KEY_A not in str(raised.value) and KEY_A[:-2] not in str(raised.value)  # never the key itself


def test_key_id_without_keys_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        FileChannel(**settings(tmp_path, encryption_key_id=1))
    assert raised.value.key == "encryption_key_id"


def test_keys_without_an_active_id_read_but_write_in_clear(tmp_path: Path) -> None:
    """Switching encryption off: old segments stay readable while their key is configured."""
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 5)
    with FileChannel(**keyed(tmp_path, key_id=None)) as channel:
        put(channel, 5, 5)
    assert [key_id_of(p) for p in segments(tmp_path)] == [1, None]
    with FileChannel(**keyed(tmp_path, key_id=None)) as channel:
        assert drain(channel) == [event(i).body for i in range(10)]


def test_turning_encryption_on_keeps_old_plain_segments_readable(tmp_path: Path) -> None:
    with FileChannel(**settings(tmp_path)) as channel:
        put(channel, 0, 5)
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 5, 5)
    assert [key_id_of(p) for p in segments(tmp_path)] == [None, 1]
    with FileChannel(**keyed(tmp_path)) as channel:
        assert drain(channel) == [event(i).body for i in range(10)]


# -- tampering ---------------------------------------------------------------------------
def full_replay(root: Path) -> None:
    (root / "cp" / "checkpoint.meta").unlink(missing_ok=True)


def test_tampered_ciphertext_in_a_sealed_segment_is_reported(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 4)
        put(channel, 4, 10)
    path = segments(tmp_path)[0]
    offset, length, _txn, _seq = run_frames(path)[1]
    tamper(path, offset, length)
    full_replay(tmp_path)
    with pytest.raises(CorruptLogError) as raised:
        FileChannel(**keyed(tmp_path))
    assert (raised.value.path, raised.value.offset) == (str(path), offset)
    assert "authentication" in raised.value.reason


def test_tampered_ciphertext_behind_a_checkpoint_is_reported_by_the_take(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 4)
        put(channel, 4, 6)
    path = segments(tmp_path)[0]
    offset, length, _txn, _seq = run_frames(path)[1]  # the run of events 4..9
    tamper(path, offset, length)
    with FileChannel(**keyed(tmp_path)) as channel:
        assert channel.replay_stats.frames == 0  # from the checkpoint: log-1 not read at open
        with pytest.raises(CorruptLogError) as raised, channel.transaction() as tx:
            tx.take(10)
        assert (raised.value.path, raised.value.offset) == (str(path), offset)
        assert "authentication" in raised.value.reason
        assert len(channel) == 10  # nothing taken, nothing skipped
        with channel.transaction() as tx:  # the runs before it are still readable
            assert [e.body for e in tx.take(4)] == [event(i).body for i in range(4)]
        with pytest.raises(CorruptLogError), channel.transaction() as tx:  # every event of the run is lost
            tx.take(1)


def test_tampered_ciphertext_at_the_end_is_damage_not_a_torn_write(tmp_path: Path) -> None:
    """The last transaction's run altered and its COMMIT gone: a run written whole that fails
    authentication is damage (a crash cannot produce it), so it is refused like a checksum
    failure of a whole frame; recovery_mode = "set_aside" cuts it and records the incident."""
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 4)
        put(channel, 4, 3)
    path = segments(tmp_path)[0]
    (path.parent / f"{path.name}.meta").unlink()  # the newest segment, as a crash leaves it
    offset, length, _txn, _seq = run_frames(path)[1]  # the run of the last transaction
    data = path.read_bytes()
    path.write_bytes(data[:-32])  # its COMMIT frame (32 bytes) never reached the disk
    tamper(path, offset, length)
    full_replay(tmp_path)
    with pytest.raises(TailRefusedError) as refused:
        FileChannel(**keyed(tmp_path))
    assert refused.value.offset == offset and "authentication" in refused.value.reason and not refused.value.torn
    with FileChannel(**keyed(tmp_path, recovery_mode="set_aside")) as channel:
        assert channel.replay_stats.torn_bytes == length
        assert [(i.kind, i.offset) for i in channel.incidents()] == [("damaged_tail", offset)]
        assert drain(channel) == [event(i).body for i in range(4)]


def test_verify_and_repair_with_the_key(tmp_path: Path) -> None:
    with FileChannel(**keyed(tmp_path)) as channel:
        put(channel, 0, 10)
        put(channel, 10, 10)
    cp, data = str(tmp_path / "cp"), [str(tmp_path / "d0"), str(tmp_path / "d1")]
    keys = KeyChain(load_keyring(key_file=str(tmp_path / "keys"), key_env=None, active=None))
    assert verify_channel(cp, data, keys=keys).ok
    with pytest.raises(EncryptionKeyError):
        verify_channel(cp, data)  # without the key: one clear error, not a report of damage
    path = segments(tmp_path)[0]
    offset, length, txn, _seq = run_frames(path)[1]  # the second transaction's run
    tamper(path, offset, length)
    report = verify_channel(cp, data, keys=keys)
    assert not report.ok
    [finding] = [f for f in report.findings if f.kind == "corrupt_frame"]
    assert finding.data["offset"] == offset and "authentication" in str(finding.data["reason"])
    plan = repair_channel(cp, data, dry_run=True, keys=keys)
    assert [d.txn_id for d in plan.dropped] == [txn] and plan.events_lost == 10  # counted from its COMMIT
    repair_channel(cp, data, dry_run=False, keys=keys)
    assert verify_channel(cp, data, keys=keys).ok
    with FileChannel(**keyed(tmp_path)) as channel:
        assert drain(channel) == [event(i).body for i in range(10)]


def test_cli_tools_take_the_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"1:{KEY_A}")
    with FileChannel(**settings(tmp_path, encryption_key_env=ENV, encryption_key_id=1)) as channel:
        put(channel, 0, 5)
    dirs = ["--checkpoint-dir", str(tmp_path / "cp"), "--data-dir", str(tmp_path / "d0"),
            "--data-dir", str(tmp_path / "d1")]
    runner = CliRunner()
    result = runner.invoke(main, ["channel", "verify", "--json", "--key-env", ENV, *dirs])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["ok"] is True
    result = runner.invoke(main, ["channel", "verify", "--json", *dirs])
    assert result.exit_code != 0 and "key id 1" in result.output and "--key-file or --key-env" in result.output
    result = runner.invoke(main, ["channel", "inspect", "--json", *dirs])  # no key needed: headers only
    assert result.exit_code == 0
    assert {log["key_id"] for log in json.loads(result.output)["logs"]} == {1}


@pytest.mark.parametrize("how", ["take", "take_columns", "take_arrow"])
def test_every_take_reads_encrypted_events_exactly(tmp_path: Path, how: str) -> None:
    """Bodies around the varint boundaries, with and without headers, through each take."""
    sizes = [0, 1, 2, 125, 126, 127, 128, 129, 5000, 7000]
    events = [Event(bytes([i % 251]) * n, {"k": str(i)} if i % 2 else {}) for i, n in enumerate(sizes * 2)]
    with FileChannel(**keyed(tmp_path)) as channel:
        with channel.transaction() as tx:
            seqs = tx.put_many(events)
    with FileChannel(**keyed(tmp_path)) as channel, channel.transaction() as tx:
        got = getattr(tx, how)(len(events))
        taken = got if how == "take" else got.events()
    assert [(e.body, dict(e.headers), e.seq) for e in taken] == [
        (e.body, dict(e.headers), s) for e, s in zip(events, seqs, strict=True)]


# -- the byte layout (docs/log-format.md, "Encrypted segments") -----------------------------
def reseal_header(head: bytearray) -> bytes:
    head[60:64] = struct.pack("<I", crc32c(bytes(head[:60])))
    return bytes(head)


@pytest.mark.parametrize("version", [3, 4])
def test_version_3_and_4_headers_round_trip(version: int) -> None:
    key = fmt.SegmentKey(513, bytes(range(8)), b"\x01\x02\x03\x04", version)
    header = fmt.encode_segment_header(9, bytes(range(16)), 123, key)
    assert header[8:10] == bytes([version, 0]) and header[12:16] == b"\x01\x00\x01\x02"
    assert fmt.decode_segment_header(header) == (9, bytes(range(16)), 123)
    assert fmt.segment_key(header) == key and key.runs and key.bound == (version == 4)


def test_version_2_header_round_trip_and_validation() -> None:
    key = fmt.SegmentKey(513, bytes(range(8)), b"\x01\x02\x03\x04")
    header = fmt.encode_segment_header(9, bytes(range(16)), 123, key)
    assert len(header) == fmt.SEGMENT_HEADER_SIZE and header[8:10] == b"\x02\x00"
    assert header[12:16] == b"\x01\x00\x01\x02" and header[48:60] == bytes(range(8)) + b"\x01\x02\x03\x04"
    assert fmt.decode_segment_header(header) == (9, bytes(range(16)), 123)
    assert fmt.segment_key(header) == key
    assert fmt.segment_key(fmt.encode_segment_header(9, bytes(16), 0)) is None  # version 1: plain
    with pytest.raises(fmt.FrameError, match="unknown cipher"):
        fmt.decode_segment_header(reseal_header(bytearray(header[:12]) + b"\x02" + header[13:]))
    with pytest.raises(fmt.FrameError, match="key id 0"):
        fmt.decode_segment_header(reseal_header(bytearray(header[:14]) + b"\x00\x00" + header[16:]))


def test_a_sealed_run_is_as_the_spec_says(tmp_path: Path) -> None:
    """Derive the segment's key as docs/log-format.md describes and decrypt a run with it, at its
    place: the plaintext is the transaction's PUT frames of version 1, back to back, and the
    pointers of the events are the offsets of those frames in the file."""
    with FileChannel(**keyed(tmp_path)) as channel:
        with channel.transaction() as tx:
            seqs = tx.put_many([event(i) for i in range(3)])
            txn = tx.txn_id
        pointers = channel._queue.peek(3)
    path = segments(tmp_path)[0]
    data = path.read_bytes()
    [(offset, length, run_txn, seq)] = run_frames(path)
    assert (run_txn, seq) == (txn, seqs[0])
    assert data[8] == 4
    plain = unseal(data, offset, length, seq)
    expected = [fmt.encode_frame(fmt.FrameType.PUT, txn, s, encode_put(event(i).body, event(i).headers))
                for i, s in enumerate(seqs)]
    assert plain == b"".join(expected)
    starts = [offset + 24 + sum(map(len, expected[:k])) for k in range(3)]
    assert [fmt.pointer_offset(p) for p in pointers] == starts


def test_cli_tools_use_the_keys_of_the_channel_settings_file(tmp_path: Path) -> None:
    cfg = keyed(tmp_path)
    with FileChannel(**cfg) as channel:
        put(channel, 0, 5)
    conf = tmp_path / "channel.toml"
    conf.write_text(f'[channel]\ncheckpoint_dir = "{cfg["checkpoint_dir"]}"\n'
                    f'data_dirs = ["{cfg["data_dirs"][0]}", "{cfg["data_dirs"][1]}"]\n'
                    f'encryption_key_file = "{cfg["encryption_key_file"]}"\nencryption_key_id = 1\n')
    runner = CliRunner()
    for command in (["verify"], ["repair", "--dry-run"]):
        result = runner.invoke(main, ["channel", *command, "--json", "--conf", str(conf)])
        assert result.exit_code == 0, result.output
    os.chmod(tmp_path / "keys", 0o644)  # the tools refuse the key file as the channel does
    result = runner.invoke(main, ["channel", "verify", "--json", "--conf", str(conf)])
    assert result.exit_code != 0 and "chmod 600" in result.output
