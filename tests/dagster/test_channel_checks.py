"""The checks as Dagster asset checks: every check through the Definitions, its severity, runbook link and
resources (the verdicts themselves: tests/orchestrate)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import dagster as dg

from ingest_toolkit.channel import tools
from ingest_toolkit.channel.checkpoint import CHECKPOINT_META, decode_meta
from ingest_toolkit.dagster.factory import build_definitions
from ingest_toolkit.dagster.naming import channel_key, checks_job_name
from ingest_toolkit.orchestrate.verdict import SEVERITIES

from .helpers import Setup, damage_channel, events_at, fill, make_setup

REPO = Path(__file__).resolve().parents[2]


def _refcounts(setup: Setup) -> dict[int, int]:
    with open(os.path.join(setup.spec.checkpoint_dir, CHECKPOINT_META), "rb") as f:
        return {k: v for k, v in decode_meta(f.read()).log_refcounts.items() if v}


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




def test_a_verdict_becomes_the_check_result_the_ui_showed(tmp_path: Path) -> None:
    """Severity, description and metadata types as before the checks moved out of dagster_defs:
    text stays text (not plotted), paths and links stay paths and links."""
    from ingest_toolkit.dagster.metadata import asset_check_result
    from ingest_toolkit.orchestrate.verdict import PathValue, TextValue, verdict

    settings = make_setup(tmp_path, runbook_url="https://runbook.example/ops.md").settings
    result = asset_check_result(verdict("backlog_below_capacity", settings, passed=False, description="full",
                                        metadata={"id": TextValue(7), "table": PathValue("/t"), "n": 3,
                                                  "m": {"a": 1}}))
    assert result.severity == dg.AssetCheckSeverity.WARN and result.description == "full" and not result.passed
    meta = result.metadata
    assert meta["id"] == dg.MetadataValue.text("7") and meta["table"] == dg.MetadataValue.path("/t")
    assert meta["runbook"] == dg.MetadataValue.url("https://runbook.example/ops.md#backlog_below_capacity")
    assert meta["n"] == dg.MetadataValue.int(3) and meta["m"] == dg.MetadataValue.json({"a": 1})


def test_failed_checks_carry_the_details_the_runbook_names_in_their_metadata(tmp_path: Path) -> None:
    """Issue 31, item 4: on-call reads ``orphaned``, ``mismatches`` and the damaged segments in the
    check's metadata, not only its one-line description."""
    setup = make_setup(tmp_path, drained_log_grace_seconds=0)
    restored = damage_channel(setup.spec, tmp_path / "saved")
    with dg.instance_for_test() as instance:
        checks = _run_checks(setup, instance)
        drained, recount = checks["drained_logs_deleted"], checks["refcounts_match_recount"]
        assert not drained.passed and not recount.passed
        orphaned = drained.metadata["orphaned"].value
        assert sorted(os.path.basename(p) for p in orphaned) == [n for n in restored if not n.endswith(".meta")]
        assert drained.metadata["deletion_floor"].value and drained.metadata["needed"].value
        ((segment, counts),) = recount.metadata["mismatches"].value.items()
        assert segment.startswith("log-") and counts["recorded"] == counts["recounted"] + 7
        gone = _needed_log(setup)
        gone.rename(tmp_path / "elsewhere")
        intact = _run_checks(setup, instance)["referenced_logs_intact"]
    assert not intact.passed
    assert intact.metadata["damaged"].value == {str(gone): "missing"}
    assert intact.metadata["segments_needed"].value and intact.metadata["events_in_damaged_segments"].value > 0
