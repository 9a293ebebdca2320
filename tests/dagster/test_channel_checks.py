"""The channel checks pass on a healthy channel and fail on a broken one (real files, no mocks)."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from pathlib import Path

import dagster as dg

from dagster_defs.checks.channel_checks import (
    check_backlog,
    check_checkpoint_fresh,
    check_drained_logs_deleted,
    check_refcounts,
)
from dagster_defs.checks.log_presence import check_referenced_logs
from dagster_defs.checks.runbook import SEVERITIES
from dagster_defs.factory import build_definitions
from dagster_defs.naming import channel_key, checks_job_name
from ingest_toolkit.channel import tools
from ingest_toolkit.channel.checkpoint import CHECKPOINT_META, decode_meta, encode_meta
from ingest_toolkit.channel.tools.common import lock_state

from .helpers import Setup, events_at, fill, make_setup

REPO = Path(__file__).resolve().parents[2]


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
            results = [check_refcounts(setup.spec), check_drained_logs_deleted(setup.spec, setup.settings),
                       check_checkpoint_fresh(setup.spec, setup.settings), check_backlog(setup.spec, setup.settings)]
            tx.rollback()
    finally:
        channel.close()
    assert [r.passed for r in results] == [True, True, True, True], [r.description for r in results]
    refcounts = results[0].metadata
    assert refcounts["events_recounted"].value == 500 and refcounts["queue_size_recorded"].value == 500
    assert refcounts["log_files_referenced"].value >= 2  # 64 KiB segments: the events span several


def test_refcount_check_fails_on_a_wrong_count(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(300, 0, size=200))
    channel.close()
    meta_counts = _refcounts(setup)
    log_id = max(meta_counts)
    _rewrite_meta(setup, log_refcounts={**meta_counts, log_id: meta_counts[log_id] + 7})
    result = check_refcounts(setup.spec)
    assert not result.passed
    mismatch = result.metadata["mismatches"].value[f"log-{log_id}"]  # type: ignore[index]
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
    healthy = check_drained_logs_deleted(setup.spec, setup.settings)
    assert healthy.passed, healthy.description
    present = set(os.listdir(data_dir))
    restored = sorted(n for n in os.listdir(saved) if n.startswith("log-") and n not in present)
    assert restored, "the drain should have deleted at least one segment"
    for name in restored:  # copied back in: what a crash before the deletion would leave
        shutil.copy2(saved / name, os.path.join(data_dir, name))
    time.sleep(0.01)
    broken = check_drained_logs_deleted(setup.spec, setup.settings)
    assert not broken.passed
    assert "not deleted" in (broken.description or "")
    orphaned = broken.metadata["orphaned"].value
    assert orphaned and all(os.path.basename(p) in restored for p in orphaned)  # type: ignore[union-attr]


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
    result = check_drained_logs_deleted(setup.spec, setup.settings)
    assert result.passed and "deletion may be in progress" in (result.description or "")


def test_checkpoint_fresh_fails_on_a_stale_checkpoint_of_a_live_channel(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, checkpoint_interval=30.0, checkpoint_stale_factor=2.0)
    channel = setup.open()
    try:
        fill(channel, events_at(5, 0))
        channel.checkpoint()
        assert check_checkpoint_fresh(setup.spec, setup.settings).passed
        _rewrite_meta(setup, written_unix_ns=time.time_ns() - 600 * 10**9)  # a checkpointer stuck for 10 min
        stale = check_checkpoint_fresh(setup.spec, setup.settings)
    finally:
        channel.close()
    assert not stale.passed
    assert stale.metadata["stale_after_seconds"].value == 60.0
    assert "is 600 s old; stale after 60 s" in (stale.description or "")


def test_checkpoint_of_a_stopped_channel_is_not_stale_unless_configured(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, checkpoint_interval=30.0)
    channel = setup.open()
    channel.close()
    _rewrite_meta(setup, written_unix_ns=time.time_ns() - 600 * 10**9)
    assert check_checkpoint_fresh(setup.spec, setup.settings).passed
    strict = setup.settings.model_copy(update={"checkpoint_stale_when_stopped": True})
    assert not check_checkpoint_fresh(setup.spec, strict).passed


def test_backlog_check_warns_near_capacity(tmp_path: Path) -> None:
    setup = make_setup(tmp_path, capacity=1000, backlog_warn_fraction=0.5)
    channel = setup.open()
    fill(channel, events_at(400, 0))
    channel.checkpoint()
    assert check_backlog(setup.spec, setup.settings).passed
    fill(channel, events_at(200, 0))
    channel.close()
    result = check_backlog(setup.spec, setup.settings)
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert result.description == "600 of 1000 slots in use (60.0%; warn at 50%)"


def test_checkpoint_fresh_fails_when_the_agent_meant_to_serve_the_channel_is_down(tmp_path: Path) -> None:
    """With ``[landing] agent`` set an agent should own the channel: a crashed agent (no process
    holds the lock) fails the check instead of passing as a cleanly stopped channel would."""
    setup = make_setup(tmp_path, checkpoint_interval=30.0)
    channel = setup.open()
    try:
        fill(channel, events_at(5, 0))
        channel.checkpoint()
        live = check_checkpoint_fresh(setup.spec, setup.settings, agent="127.0.0.1:7431")
    finally:
        channel.close()
    assert live.passed, live.description
    down = check_checkpoint_fresh(setup.spec, setup.settings, agent="127.0.0.1:7431")
    assert not down.passed
    assert "no process owns the channel, but the landing takes through an agent (127.0.0.1:7431)" in (
        down.description or "")
    assert down.metadata["owned"].value == "False" and down.metadata["agent"].value == "127.0.0.1:7431"
    assert check_checkpoint_fresh(setup.spec, setup.settings).passed  # in-process landing: a stopped channel is fine


def test_checkpoint_fresh_reads_the_agent_address_from_the_landing_configuration(tmp_path: Path) -> None:
    """The check in the definitions takes the address from [landing] agent (or INGEST_LANDING__AGENT)."""
    setup = make_setup(tmp_path, checkpoint_interval=30.0)
    setup.open().close()
    landing = (setup.conf / "landing.toml").read_text()
    (setup.conf / "landing.toml").write_text(landing.replace("[landing]\n", '[landing]\nagent = "127.0.0.1:7431"\n'))
    fresh = dg.define_asset_job("fresh", selection=dg.AssetSelection.checks(
        dg.AssetCheckKey(channel_key("events"), "checkpoint_fresh")))
    defs = dg.Definitions.merge(build_definitions(setup.settings, [setup.spec]), dg.Definitions(jobs=[fresh]))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("fresh").execute_in_process(instance=instance)
    (evaluation,) = result.get_asset_check_evaluations()
    assert not evaluation.passed
    assert "through an agent (127.0.0.1:7431)" in (evaluation.description or "")


# -- segments the checkpoint needs ---------------------------------------------------------

def _run_checks(setup: Setup, instance: dg.DagsterInstance) -> dict[str, dg.AssetCheckEvaluation]:
    """Every check of the channel and its tables through the Definitions (the ``check_<c>`` job)."""
    defs = build_definitions(setup.settings, [setup.spec])
    result = defs.resolve_job_def(checks_job_name(setup.spec.name)).execute_in_process(
        instance=instance, raise_on_error=False)
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _needed_log(setup: Setup) -> Path:
    """The oldest segment that queued events point into (not the one being written)."""
    counts = _refcounts(setup)
    return Path(setup.spec.data_dirs[0]) / f"log-{min(counts)}"


def test_a_missing_segment_that_queued_events_need_fails_a_check(tmp_path: Path) -> None:
    """All seven checks used to pass while `channel verify` reported missing_log and the channel
    could no longer be opened."""
    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(600, 0, size=200))  # 64 KiB segments: the events span several
    channel.close()
    with dg.instance_for_test() as instance:
        healthy = _run_checks(setup, instance)
        assert all(e.passed for e in healthy.values()), {n: e.description for n, e in healthy.items()}
        gone = _needed_log(setup)
        gone.rename(tmp_path / "elsewhere")  # moved away by hand
        broken = _run_checks(setup, instance)
    verdict = broken["referenced_logs_intact"]
    assert not verdict.passed and verdict.severity == dg.AssetCheckSeverity.ERROR
    assert f"{gone.name} missing (" in (verdict.description or "") and "cannot be opened again" in (
        verdict.description or "")
    assert verdict.metadata["damaged"].value == {str(gone): "missing"}
    verified = tools.verify_channel(setup.spec.checkpoint_dir, list(setup.spec.data_dirs))
    assert "missing_log" in [f.kind for f in verified.findings]  # the offline tool agrees


def test_a_truncated_segment_fails_referenced_logs_intact(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(600, 0, size=200))
    channel.close()
    assert check_referenced_logs(setup.spec).passed
    cut = _needed_log(setup)
    with cut.open("r+b") as f:
        f.truncate(cut.stat().st_size // 2)  # a copy that stopped half-way
    result = check_referenced_logs(setup.spec)
    assert not result.passed
    problem = result.metadata["damaged"].value[str(cut)]  # type: ignore[index]
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
        verdicts = [check_referenced_logs(setup.spec) for _ in range(40)]
    finally:
        stop.set()
        worker.join()
        channel.close()
    assert all(v.passed for v in verdicts), [v.description for v in verdicts if not v.passed]


# -- severity, runbook, reasons ------------------------------------------------------------

def test_every_check_has_the_runbook_severity_and_links_its_section(tmp_path: Path) -> None:
    runbook = (REPO / "docs" / "runbook.md").read_text()
    sections = dict(re.findall(r"^## (\w+) \([^,]+, (ERROR|WARN)\)$", runbook, flags=re.MULTILINE))
    anchors = set(re.findall(r'^<a id="(\w+)"></a>$', runbook, flags=re.MULTILINE))
    setup = make_setup(tmp_path)
    setup.open().close()
    with dg.instance_for_test() as instance:
        evaluations = _run_checks(setup, instance)
    assert set(evaluations) == set(sections) == set(SEVERITIES) == anchors
    for name, evaluation in evaluations.items():
        assert evaluation.severity.value == sections[name], name
        link = evaluation.metadata["runbook"].value
        assert str(link).endswith(f"docs/runbook.md#{name}"), link


def test_landed_reconciles_fails_with_the_reason_when_the_agent_does_not_answer(tmp_path: Path) -> None:
    """It raised (the step failed, no verdict) when the agent was unreachable."""
    setup = make_setup(tmp_path)
    landing = (setup.conf / "landing.toml").read_text()
    (setup.conf / "landing.toml").write_text(landing.replace("[landing]\n", '[landing]\nagent = "127.0.0.1:9"\n'))
    with dg.instance_for_test() as instance:
        evaluations = _run_checks(setup, instance)
    verdict = evaluations["landed_reconciles"]
    assert not verdict.passed
    assert "could not be read from the agent at 127.0.0.1:9" in (verdict.description or ""), verdict.description


def test_a_stopped_channel_names_no_holder(tmp_path: Path) -> None:
    """"owned False" came with "holder pid N", the pid a stopped owner left in the lock file."""
    setup = make_setup(tmp_path, checkpoint_interval=30.0)
    channel = setup.open()
    live = check_checkpoint_fresh(setup.spec, setup.settings)
    channel.close()
    stopped = check_checkpoint_fresh(setup.spec, setup.settings)
    assert live.metadata["owned"].value == "True" and live.metadata["holder"].value == f"pid {os.getpid()}"
    assert stopped.metadata["owned"].value == "False" and stopped.metadata["holder"].value == ""
    assert lock_state(setup.spec.checkpoint_dir) == (False, None)
