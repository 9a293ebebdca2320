"""What a check concludes, as plain values any orchestrator can show: :class:`Verdict`.

Every check of :mod:`ingest_toolkit.orchestrate` returns a verdict: passed or not, the severity
docs/runbook.md gives the check (``## <check> (<asset>, ERROR|WARN)``; a test holds the two
together), a one-line description, the numbers it judged on, and a link to the check's runbook
section (``docs/runbook.md#<check>``), so on-call goes from a red check to what it means and what
to do in one click. The link is ``runbook_url`` plus the anchor when that is set (the runbook on
the team's git server or wiki), else the path of the runbook beside this package.

Metadata values are plain (numbers, strings, lists, dicts). Three ``str`` subclasses say how a
value is best shown, for adapters whose UI distinguishes them: :class:`TextValue` (a number that
does not change from run to run: shown, not plotted), :class:`PathValue` and :class:`UrlValue`.
They serialize as the strings they are.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..manual import doc_uri

if TYPE_CHECKING:
    from .settings import OrchestrationSettings

__all__ = ["CHECKS", "SEVERITIES", "CheckInfo", "PathValue", "Severity", "TextValue", "UrlValue", "Verdict",
           "check_description", "runbook_ref", "runbook_value", "verdict"]


class Severity(enum.StrEnum):
    """How bad a failed check is: ERROR (data at risk or the pipeline stopped) or WARN."""

    ERROR = "ERROR"
    WARN = "WARN"


class TextValue(str):
    """A value shown as text (a constant count that a UI should not plot)."""

    __slots__ = ()


class PathValue(str):
    """A file or table location (a local path or a Hadoop URI)."""

    __slots__ = ()


class UrlValue(str):
    """A link a UI can follow."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """One evaluation of a check. ``metadata`` holds the numbers judged on and ``runbook``."""

    check: str
    passed: bool
    severity: Severity
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def runbook(self) -> str:
        """Where the check's runbook section is (a URL or a path with ``#<check>``)."""
        return str(self.metadata.get("runbook", ""))


@dataclass(frozen=True, slots=True)
class CheckInfo:
    """A check as the runbook defines it: what it judges (``channel``, ``landed`` or ``curated``),
    its severity and what it asserts."""

    name: str
    target: str
    severity: Severity
    description: str


def _info(name: str, target: str, severity: Severity, description: str) -> tuple[str, CheckInfo]:
    return name, CheckInfo(name, target, severity, description)


CHECKS: dict[str, CheckInfo] = dict([
    _info("refcounts_match_recount", "channel", Severity.ERROR,
          "log_refcounts in checkpoint.meta equal a recount of that checkpoint's queue and open takes (read without "
          "the lock)."),
    _info("referenced_logs_intact", "channel", Severity.ERROR,
          "Every log segment that queued events, open takes or the write position need is on disk and long enough "
          "(a missing or truncated one loses events and stops restarts)."),
    _info("drained_logs_deleted", "channel", Severity.ERROR,
          "No log segment below the deletion floor outlives its checkpoint by more than the grace."),
    _info("checkpoint_fresh", "channel", Severity.ERROR,
          "checkpoint.meta is younger than checkpoint_stale_factor x checkpoint_interval; fails when the landing "
          "takes through an agent and no process owns the channel."),
    _info("recovery_losses_acknowledged", "channel", Severity.ERROR,
          "Every range recovery or a repair cut from the channel's log (an incident: the segment, the offset, the "
          "events in it) has been acknowledged by an operator ('ingest-toolkit channel acknowledge')."),
    _info("backlog_below_capacity", "channel", Severity.WARN,
          "Queued events stay below backlog_warn_fraction of capacity (warning)."),
    _info("forward_sinks_reachable", "channel", Severity.WARN,
          "Every sink of the sink group that forwards the channel to other agents answered within its group's "
          "unreachable_after (judged from the agent's status; warning)."),
    _info("landed_reconciles", "landed", Severity.ERROR,
          "Events in the landing manifests == rows in the landed table (== takes committed by the channel when the "
          "landing is its only taker); for a Delta or Iceberg table, the channel's rows == its takes, the batch "
          "commits' events == the rows, and the last table version carries the channel's last batch."),
    _info("landed_no_duplicate_event_ids", "landed", Severity.ERROR, "Every event_id occurs once in the landed table."),
    _info("landed_files_per_partition", "landed", Severity.WARN,
          "No partition of the landed table holds more than max_files_per_partition data files (warning: run the "
          "table's maintenance, which compacts them)."),
    _info("landed_fully_replicated", "landed", Severity.WARN,
          "On HDFS, every landed file has the replicas it asks for and asks for at least the cluster's dfs.replication "
          "(a file gets its writer's client setting; warning). A root not on HDFS passes with a note."),
    _info("curated_no_duplicate_event_ids", "curated", Severity.ERROR,
          "Every event_id occurs once in the curated partitions."),
    _info("curated_covers_landed", "curated", Severity.ERROR,
          "No landed hour lies before the first curated partition (it would never be curated); a failure names the "
          "hours, their events and the partitions_start that covers them."),
    _info("curated_schema_drift", "curated", Severity.WARN,
          "The hours built by this run added no column to the curated table (warning: new fields became columns)."),
    _info("curated_rescued_below_threshold", "curated", Severity.ERROR,
          "In each hour built by this run, the rows with rescued data (values that did not fit their column, fields "
          "the contract kept out, bodies that did not parse) are at most rescued_max_share of the rows."),
    _info("curated_rows_discarded", "curated", Severity.WARN,
          "No row of the hours built by this run was dropped by a discard_row contract (warning)."),
])
SEVERITIES: dict[str, Severity] = {name: info.severity for name, info in CHECKS.items()}
def runbook_ref(check: str, settings: OrchestrationSettings) -> str:
    """Where the section of ``check`` is: ``<runbook_url>#<check>``, else the ``file://`` URL of the
    runbook installed with the toolkit (:mod:`ingest_toolkit.manual`; a wheel ships it), never a
    ``docs/`` path relative to a checkout the reader may not have."""
    if settings.runbook_url:
        return f"{settings.runbook_url}#{check}"
    return doc_uri("runbook.md", check) or f"runbook.md#{check} (`ingest-toolkit docs runbook` prints where it is)"


def runbook_value(check: str, settings: OrchestrationSettings) -> UrlValue | TextValue:
    """A link to the check's section (never an empty one); text when no runbook is installed."""
    ref = runbook_ref(check, settings)
    return UrlValue(ref) if "://" in ref else TextValue(ref)


def check_description(check: str, settings: OrchestrationSettings) -> str:
    """What the check asserts and where its runbook section is (the description a UI lists)."""
    return f"{CHECKS[check].description} Runbook: {runbook_ref(check, settings)}"


def verdict(check: str, settings: OrchestrationSettings, *, passed: bool, description: str,
            metadata: dict[str, Any] | None = None) -> Verdict:
    """A verdict of ``check`` with the runbook's severity and the link to its section."""
    return Verdict(check, passed, SEVERITIES[check], description,
                   {**(metadata or {}), "runbook": runbook_value(check, settings)})
