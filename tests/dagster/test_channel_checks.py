"""The channel checks pass on a healthy channel and fail on a broken one (real files, no mocks)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import dagster as dg

from dagster_defs.checks.channel_checks import (
    check_backlog,
    check_checkpoint_fresh,
    check_drained_logs_deleted,
    check_refcounts,
)
from dagster_defs.factory import build_definitions
from dagster_defs.naming import channel_key
from ingest_toolkit.channel.checkpoint import CHECKPOINT_META, decode_meta, encode_meta

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
