"""Each check's severity and its section of docs/runbook.md, in one place.

Every result a check returns goes through :func:`judged`: it carries the severity the runbook
gives the check (``## <check> (<asset>, ERROR|WARN)``; a test holds the two together) and a
``runbook`` link to the check's section (``docs/runbook.md#<check>``), so on-call goes from a red
check in the UI to what it means and what to do in one click. The link is ``[dagster]
runbook_url`` plus the anchor when that is set (the runbook on the team's git server or wiki),
else the path of the runbook beside this code location.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from ..settings import OrchestrationSettings

__all__ = ["SEVERITIES", "judged", "runbook_link", "runbook_ref"]

ERROR, WARN = dg.AssetCheckSeverity.ERROR, dg.AssetCheckSeverity.WARN
SEVERITIES: dict[str, dg.AssetCheckSeverity] = {
    "refcounts_match_recount": ERROR,
    "referenced_logs_intact": ERROR,
    "drained_logs_deleted": ERROR,
    "checkpoint_fresh": ERROR,
    "backlog_below_capacity": WARN,
    "landed_reconciles": ERROR,
    "landed_no_duplicate_event_ids": ERROR,
    "curated_no_duplicate_event_ids": ERROR,
}
_LOCAL_RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"


def runbook_ref(check: str, settings: OrchestrationSettings) -> str:
    """Where the section of ``check`` is: ``<runbook_url>#<check>``, or the local runbook's path."""
    base = settings.runbook_url or (str(_LOCAL_RUNBOOK) if _LOCAL_RUNBOOK.exists() else "docs/runbook.md")
    return f"{base}#{check}"


def runbook_link(check: str, settings: OrchestrationSettings) -> dg.MetadataValue:
    """A link the UI can follow when the runbook is served (``runbook_url``), else a path to copy."""
    ref = runbook_ref(check, settings)
    return dg.MetadataValue.url(ref) if settings.runbook_url else dg.MetadataValue.path(ref)


def judged(check: str, result: dg.AssetCheckResult, settings: OrchestrationSettings) -> dg.AssetCheckResult:
    """``result`` with the runbook's severity for ``check`` and the link to its section."""
    return dg.AssetCheckResult(passed=result.passed, severity=SEVERITIES[check], description=result.description,
                               metadata={**(result.metadata or {}), "runbook": runbook_link(check, settings)})
