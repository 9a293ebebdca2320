"""No drop is silent (issue 28): recovery modes, incidents, acknowledgement, the check.

A torn write that held events is cut and recorded; a damaged tail is refused by default, cut and
set aside with ``recovery_mode = "set_aside"``, and every torn or damaged tail is refused with
``"strict"``. Every cut that drops events becomes an incident in ``incidents.json``: counted in the
channel's status and metrics, listed by ``channel incidents``, failing the
``recovery_losses_acknowledged`` check until ``channel acknowledge`` marks it handled.
``channel verify`` says what the next open would do.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel import format as fmt
from ingest_toolkit.channel.incidents import INCIDENTS_FILE, load_incidents
from ingest_toolkit.channel.tools import repair_channel, verify_channel
from ingest_toolkit.cli import main
from ingest_toolkit.errors import TailRefusedError
from ingest_toolkit.orchestrate.channel_checks import recovery_losses_acknowledged
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings
from ingest_toolkit.orchestrate.verdict import Severity

from .checkpoint_helpers import queued


def settings(root: Path, **more: Any) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "cp"), "data_dirs": [str(root / "data")], "min_free_bytes": 0,
            "keep_alive": 0.0, "checkpoint_interval": 3600, "preallocate_bytes": 65536, **more}


def dir_args(root: Path) -> list[str]:
    return ["--checkpoint-dir", str(root / "cp"), "--data-dir", str(root / "data")]


def crashed(root: Path, transactions: int = 3) -> Path:
    """``transactions`` put transactions of 5 events, then a copy of the directories as a crash
    leaves them (the newest segment unsealed, preallocated zeros after the last frame)."""
    live = root / "live"
    channel = FileChannel(**settings(live))
    try:
        for t in range(transactions):
            with channel.transaction() as tx:
                tx.put_many([Event(b"t%d-%d" % (t, i)) for i in range(5)])
        shutil.copytree(live, root / "crashed", ignore=shutil.ignore_patterns("in_use.lock"))
    finally:
        channel.close()
    return root / "crashed"


def newest(root: Path) -> Path:
    return max((p for p in (root / "data").glob("log-*") if p.name[4:].isdigit()), key=lambda p: int(p.name[4:]))


def last_commit(path: Path) -> tuple[int, int]:
    data, pos, found = path.read_bytes(), fmt.SEGMENT_HEADER_SIZE, (0, 0)
    while pos + fmt.FRAME_OVERHEAD <= len(data) and data[pos: pos + 2] == fmt.FRAME_MAGIC:
        ftype, length, _txn, _seq = fmt.check_frame(data, pos, len(data))
        if ftype == fmt.FrameType.COMMIT:
            found = (pos, length)
        pos += length
    return found


def damage_last_commit(root: Path) -> int:
    path = newest(root)
    offset, length = last_commit(path)
    data = bytearray(path.read_bytes())
    data[offset + length // 2] ^= 0x10
    path.write_bytes(bytes(data))
    return offset


def tear_last_commit(root: Path) -> int:
    """The crash interrupted the last commit's write: its COMMIT frame never reached the disk
    beyond its first 10 bytes (what a machine crash leaves of a write that was not synced)."""
    path = newest(root)
    offset, length = last_commit(path)
    data = bytearray(path.read_bytes())
    data[offset + 10: offset + length] = bytes(length - 10)
    path.write_bytes(bytes(data))
    return offset


def spec_of(root: Path) -> ChannelSpec:
    return ChannelSpec(name="events", checkpoint_dir=str(root / "cp"), data_dirs=(str(root / "data"),),
                       capacity=1_000_000, checkpoint_interval=3600)


SETTINGS = OrchestrationSettings()


def test_a_torn_write_is_cut_and_recorded_as_an_incident_never_silently(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    root = crashed(tmp_path)
    offset = tear_last_commit(root)
    with caplog.at_level(logging.ERROR), FileChannel(**settings(root)) as channel:
        assert queued(channel) == [b"t%d-%d" % (t, i) for t in range(2) for i in range(5)]
        [incident] = channel.incidents()
        summary = channel.stats()["incidents"]
    assert (incident.kind, incident.offset, incident.events, incident.transactions) == ("torn_tail", offset, 5, 1)
    assert not incident.acknowledged_data  # fsync: that commit never returned
    assert summary["open"] == 1 and summary["events"] == 5
    assert "5 events in 1 transactions" in caplog.text and "incident 1" in caplog.text  # logged at ERROR
    assert Path(incident.quarantine).exists()
    with FileChannel(**settings(root)) as channel:  # the next open keeps it, and cuts nothing more
        assert [i.id for i in channel.incidents()] == [1] and len(channel) == 10


def test_a_torn_write_of_a_page_cache_channel_may_hold_acknowledged_commits(tmp_path: Path) -> None:
    root = crashed(tmp_path)
    tear_last_commit(root)
    with FileChannel(**settings(root, durability="page_cache")) as channel:
        [incident] = channel.incidents()
    assert incident.acknowledged_data


def test_strict_mode_refuses_even_a_torn_write(tmp_path: Path) -> None:
    root = crashed(tmp_path)
    offset = tear_last_commit(root)
    before = newest(root).read_bytes()
    with pytest.raises(TailRefusedError) as refused:
        FileChannel(**settings(root, recovery_mode="strict"))
    err = refused.value
    assert err.torn and (err.offset, err.events, err.transactions) == (offset, 5, 1)
    assert 'recovery_mode = "torn_tail"' in str(err) and "\n" not in str(err)
    assert newest(root).read_bytes() == before and not (root / "cp" / INCIDENTS_FILE).exists()


def test_verify_and_open_agree_on_every_tail(tmp_path: Path) -> None:
    """A directory verify reports consistent opens with every event; one open would change or
    refuse is a verify finding naming the offset and the events."""
    clean = crashed(tmp_path / "clean")
    assert verify_channel(str(clean / "cp"), [str(clean / "data")]).ok
    torn = crashed(tmp_path / "torn")
    offset = tear_last_commit(torn)
    report = verify_channel(str(torn / "cp"), [str(torn / "data")])
    [finding] = [f for f in report.findings if f.kind == "torn_tail"]
    assert not report.ok and finding.data["offset"] == offset and finding.data["events"] == 5
    damaged = crashed(tmp_path / "damaged")
    offset = damage_last_commit(damaged)
    report = verify_channel(str(damaged / "cp"), [str(damaged / "data")])
    [finding] = [f for f in report.findings if f.kind == "damaged_tail"]
    assert finding.data["offset"] == offset and "set_aside" in finding.message
    with pytest.raises(TailRefusedError):
        FileChannel(**settings(damaged))


def test_the_check_fails_until_the_incident_is_acknowledged_offline(tmp_path: Path) -> None:
    root = crashed(tmp_path)
    offset, damaged = damage_last_commit(root), newest(root)
    with FileChannel(**settings(root, recovery_mode="set_aside")) as channel:
        assert len(channel) == 10
    verdict = recovery_losses_acknowledged(spec_of(root), SETTINGS)
    assert not verdict.passed and verdict.severity == Severity.ERROR
    assert f"offset {offset} of {damaged}" in verdict.description and "acknowledged commits may be" in \
        verdict.description and "channel acknowledge --incident 1" in verdict.description
    assert verdict.metadata["open_incidents"] == 1 and verdict.metadata["incidents"][0]["kind"] == "damaged_tail"

    listed = CliRunner().invoke(main, ["channel", "incidents", *dir_args(root), "--json"])
    assert listed.exit_code == 0 and json.loads(listed.output)["open"] == 1
    refused = CliRunner().invoke(main, ["channel", "acknowledge", *dir_args(root), "--incident", "7", "--note", "x"])
    assert refused.exit_code == 1 and "no open incident 7" in refused.output
    done = CliRunner().invoke(main, ["channel", "acknowledge", *dir_args(root), "--all", "--note", "disk replaced"])
    assert done.exit_code == 0 and "acknowledged 1 incident" in done.output, done.output
    assert recovery_losses_acknowledged(spec_of(root), SETTINGS).passed
    [incident] = load_incidents(str(root / "cp"))
    assert incident.acknowledged_note == "disk replaced" and not incident.open
    with FileChannel(**settings(root)) as channel:
        assert channel.stats()["incidents"]["open"] == 0


def test_an_acknowledgement_while_another_process_owns_the_channel_needs_its_agent(tmp_path: Path) -> None:
    root = crashed(tmp_path)
    tear_last_commit(root)
    with FileChannel(**settings(root)):
        result = CliRunner().invoke(main, ["channel", "acknowledge", *dir_args(root), "--all", "--note", "x"])
    assert result.exit_code == 1 and "owned by process" in result.output and "--conf" in result.output
    assert load_incidents(str(root / "cp"))[0].open  # nothing written behind the owner's back


def test_a_repair_that_drops_events_is_an_incident(tmp_path: Path) -> None:
    root = crashed(tmp_path)
    damage_last_commit(root)
    report = repair_channel(str(root / "cp"), [str(root / "data")], dry_run=False)
    assert report.events_lost == 5
    [incident] = load_incidents(str(root / "cp"))
    assert incident.kind == "repair" and incident.events == 5 and incident.acknowledged_data
    assert not recovery_losses_acknowledged(spec_of(root), SETTINGS).passed


def test_a_damaged_incident_record_fails_the_check_and_is_never_overwritten(tmp_path: Path) -> None:
    root = crashed(tmp_path)
    tear_last_commit(root)
    (root / "cp").mkdir(exist_ok=True)
    (root / "cp" / INCIDENTS_FILE).write_text("{not json")
    verdict = recovery_losses_acknowledged(spec_of(root), SETTINGS)
    assert not verdict.passed and "cannot be read" in verdict.description
    with pytest.raises(Exception, match="incidents.json cannot be read"):
        FileChannel(**settings(root))  # recording the torn write would lose what the file held
    assert (root / "cp" / INCIDENTS_FILE).read_text() == "{not json"
