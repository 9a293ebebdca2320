"""Operator tools: ``channel inspect`` (live, no lock), ``verify`` and ``repair`` (offline).

Every test builds a real channel in ``tmp_path`` with small segments (64 KiB) over two data
directories, damages it the way a disk or an operator would, and runs the CLI through
CliRunner or the library functions directly.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.checkpoint import decode_meta, encode_meta
from ingest_toolkit.channel.fs import OsFileSystem, write_atomic
from ingest_toolkit.channel.proto import channel_pb2 as pb
from ingest_toolkit.channel.replay import replay
from ingest_toolkit.channel.tools import ChannelInUseError, verify_channel
from ingest_toolkit.channel.tools import repair as repair_module
from ingest_toolkit.channel.tools.scan import NOOP_MAX, Damage, noop_frame, noop_frames, noop_sizes, walk
from ingest_toolkit.cli import main
from ingest_toolkit.errors import ChannelLockedError, CorruptLogError

BODY_PAD = b"." * 400  # ~150 events per 64 KiB segment


# -- helpers ------------------------------------------------------------------------------
def settings(root: Path) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "d1"), str(root / "d2")],
            "max_file_size": 64 * 1024, "max_event_size": 16_000, "min_free_bytes": 0,
            "preallocate_bytes": 8192, "keep_alive": 0.0, "checkpoint_interval": 0, "capacity": 10_000}


def dir_args(root: Path) -> list[str]:
    return ["--checkpoint-dir", str(root / "cp"), "--data-dir", str(root / "d1"), "--data-dir", str(root / "d2")]


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, ["channel", *args])


def cli_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = cli(*args, "--json")
    return result.exit_code, json.loads(result.output)


@dataclass
class Txn:
    txn_id: int
    seqs: list[int]
    bodies: list[bytes]


def put_txns(channel: FileChannel, count: int, per_txn: int, start: int = 0) -> list[Txn]:
    txns = []
    for t in range(start, start + count):
        bodies = [b"event-%03d-%03d|" % (t, i) + BODY_PAD for i in range(per_txn)]
        with channel.transaction() as tx:
            seqs = tx.put_many([Event(b, {}) for b in bodies])
        txns.append(Txn(tx.txn_id, seqs, bodies))
    return txns


def take(channel: FileChannel, n: int) -> list[bytes]:
    with channel.transaction() as tx:
        return [e.body for e in tx.take(n)]


def drain(root: Path) -> list[bytes]:
    """Open the channel and take everything, in order."""
    with FileChannel(**settings(root)) as channel:
        bodies = []
        while got := take(channel, 500):
            bodies += got
        return bodies


def build(root: Path, txns: int = 10, per_txn: int = 40, taken: int = 20) -> list[Txn]:
    """A closed channel of ~3 sealed segments; the first ``taken`` events are consumed."""
    with FileChannel(**settings(root)) as channel:
        history = put_txns(channel, txns, per_txn)
        take(channel, taken)
    return history


def segment(root: Path, log_id: int) -> Path:
    return root / ("d1" if log_id % 2 == 0 else "d2") / f"log-{log_id}"


def frames_of(path: Path) -> list[tuple[int, int, int, int, int]]:
    """``(offset, type, length, txn, seq)`` of every valid frame of a segment."""
    data = path.read_bytes()
    found, pos = [], fmt.SEGMENT_HEADER_SIZE
    while pos < len(data):
        try:
            ftype, length, txn, seq = fmt.check_frame(data, pos, len(data))
        except fmt.FrameError:
            break
        found.append((pos, ftype, length, txn, seq))
        pos += length
    return found


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0xFF]))


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != "in_use.lock"}


def findings(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["kind"] == kind]


def remaining(history: list[Txn], taken: int, dropped: set[int]) -> list[bytes]:
    """The bodies a drain returns: all but the first ``taken`` and those of dropped transactions."""
    gone = {b for t in history if t.txn_id in dropped for b in t.bodies}
    return [b for b in [b for t in history for b in t.bodies][taken:] if b not in gone]


def newest_segment(root: Path) -> Path:
    return max([*root.glob("d*/log-*[0-9]")], key=lambda p: int(p.name.removeprefix("log-")))


# -- inspect ------------------------------------------------------------------------------
INSPECT_KEYS = {"format", "checkpoint_dir", "data_dirs", "channel_id", "owner", "checkpoint", "checkpoint_problem",
                "logs", "log_files", "log_bytes", "problems", "backup", "live"}
CHECKPOINT_KEYS = {"path", "checkpoint_id", "written_unix_ns", "age_seconds", "interval_seconds", "queue_size",
                   "inflight_takes", "inflight_puts", "capacity", "fill_percent", "last_seq", "backlog_age_seconds",
                   "oldest_commit_unix_ns", "log_position", "puts_committed", "takes_committed", "log_bytes",
                   "backup_checkpoint_id"}
LOG_KEYS = {"log_id", "path", "size", "sealed", "data_end", "frames", "first_seq", "last_seq", "refcount", "problem",
            "key_id"}


def test_inspect_live_channel_before_and_after_a_checkpoint(tmp_path: Path) -> None:
    with FileChannel(**settings(tmp_path)) as channel:
        history = put_txns(channel, 8, 40)
        code, doc = cli_json("inspect", *dir_args(tmp_path))
        assert code == 0 and doc["checkpoint"] is None and doc["checkpoint_problem"] is None
        assert doc["channel_id"] == channel.stats()["channel_id"]
        human = cli("inspect", *dir_args(tmp_path))
        assert human.exit_code == 0 and "none yet" in human.output
        if os.path.exists("/proc/locks"):
            assert "being written" in human.output

        tx = channel.transaction()
        tx.take(7)  # open take: in flight at checkpoint time
        channel.checkpoint()
        code, doc = cli_json("inspect", *dir_args(tmp_path))
        tx.rollback()
        if os.path.exists("/proc/locks"):
            assert doc["owner"]["locked"] is True and doc["owner"]["holder"] == f"pid {os.getpid()}"
            live = doc["live"]  # the figures are a checkpoint's: how old, and what shows them live
            assert live["pid"] == os.getpid() and live["checkpoint_id"] == doc["checkpoint"]["checkpoint_id"]
            assert live["live_command"].startswith("ingest-toolkit status --conf")

    assert set(doc) == INSPECT_KEYS and set(doc["checkpoint"]) == CHECKPOINT_KEYS
    assert all(set(log) == LOG_KEYS for log in doc["logs"])
    cp = doc["checkpoint"]
    assert (cp["queue_size"], cp["inflight_takes"], cp["inflight_puts"], cp["capacity"]) == (320, 7, 0, 10_000)
    assert cp["fill_percent"] == pytest.approx(3.2)
    assert cp["last_seq"] == history[-1].seqs[-1]
    assert 0 <= cp["age_seconds"] < 60 and 0 <= cp["backlog_age_seconds"] < 60
    logs = doc["logs"]
    assert [log["log_id"] for log in logs] == list(range(1, len(logs) + 1)) and len(logs) >= 3
    assert cp["log_position"]["log_id"] == logs[-1]["log_id"] and not logs[-1]["sealed"]
    assert sum(log["refcount"] for log in logs) == 320
    first = logs[0]
    assert first["sealed"] and first["first_seq"] == history[0].seqs[0] and first["data_end"] == first["size"]
    assert first["size"] == segment(tmp_path, 1).stat().st_size


def test_inspect_closed_channel_shows_sealed_logs_and_no_owner(tmp_path: Path) -> None:
    history = build(tmp_path)
    code, doc = cli_json("inspect", *dir_args(tmp_path))
    assert code == 0 and doc["owner"]["locked"] in (False, None)
    assert all(log["sealed"] for log in doc["logs"])
    assert doc["logs"][-1]["last_seq"] == history[-1].seqs[-1]
    assert doc["checkpoint"]["queue_size"] == 400 - 20 and doc["checkpoint"]["takes_committed"] == 20
    human = cli("inspect", *dir_args(tmp_path))
    assert human.exit_code == 0 and doc["channel_id"] in human.output and "sealed" in human.output


def test_inspect_reports_an_unreadable_checkpoint_and_works_from_a_conf_file(tmp_path: Path) -> None:
    build(tmp_path)
    (tmp_path / "cp" / "checkpoint.meta").write_bytes(b"\xff\xff garbage")
    conf = tmp_path / "channel.toml"
    conf.write_text(f'[channel]\ncheckpoint_dir = "{tmp_path / "cp"}"\n'
                    f'data_dirs = ["{tmp_path / "d1"}", "{tmp_path / "d2"}"]\n')
    code, doc = cli_json("inspect", "--conf", str(conf))
    assert code == 0 and doc["checkpoint"] is None and "checkpoint.meta" in doc["checkpoint_problem"]
    assert all(log["refcount"] is None for log in doc["logs"])


def test_tools_name_missing_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = cli("inspect", "--checkpoint-dir", str(tmp_path / "nope"), "--data-dir", str(tmp_path))
    assert result.exit_code == 1 and "is not a directory" in result.output
    monkeypatch.chdir(tmp_path)  # no channel given, and no conf/agent.toml to find one in: usage error
    result = cli("verify")
    assert result.exit_code == 2 and "conf/agent.toml does not exist" in result.output


# -- verify -------------------------------------------------------------------------------
def test_verify_passes_on_a_healthy_channel_and_reports_progress(tmp_path: Path) -> None:
    build(tmp_path)
    result = cli("verify", *dir_args(tmp_path))
    assert result.exit_code == 0, result.output
    assert "OK" in result.output
    calls: list[tuple[str, int, int]] = []
    report = verify_channel(str(tmp_path / "cp"), [str(tmp_path / "d1"), str(tmp_path / "d2")],
                            progress=lambda phase, done, total: calls.append((phase, done, total)))
    assert report.ok and report.queue_size == 380 and report.segments >= 3
    assert ("full replay", report.segments, report.segments) in calls
    code, doc = cli_json("verify", *dir_args(tmp_path))
    assert code == 0 and doc["ok"] is True and doc["findings"] == [] and doc["queue_size"] == 380


def test_verify_finds_a_wrong_reference_count(tmp_path: Path) -> None:
    build(tmp_path)
    path = tmp_path / "cp" / "checkpoint.meta"
    meta = decode_meta(path.read_bytes())
    recorded = meta.log_refcounts[2]
    meta.log_refcounts[2] = recorded + 3
    write_atomic(OsFileSystem(), str(path), encode_meta(meta))
    code, doc = cli_json("verify", *dir_args(tmp_path))
    assert code == 1 and not doc["ok"]
    [mismatch] = findings(doc, "refcount_mismatch")
    assert (mismatch["log_id"], mismatch["recorded"], mismatch["recounted"]) == (2, recorded + 3, recorded)
    human = cli("verify", *dir_args(tmp_path))
    assert human.exit_code == 1 and "refcount_mismatch" in human.output and "log-2" in human.output


def test_verify_finds_a_deleted_referenced_log(tmp_path: Path) -> None:
    build(tmp_path)
    victim = segment(tmp_path, 1)
    victim.unlink()
    victim.with_name("log-1.meta").unlink()
    code, doc = cli_json("verify", *dir_args(tmp_path))
    assert code == 1
    [missing] = findings(doc, "missing_log")
    assert missing["log_id"] == 1 and missing["path"] == str(victim)
    assert not doc["ok"] and str(victim) in cli("verify", *dir_args(tmp_path)).output


def test_verify_finds_an_orphaned_log(tmp_path: Path) -> None:
    with FileChannel(**settings(tmp_path)) as channel:
        put_txns(channel, 4, 40)
        saved = {p: segment(tmp_path, 1).with_name(p).read_bytes() for p in ("log-1", "log-1.meta")}
        put_txns(channel, 6, 40, start=4)
        take(channel, 200)  # drains log-1 (about 150 events)
        assert 1 in channel.checkpoint().deleted_logs
    for name, data in saved.items():  # an old segment copied back in
        segment(tmp_path, 1).with_name(name).write_bytes(data)
    code, doc = cli_json("verify", *dir_args(tmp_path))
    assert code == 1
    [orphan] = findings(doc, "orphaned_log")
    assert orphan["log_id"] == 1 and orphan["path"] == str(segment(tmp_path, 1))


def test_verify_finds_a_corrupt_byte_and_an_unsealed_segment(tmp_path: Path) -> None:
    build(tmp_path)
    put = [f for f in frames_of(segment(tmp_path, 1)) if f[1] == fmt.FrameType.PUT][50]
    flip(segment(tmp_path, 1), put[0] + 40)
    segment(tmp_path, 2).with_name("log-2.meta").unlink()
    code, doc = cli_json("verify", *dir_args(tmp_path))
    assert code == 1
    [corrupt] = findings(doc, "corrupt_frame")
    assert (corrupt["path"], corrupt["offset"], corrupt["length"]) == (str(segment(tmp_path, 1)), put[0], put[2])
    assert "checksum" in corrupt["reason"]
    [unsealed] = findings(doc, "unsealed_log")
    assert unsealed["log_id"] == 2


def test_verify_recounts_open_transactions_of_a_checkpoint(tmp_path: Path) -> None:
    """A checkpoint taken with an open take and a spilled open put, as a crash would leave it."""
    with FileChannel(**{**settings(tmp_path), "spill_bytes": 4096}) as channel:
        put_txns(channel, 5, 40)
        spilled, done = threading.Event(), threading.Event()

        def open_put() -> None:  # one transaction per thread: the put runs in its own
            with pytest.raises(RuntimeError), channel.transaction() as tx:
                # 30 x 445 bytes > spill_bytes: written to the log ahead of a commit
                tx.put_many([Event(b"spilled-%02d" % i + BODY_PAD, {}) for i in range(30)])
                spilled.set()
                done.wait(10)
                raise RuntimeError("roll back")

        thread = threading.Thread(target=open_put)
        thread.start()
        assert spilled.wait(10)
        taking = channel.transaction()
        taking.take(15)
        assert channel.checkpoint().meta.inflight_puts > 0
        saved = {p.name: p.read_bytes() for p in (tmp_path / "cp").glob("checkpoint*")}
        taking.rollback()
        done.set()
        thread.join()
    for p in (tmp_path / "cp").glob("checkpoint*"):
        p.unlink()
    for name, data in saved.items():
        (tmp_path / "cp" / name).write_bytes(data)
    code, doc = cli_json("verify", *dir_args(tmp_path))
    assert code == 0, doc["findings"]
    meta = decode_meta((tmp_path / "cp" / "checkpoint.meta").read_bytes())
    assert (meta.inflight_takes, doc["queue_size"]) == (15, 200)


def test_a_torn_tail_of_the_newest_segment_is_left_to_recovery(tmp_path: Path) -> None:
    build(tmp_path)
    newest = newest_segment(tmp_path)
    newest.with_name(newest.name + ".meta").unlink()  # as a crash leaves the newest segment
    with open(newest, "ab") as f:  # the first 40 bytes of a 200-byte frame made it, then the crash
        f.write(fmt.encode_frame(fmt.FrameType.PUT, 9, 9, bytes(172))[:40] + bytes(4096))
    code, doc = cli_json("verify", *dir_args(tmp_path))
    assert code == 0 and any("torn write" in note and "loses nothing" in note for note in doc["notes"])
    result = cli("repair", "--yes", *dir_args(tmp_path))
    assert result.exit_code == 0 and "nothing to repair" in result.output


def test_verify_refuses_while_the_channel_is_open(tmp_path: Path) -> None:
    build(tmp_path)
    with FileChannel(**settings(tmp_path)):
        result = cli("verify", *dir_args(tmp_path))
        assert result.exit_code == 1
        assert "ChannelInUseError" in result.output and "inspect" in result.output
        with pytest.raises(ChannelLockedError) as raised:
            verify_channel(str(tmp_path / "cp"), [str(tmp_path / "d1"), str(tmp_path / "d2")])
        assert isinstance(raised.value, ChannelInUseError)
        assert cli("repair", "--dry-run", *dir_args(tmp_path)).exit_code == 1
    assert cli("verify", *dir_args(tmp_path)).exit_code == 0  # the tools released their locks


def straddling_channel(root: Path) -> None:
    """One put transaction whose frames span log-1 and log-2; after its first part is taken,
    the checkpoint deletes log-1 although the transaction's COMMIT (in log-2) counts its frames
    there: a full replay must apply the part that is left."""
    with FileChannel(**settings(root)) as channel:
        with channel.transaction() as tx:
            tx.put_many([Event(b"x" * 1000, {}) for _ in range(100)])
        take(channel, 80)
        assert channel.checkpoint().deleted_logs == [1]


def test_tools_accept_a_transaction_that_began_in_a_deleted_segment(tmp_path: Path) -> None:
    straddling_channel(tmp_path)
    code, doc = cli_json("verify", *dir_args(tmp_path))
    assert code == 0, doc["findings"]
    with FileChannel(**settings(tmp_path)) as channel:
        later = put_txns(channel, 3, 40)
    path = newest_segment(tmp_path)
    offset, _type, _length, txn, _seq = [f for f in frames_of(path) if f[1] == fmt.FrameType.PUT][50]
    flip(path, offset + 40)
    code, doc = cli_json("repair", "--yes", *dir_args(tmp_path))
    assert code == 0, doc
    assert [d["txn_id"] for d in doc["transactions_dropped"]] == [txn]  # not the one that began in log-1
    assert cli("verify", *dir_args(tmp_path)).exit_code == 0
    assert drain(tmp_path) == [b"x" * 1000] * 20 + [b for t in later if t.txn_id != txn for b in t.bodies]


def test_repair_refuses_when_a_segment_in_the_middle_is_missing(tmp_path: Path) -> None:
    build(tmp_path)
    segment(tmp_path, 2).unlink()
    segment(tmp_path, 2).with_name("log-2.meta").unlink()
    with pytest.raises(CorruptLogError, match="frames are missing"):  # a transaction spans log-2 and log-3
        replay(OsFileSystem(), [str(tmp_path / "d1"), str(tmp_path / "d2")])
    before = snapshot(tmp_path)
    result = cli("repair", "--yes", *dir_args(tmp_path))
    assert result.exit_code == 1 and "nothing was changed" in result.output and "missing" in result.output
    assert snapshot(tmp_path) == before


# -- repair -------------------------------------------------------------------------------
def test_repair_quarantines_a_damaged_put_frame(tmp_path: Path) -> None:
    history = build(tmp_path)
    path = segment(tmp_path, 1)
    frames = frames_of(path)
    victim = [f for f in frames if f[1] == fmt.FrameType.PUT][80]  # mid-segment, not yet taken
    offset, _type, length, txn, seq = victim
    flip(path, offset + length - 10)  # inside the event body
    damaged = path.read_bytes()

    code, doc = cli_json("repair", "--yes", *dir_args(tmp_path))
    assert code == 0, doc
    assert not doc["dry_run"] and doc["checkpoint_removed"] and not (tmp_path / "cp" / "checkpoint.meta").exists()
    [plan] = doc["segments"]
    assert plan["path"] == str(path)
    [damage] = plan["ranges"]
    assert (damage["offset"], damage["length"], damage["action"]) == (offset, length, "noop")
    assert damage["frames"][0]["type"] == "PUT" and damage["frames"][0]["seq"] == seq
    [dropped] = doc["transactions_dropped"]
    owner = next(t for t in history if t.txn_id == txn)
    assert dropped["txn_id"] == txn and dropped["kind"] == "put" and dropped["commit"]["path"] == str(path)
    assert sorted(e["seq"] for e in dropped["events"]) == owner.seqs and doc["events_lost"] == 40
    assert [e["verified"] for e in dropped["events"] if e["seq"] == seq] == [False]  # read from the damaged frame
    backups = [Path(b) for b in doc["backups"]]
    assert backups[0].name.startswith("log-1.bak-") and backups[0].read_bytes() == damaged
    assert doc["queue_after"] == 380 - 40

    repaired = path.read_bytes()
    assert len(repaired) == len(damaged) and repaired[:offset] == damaged[:offset]
    assert fmt.check_frame(repaired, offset, len(repaired))[:2] == (fmt.FrameType.NOOP, length)
    assert [f[0] for f in frames_of(path)] == [f[0] for f in frames]  # every frame kept its offset
    assert cli("verify", *dir_args(tmp_path)).exit_code == 0
    assert drain(tmp_path) == remaining(history, 20, {txn})
    assert cli("verify", *dir_args(tmp_path)).exit_code == 0


def test_repair_dry_run_and_refusal_without_yes_change_nothing(tmp_path: Path) -> None:
    build(tmp_path)
    put = [f for f in frames_of(segment(tmp_path, 2)) if f[1] == fmt.FrameType.PUT][10]
    flip(segment(tmp_path, 2), put[0] + 30)
    before = snapshot(tmp_path)
    refused = cli("repair", *dir_args(tmp_path))
    assert refused.exit_code == 1 and "--yes" in refused.output
    code, doc = cli_json("repair", "--dry-run", *dir_args(tmp_path))
    assert code == 0 and doc["dry_run"] and doc["changed"] and doc["events_lost"] == 40
    assert doc["backups"] == [] and not doc["checkpoint_removed"]
    human = cli("repair", "--dry-run", *dir_args(tmp_path))
    assert "would be dropped" in human.output and str(put[0]) in human.output
    assert snapshot(tmp_path) == before


def test_repair_of_a_damaged_commit_drops_its_transaction(tmp_path: Path) -> None:
    history = build(tmp_path)
    path = segment(tmp_path, 2)
    commits = [f for f in frames_of(path) if f[1] == fmt.FrameType.COMMIT]
    offset, _type, length, txn, _seq = commits[1]
    flip(path, offset + 25)  # the payload: its header still names the transaction
    code, doc = cli_json("repair", "--yes", *dir_args(tmp_path))
    assert code == 0, doc
    [dropped] = doc["transactions_dropped"]
    owner = next(t for t in history if t.txn_id == txn)
    assert dropped["txn_id"] == txn and dropped["commit"] is None
    assert "COMMIT frame was in the damaged" in dropped["cause"]
    assert sorted(e["seq"] for e in dropped["events"]) == owner.seqs and doc["events_lost"] == 40
    assert doc["segments"][0]["ranges"][0]["frames"][0]["type"] == "COMMIT"
    assert drain(tmp_path) == remaining(history, 20, {txn})
    assert cli("verify", *dir_args(tmp_path)).exit_code == 0


def test_repair_of_a_damaged_take_frame_gives_the_events_back(tmp_path: Path) -> None:
    history = build(tmp_path, taken=0)
    with FileChannel(**settings(tmp_path)) as channel:
        first = take(channel, 30)
        take(channel, 5)
    path = newest_segment(tmp_path)
    take_frame = [f for f in frames_of(path) if f[1] == fmt.FrameType.TAKE][0]
    flip(path, take_frame[0] + 30)
    code, doc = cli_json("repair", "--yes", *dir_args(tmp_path))
    assert code == 0, doc
    [dropped] = doc["transactions_dropped"]
    assert dropped["kind"] == "take" and dropped["events_returned"] == 30 and doc["events_lost"] == 0
    everything = [b for t in history for b in t.bodies]
    assert first == everything[:30]
    assert drain(tmp_path) == everything[:30] + everything[35:]  # delivered again, in order
    assert cli("verify", *dir_args(tmp_path)).exit_code == 0


def test_repair_reports_a_take_whose_frames_were_all_damaged(tmp_path: Path) -> None:
    history = build(tmp_path, taken=0)
    with FileChannel(**settings(tmp_path)) as channel:
        take(channel, 30)
    path = newest_segment(tmp_path)
    frames = frames_of(path)
    assert [f[1] for f in frames] == [fmt.FrameType.TAKE, fmt.FrameType.COMMIT]
    for offset, _type, length, _txn, _seq in frames:
        flip(path, offset + length - 1)  # both checksums: nothing valid is left in the segment
    code, doc = cli_json("repair", "--yes", *dir_args(tmp_path))
    assert code == 0, doc
    [dropped] = doc["transactions_dropped"]
    assert (dropped["txn_id"], dropped["kind"], dropped["events_returned"]) == (frames[0][3], "take", 30)
    assert "all its frames were in the damaged range" in dropped["cause"]
    assert drain(tmp_path) == [b for t in history for b in t.bodies]


def test_a_damaged_put_header_naming_another_transaction_is_still_attributed(tmp_path: Path) -> None:
    history = build(tmp_path)
    path = segment(tmp_path, 1)
    offset, _type, _length, txn, seq = [f for f in frames_of(path) if f[1] == fmt.FrameType.PUT][90]
    flip(path, offset + 8)  # the transaction id in the header
    code, doc = cli_json("repair", "--dry-run", *dir_args(tmp_path))
    assert code == 0
    assert doc["segments"][0]["ranges"][0]["frames"][0]["txn_id"] != txn
    [dropped] = doc["transactions_dropped"]
    owner = next(t for t in history if t.txn_id == txn)
    assert dropped["txn_id"] == txn and dropped["unreadable_events"] == 0 and doc["damaged_events"] == []
    assert sorted(e["seq"] for e in dropped["events"]) == owner.seqs and doc["events_lost"] == 40


def test_repair_cuts_damage_at_the_end_of_a_sealed_segment(tmp_path: Path) -> None:
    history = build(tmp_path)
    path = segment(tmp_path, 1)
    last = frames_of(path)[-1]
    with open(path, "r+b") as f:  # the last 20 bytes zeroed, as a lost block would leave them
        f.seek(last[0] + last[2] - 20)
        f.write(bytes(20))
    code, doc = cli_json("repair", "--yes", *dir_args(tmp_path))
    assert code == 0, doc
    plan = next(p for p in doc["segments"] if p["log_id"] == 1)
    assert plan["truncate_to"] == last[0] and plan["ranges"][0]["action"] == "truncate" and plan["meta_rewritten"]
    meta = pb.SegmentMeta.FromString(path.with_name("log-1.meta").read_bytes())
    assert meta.data_end == last[0] == path.stat().st_size
    dropped = {d["txn_id"] for d in doc["transactions_dropped"]}
    assert drain(tmp_path) == remaining(history, 20, dropped)
    assert cli("verify", *dir_args(tmp_path)).exit_code == 0


@pytest.mark.parametrize("log_id", [1, 3])  # a middle segment and the newest
def test_an_unreadable_segment_meta_is_reported_and_rebuilt(tmp_path: Path, log_id: int) -> None:
    history = build(tmp_path)
    meta_file = segment(tmp_path, log_id).with_name(f"log-{log_id}.meta")
    original = pb.SegmentMeta.FromString(meta_file.read_bytes())
    meta_file.write_bytes(b"\xff\xff\xff not a SegmentMeta")
    code, doc = cli_json("verify", *dir_args(tmp_path))
    assert code == 1 and [f["log_id"] for f in findings(doc, "meta_unreadable")] == [log_id]
    code, doc = cli_json("repair", "--yes", *dir_args(tmp_path))
    assert code == 0 and doc["segments"][0]["meta_unreadable"] and doc["events_lost"] == 0
    rebuilt = pb.SegmentMeta.FromString(meta_file.read_bytes())
    assert (rebuilt.data_end, rebuilt.frames) == (original.data_end, original.frames)
    seqs = [f[4] for f in frames_of(segment(tmp_path, log_id)) if f[1] == fmt.FrameType.PUT]
    assert (rebuilt.first_seq, rebuilt.last_seq) == (min(seqs), max(seqs))
    assert cli("verify", *dir_args(tmp_path)).exit_code == 0
    assert drain(tmp_path) == remaining(history, 20, set())


def test_repair_of_a_healthy_channel_changes_nothing(tmp_path: Path) -> None:
    build(tmp_path)
    before = snapshot(tmp_path)
    result = cli("repair", "--yes", *dir_args(tmp_path))
    assert result.exit_code == 0 and "nothing to repair" in result.output
    assert snapshot(tmp_path) == before


# -- NOOP frames and damaged ranges ---------------------------------------------------------
@pytest.mark.parametrize("sizes", [range(28, 600), range(28 + 120, 28 + 140), range(28 + 16370, 28 + 16400)])
def test_noop_frames_cover_every_possible_size_exactly(sizes: range) -> None:
    for length in sizes:
        if length == 29:
            with pytest.raises(ValueError):
                noop_sizes(length)
            continue
        frame = noop_frame(length, "reason text that may be cut or padded", 123456, 1_700_000_000_000_000_000)
        assert fmt.check_frame(frame, 0, len(frame))[:2] == (fmt.FrameType.NOOP, length)
        payload = pb.Noop.FromString(frame[24:-4])
        assert payload.replaced_bytes in (0, 123456)


def test_long_ranges_are_split_into_valid_noop_frames() -> None:
    for length in (NOOP_MAX + 1, NOOP_MAX + 29, NOOP_MAX + 100, 2 * NOOP_MAX + 28):
        sizes = noop_sizes(length)
        assert sum(sizes) == length and all(28 <= s <= NOOP_MAX and s != 29 for s in sizes)
    data = noop_frames(3000, "x", 0)
    assert fmt.check_frame(data, 0, len(data))[1] == 3000


def test_a_range_shorter_than_a_frame_absorbs_the_next_frame() -> None:
    header = fmt.encode_segment_header(7, bytes(16), 0)
    frames = [fmt.encode_frame(fmt.FrameType.PUT, 1, 10 + i, b"\x0a\x02hi") for i in range(3)]
    image = header + frames[0] + b"\x01\x02\x03\x04\x05" + frames[1] + frames[2]  # 5 bytes inserted
    items = list(walk(image, len(image), 7, "log-7", data_end=len(image)))
    damage = [i for i in items if isinstance(i, Damage)]
    assert len(items) == 3 and len(damage) == 1
    [d] = damage
    assert (d.offset, d.length, d.tail) == (64 + 32, 5 + 32, False)
    assert [(p.seq, p.verified) for p in d.frames] == [(11, True)]  # the absorbed frame is reported
    assert fmt.check_frame(noop_frames(d.length, "x", 0), 0, d.length)[1] == d.length


def test_repeated_repairs_keep_distinct_backups(tmp_path: Path) -> None:
    build(tmp_path)
    path = segment(tmp_path, 1)
    for n in range(2):
        put = [f for f in frames_of(path) if f[1] == fmt.FrameType.PUT][60 + 50 * n]
        flip(path, put[0] + 40)
        code, doc = cli_json("repair", "--yes", *dir_args(tmp_path))
        assert code == 0, doc
    backups = sorted(p.name for p in path.parent.glob("log-1.bak-*"))
    assert len(backups) == 2 and len(set(backups)) == 2
    assert cli("verify", *dir_args(tmp_path)).exit_code == 0


def test_repair_is_undone_when_the_repaired_log_does_not_replay(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    build(tmp_path)
    put = [f for f in frames_of(segment(tmp_path, 1)) if f[1] == fmt.FrameType.PUT][70]
    flip(segment(tmp_path, 1), put[0] + 40)
    before = snapshot(tmp_path)

    def failing_replay(*args: Any, **kwargs: Any) -> None:
        raise CorruptLogError(path="log-x", offset=1, reason="simulated")

    monkeypatch.setattr(repair_module, "replay", failing_replay)
    result = cli("repair", "--yes", *dir_args(tmp_path))
    assert result.exit_code == 1 and "repair undone" in result.output
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if ".bak-" not in k} == before  # originals back, checkpoint kept
    assert len(after) == len(before) + 2  # the backups stay
