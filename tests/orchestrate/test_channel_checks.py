"""The channel health verdicts pass on a healthy channel and fail on a broken one (real files, no mocks, no Dagster)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from ingest_toolkit.channel.checkpoint import CHECKPOINT_META, decode_meta, encode_meta
from ingest_toolkit.channel.tools.common import lock_state
from ingest_toolkit.orchestrate.channel_checks import (
    backlog_below_capacity,
    checkpoint_fresh,
    drained_logs_deleted,
    recovery_losses_acknowledged,
    refcounts_match_recount,
)
from ingest_toolkit.orchestrate.forwarding_checks import forward_sinks_reachable
from ingest_toolkit.orchestrate.log_presence import referenced_logs_intact
from ingest_toolkit.orchestrate.verdict import SEVERITIES, Severity

from .helpers import Setup, events_at, fill, make_setup


def _rewrite_meta(setup: Setup, **changes: object) -> None:
    path = os.path.join(setup.spec.checkpoint_dir, CHECKPOINT_META)
    with open(path, "rb") as f:
        meta = decode_meta(f.read())
    for name, value in changes.items():
        if name == "log_refcounts":
            meta.log_refcounts.clear()
            meta.log_refcounts.update(value)  # type: ignore[arg-type]
        else:
            setattr(meta, name, value)
    with open(path, "wb") as f:
        f.write(encode_meta(meta))


def test_healthy_live_channel_passes_every_channel_check(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, checkpoint_interval=30.0)
    channel = setup.open()  # this process owns the channel, as an agent would
    try:
        fill(channel, events_at(600, 0, size=200))
        with channel.transaction() as tx:
            tx.take(100)
        with channel.transaction() as tx:
            tx.take(50)  # an open take at checkpoint time is counted with the queue
            channel.checkpoint()
            results = [check(setup.spec, setup.settings) for check in (refcounts_match_recount, drained_logs_deleted,
                                                                         checkpoint_fresh, backlog_below_capacity)]
            tx.rollback()
    finally:
        channel.close()
    assert [r.passed for r in results] == [True, True, True, True], [r.description for r in results]
    refcounts = results[0].metadata
    assert refcounts["events_recounted"] == 500 and refcounts["queue_size_recorded"] == 500
    assert refcounts["log_files_referenced"] >= 2  # 64 KiB segments: the events span several


def test_refcount_check_fails_on_a_wrong_count(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(300, 0, size=200))
    channel.close()
    meta_counts = _refcounts(setup)
    log_id = max(meta_counts)
    _rewrite_meta(setup, log_refcounts={**meta_counts, log_id: meta_counts[log_id] + 7})
    result = refcounts_match_recount(setup.spec, setup.settings)
    assert not result.passed
    mismatch = result.metadata["mismatches"][f"log-{log_id}"]
    assert mismatch == {"recorded": meta_counts[log_id] + 7, "recounted": meta_counts[log_id]}


def _refcounts(setup: Setup) -> dict[int, int]:
    with open(os.path.join(setup.spec.checkpoint_dir, CHECKPOINT_META), "rb") as f:
        return {k: v for k, v in decode_meta(f.read()).log_refcounts.items() if v}


def test_drained_log_check_fails_on_an_orphaned_segment(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, drained_log_grace_seconds=0)
    channel = setup.open()
    fill(channel, events_at(600, 0, size=200))
    data_dir = setup.spec.data_dirs[0]
    saved = tmp_path / "saved"
    shutil.copytree(data_dir, saved)
    with channel.transaction() as tx:
        tx.take(600)
    channel.checkpoint()  # drained segments are deleted after this checkpoint
    channel.close()
    healthy = drained_logs_deleted(setup.spec, setup.settings)
    assert healthy.passed, healthy.description
    present = set(os.listdir(data_dir))
    restored = sorted(n for n in os.listdir(saved) if n.startswith("log-") and n not in present)
    assert restored, "the drain should have deleted at least one segment"
    for name in restored:  # copied back in: what a crash before the deletion would leave
        shutil.copy2(saved / name, os.path.join(data_dir, name))
    time.sleep(0.01)
    broken = drained_logs_deleted(setup.spec, setup.settings)
    assert not broken.passed
    assert "not deleted" in (broken.description or "")
    orphaned = broken.metadata["orphaned"]
    assert orphaned and all(os.path.basename(p) in restored for p in orphaned)


def test_drained_log_check_names_a_failing_backup_copy_that_keeps_segments(tmp_path: Path) -> None:
    from ingest_toolkit.channel import FileChannel
    from tests.channel.faultfs import FaultyFileSystem

    setup = make_setup(tmp_path, drained_log_grace_seconds=0)
    fs = FaultyFileSystem()
    channel = FileChannel(fs=fs, **{**setup.spec.settings, "backup_checkpoint_dir": str(tmp_path / "backup")})
    fill(channel, events_at(600, 0, size=200))
    channel.checkpoint()  # backed up
    fs.inject("create", path_pattern=r"/backup/", persistent=True)  # every later copy fails
    with channel.transaction() as tx:
        tx.take(600)
    channel.checkpoint()  # the drained segments stay: the backup still needs them
    channel.close()
    result = drained_logs_deleted(setup.spec, setup.settings)
    assert not result.passed
    assert "kept for the backup copy" in (result.description or "") and "failing" in (result.description or "")
    assert result.metadata["backup_checkpoint_id"] < decode_meta(
        (Path(setup.spec.checkpoint_dir) / CHECKPOINT_META).read_bytes()).checkpoint_id


def test_drained_log_check_allows_a_deletion_in_progress_within_the_grace(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, drained_log_grace_seconds=3600)
    channel = setup.open()
    fill(channel, events_at(600, 0, size=200))
    saved = tmp_path / "saved"
    shutil.copytree(setup.spec.data_dirs[0], saved)
    with channel.transaction() as tx:
        tx.take(600)
    channel.checkpoint()
    channel.close()
    for name in os.listdir(saved):
        if not os.path.exists(os.path.join(setup.spec.data_dirs[0], name)):
            shutil.copy2(saved / name, os.path.join(setup.spec.data_dirs[0], name))
    result = drained_logs_deleted(setup.spec, setup.settings)
    assert result.passed and "deletion may be in progress" in (result.description or "")


def test_checkpoint_fresh_fails_on_a_stale_checkpoint_of_a_live_channel(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, checkpoint_interval=30.0, checkpoint_stale_factor=2.0)
    channel = setup.open()
    try:
        fill(channel, events_at(5, 0))
        channel.checkpoint()
        assert checkpoint_fresh(setup.spec, setup.settings).passed
        _rewrite_meta(setup, written_unix_ns=time.time_ns() - 600 * 10**9)  # a checkpointer stuck for 10 min
        stale = checkpoint_fresh(setup.spec, setup.settings)
    finally:
        channel.close()
    assert not stale.passed
    assert stale.metadata["stale_after_seconds"] == 60.0
    assert "is 600 s old; stale after 60 s" in (stale.description or "")


def test_checkpoint_of_a_stopped_channel_is_not_stale_unless_configured(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, checkpoint_interval=30.0)
    channel = setup.open()
    channel.close()
    _rewrite_meta(setup, written_unix_ns=time.time_ns() - 600 * 10**9)
    assert checkpoint_fresh(setup.spec, setup.settings).passed
    strict = setup.settings.model_copy(update={"checkpoint_stale_when_stopped": True})
    assert not checkpoint_fresh(setup.spec, strict).passed


def test_backlog_check_warns_near_capacity(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, capacity=1000, backlog_warn_fraction=0.5)
    channel = setup.open()
    fill(channel, events_at(400, 0))
    channel.checkpoint()
    assert backlog_below_capacity(setup.spec, setup.settings).passed
    fill(channel, events_at(200, 0))
    channel.close()
    result = backlog_below_capacity(setup.spec, setup.settings)
    assert not result.passed and result.severity == Severity.WARN
    assert result.description == "600 of 1000 slots in use (60.0%; warn at 50%)"


def test_checkpoint_fresh_fails_when_the_agent_meant_to_serve_the_channel_is_down(tmp_path: Path) -> None:
    """With ``[landing] agent`` set an agent should own the channel: a crashed agent (no process
    holds the lock) fails the check instead of passing as a cleanly stopped channel would."""
    setup = make_setup(tmp_path, checkpoint_interval=30.0)
    channel = setup.open()
    try:
        fill(channel, events_at(5, 0))
        channel.checkpoint()
        live = checkpoint_fresh(setup.spec, setup.settings, agent="127.0.0.1:7431")
    finally:
        channel.close()
    assert live.passed, live.description
    down = checkpoint_fresh(setup.spec, setup.settings, agent="127.0.0.1:7431")
    assert not down.passed
    assert "no process owns the channel, but the landing takes through an agent (127.0.0.1:7431)" in (
        down.description or "")
    assert down.metadata["owned"] == "False" and down.metadata["agent"] == "127.0.0.1:7431"
    assert checkpoint_fresh(setup.spec, setup.settings).passed  # in-process landing: a stopped channel is fine


def _needed_log(setup: Setup) -> Path:
    """The oldest segment that queued events point into (not the one being written)."""
    return Path(setup.spec.data_dirs[0]) / f"log-{min(_refcounts(setup))}"


def test_a_truncated_segment_fails_referenced_logs_intact(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(600, 0, size=200))
    channel.close()
    assert referenced_logs_intact(setup.spec, setup.settings).passed
    cut = _needed_log(setup)
    with cut.open("r+b") as f:
        f.truncate(cut.stat().st_size // 2)  # a copy that stopped half-way
    result = referenced_logs_intact(setup.spec, setup.settings)
    assert not result.passed
    problem = result.metadata["damaged"][str(cut)]
    assert problem.startswith("truncated: "), problem


def test_referenced_logs_intact_never_fails_a_healthy_live_channel_that_deletes_segments(tmp_path: Path) -> None:
    """The check reads without the lock while the owner checkpoints and deletes drained segments:
    a segment released by a newer checkpoint is judged against that one, not reported."""
    setup = make_setup(tmp_path)
    channel = setup.open()
    stop = threading.Event()

    def churn() -> None:  # puts, takes and checkpoints: segments come and go
        while not stop.wait(0.01):
            fill(channel, events_at(200, 0, size=200), batch=100)
            with channel.transaction() as tx:
                tx.take(200)
            channel.checkpoint()

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        verdicts = [referenced_logs_intact(setup.spec, setup.settings) for _ in range(40)]
    finally:
        stop.set()
        worker.join()
        channel.close()
    assert all(v.passed for v in verdicts), [v.description for v in verdicts if not v.passed]


def test_a_stopped_channel_names_no_holder(tmp_path: Path) -> None:
    """"owned False" came with "holder pid N", the pid a stopped owner left in the lock file."""
    setup = make_setup(tmp_path, checkpoint_interval=30.0)
    channel = setup.open()
    live = checkpoint_fresh(setup.spec, setup.settings)
    channel.close()
    stopped = checkpoint_fresh(setup.spec, setup.settings)
    assert live.metadata["owned"] == "True" and live.metadata["holder"] == f"pid {os.getpid()}"
    assert stopped.metadata["owned"] == "False" and stopped.metadata["holder"] == ""
    assert lock_state(setup.spec.checkpoint_dir) == (False, None)


# -- a channel whose directory does not exist ---------------------------------------------

CHANNEL_CHECKS = (refcounts_match_recount, referenced_logs_intact, drained_logs_deleted, checkpoint_fresh,
                  recovery_losses_acknowledged, backlog_below_capacity, forward_sinks_reachable)


def test_every_channel_check_fails_naming_a_missing_channel_directory(tmp_path: Path) -> None:
    """drained_logs_deleted raised a ToolError (no verdict at all) and the other checks passed
    ("no checkpoint yet") for a channel whose directories were not there."""
    setup = make_setup(tmp_path)  # configured, never opened: no directory exists
    for check in CHANNEL_CHECKS:
        verdict = check(setup.spec, setup.settings)
        assert not verdict.passed, check.__name__
        assert f"{setup.spec.checkpoint_dir} does not exist" in verdict.description, verdict.description
        assert "start the agent that serves the channel" in verdict.description
        assert "[channels.events]" in verdict.description and str(setup.conf / "agent.toml") in verdict.description
        assert verdict.metadata["directory"] == setup.spec.checkpoint_dir
        assert verdict.runbook.endswith(f"docs/runbook.md#{verdict.check}")


def test_a_data_directory_removed_under_a_channel_fails_the_checks(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(50, 0))
    channel.close()
    data_dir = setup.spec.data_dirs[0]
    shutil.rmtree(data_dir)
    for check in CHANNEL_CHECKS:
        verdict = check(setup.spec, setup.settings)
        assert not verdict.passed and f"{data_dir} does not exist" in verdict.description, check.__name__


def test_verdicts_are_plain_values(tmp_path: Path) -> None:
    """What an adapter gets: JSON-serializable metadata, a severity and a runbook link."""
    import json

    setup = make_setup(tmp_path, capacity=1000)
    channel = setup.open()
    fill(channel, events_at(300, 0, size=200))
    channel.close()
    for check in CHANNEL_CHECKS:
        verdict = check(setup.spec, setup.settings)
        assert verdict.passed, (check.__name__, verdict.description)
        assert verdict.severity == SEVERITIES[verdict.check]
        assert verdict.severity == (Severity.WARN if check in (backlog_below_capacity, forward_sinks_reachable)
                                    else Severity.ERROR)
        assert json.loads(json.dumps(verdict.metadata))["runbook"] == verdict.runbook


def test_the_runbook_link_is_the_installed_runbook_wherever_the_code_runs(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without runbook_url the link was docs/runbook.md, relative to a checkout a wheel user does not
    have (the UI showed an empty href): it is the file:// URL of the runbook installed with the toolkit,
    the same from any directory; with runbook_url it is that page's section."""
    from ingest_toolkit.manual import docs_dir
    from ingest_toolkit.orchestrate.verdict import UrlValue, runbook_ref, runbook_value

    setup = make_setup(tmp_path)
    installed = docs_dir()
    assert installed is not None
    expected = f"{(installed / 'runbook.md').as_uri()}#checkpoint_fresh"
    for where in (installed.parent, tmp_path):
        monkeypatch.chdir(where)
        assert runbook_ref("checkpoint_fresh", setup.settings) == expected
        assert isinstance(runbook_value("checkpoint_fresh", setup.settings), UrlValue)
    served = setup.settings.model_copy(update={"runbook_url": "https://wiki.example/runbook"})
    assert runbook_value("checkpoint_fresh", served) == "https://wiki.example/runbook#checkpoint_fresh"


def test_a_check_computes_only_its_part_of_the_channel_health(tmp_path: Path) -> None:
    """Each local check asks ``channel_health`` for its own part (the agent's status computes all):
    the other parts are not computed, and an unknown part is refused by name."""
    from ingest_toolkit.channel.tools.health import channel_health

    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(50, 0, size=100))
    channel.checkpoint()
    dirs = (setup.spec.checkpoint_dir, setup.spec.data_dirs)
    whole = channel_health(*dirs)
    assert whole["recount"]["ok"] and whole["segments"]["events_referenced"] == 50 and whole["drained"] is not None
    recount_only = channel_health(*dirs, parts=frozenset({"recount"}))
    assert recount_only["recount"] == whole["recount"]
    assert recount_only["segments"] is None and recount_only["drained"] is None
    segments_only = channel_health(*dirs, parts=frozenset({"segments"}))
    assert segments_only["segments"] == whole["segments"] and segments_only["recount"] is None
    with pytest.raises(ValueError, match="unknown channel health parts \\['refcount'\\]"):
        channel_health(*dirs, parts=frozenset({"refcount"}))
    channel.close()
