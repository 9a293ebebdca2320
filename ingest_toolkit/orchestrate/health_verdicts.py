"""The verdicts of the three segment checks, judged from one channel health document.

``refcounts_match_recount``, ``referenced_logs_intact`` and ``drained_logs_deleted`` judge the
document of :func:`~ingest_toolkit.channel.tools.health.channel_health`: the local checks compute
it from the channel's directories, the remote ones read the one the agent serves in its status.
Both end here, so a check says the same thing, from the same numbers, wherever they were read;
only ``where`` differs (the metadata saying where the state came from, and the host named in the
text of a damaged segment).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .settings import OrchestrationSettings
from .verdict import TextValue, Verdict, verdict

__all__ = ["Where", "judge_drained", "judge_incidents", "judge_intact", "judge_recount"]


@dataclass(frozen=True, slots=True)
class Where:
    """Where a health document was read: ``metadata`` added to every verdict, and ``host`` (an
    agent's address, or None for this host) for the texts that name a disk."""

    metadata: dict[str, Any]
    host: str | None = None

    def disk(self) -> str:
        return "on disk" if self.host is None else f"on the disk of agent {self.host}"


def judge_recount(settings: OrchestrationSettings, health: dict[str, Any], where: Where) -> Verdict:
    """``refcounts_match_recount``: the reference counts of ``checkpoint.meta`` equal a recount."""
    name = "refcounts_match_recount"
    counts = health["recount"]
    if counts is None:
        return verdict(name, settings, passed=True, description="no checkpoint yet: nothing to recount",
                       metadata=dict(where.metadata))
    mismatches = counts["mismatches"]
    return verdict(
        name, settings, passed=bool(counts["ok"]),
        description=("reference counts match a recount of the queue and open takes" if counts["ok"] else
                     f"{len(mismatches)} log files disagree, queue_size {counts['queue_size_recorded']} vs "
                     f"{counts['queue_size_recounted']} recounted"),
        metadata={**where.metadata, "checkpoint_id": health["checkpoint_id"],
                  "log_files_referenced": counts["log_files_referenced"],
                  "events_recounted": counts["events_recounted"],
                  "queue_size_recorded": counts["queue_size_recorded"],
                  "queue_size_recounted": counts["queue_size_recounted"], "mismatches": mismatches,
                  "read_attempts": health.get("read_attempts", 1)})


def judge_intact(settings: OrchestrationSettings, health: dict[str, Any], where: Where) -> Verdict:
    """``referenced_logs_intact``: every segment the checkpoint needs exists and is long enough."""
    name = "referenced_logs_intact"
    segments = health["segments"]
    if health["checkpoint_id"] is None:
        return verdict(name, settings, passed=True, description="no checkpoint yet: nothing is referenced",
                       metadata=dict(where.metadata))
    damaged: dict[str, str] = segments["damaged"]
    metadata = {**where.metadata, "checkpoint_id": TextValue(health["checkpoint_id"]),
                "segments_needed": segments["needed"], "events_referenced": segments["events_referenced"],
                "damaged": damaged, "events_in_damaged_segments": segments["events_in_damaged_segments"],
                "read_attempts": health.get("read_attempts", 1)}
    if not damaged:
        return verdict(name, settings, passed=True, metadata=metadata, description=(
            f"all {len(segments['needed'])} segments the checkpoint needs are {where.disk()}, whole"))
    events = segments.get("events_in_damaged", {})  # per segment; an agent older than this client sends the total only
    found = "; ".join(
        f"{path.rsplit('/', 1)[-1]} {problem}" + (f" ({events[path]:,} queued or in-flight events point into it)"
                                                  if path in events else "")
        for path, problem in sorted(damaged.items()))
    return verdict(name, settings, passed=False, metadata=metadata, description=(
        f"{found}, {where.disk()}: {segments['events_in_damaged_segments']:,} events are lost unless the files are "
        "restored, and the channel cannot be opened again (recovery refuses it): see the runbook"))


def judge_drained(settings: OrchestrationSettings, health: dict[str, Any], where: Where,
                  backup: tuple[str, int] | None = None) -> Verdict:
    """``drained_logs_deleted``: no segment below the deletion floor survives its checkpoint by
    more than the grace; a failing backup copy that keeps them is named. ``backup``: the backup
    directory and checkpoint id when the document lacks them (an agent older than this client)."""
    name = "drained_logs_deleted"
    drained = health["drained"]
    if drained is None:
        return verdict(name, settings, passed=True, description="no checkpoint yet: deletion has not started",
                       metadata={**where.metadata, "log_files": health.get("log_files", 0)})
    orphaned: list[str] = drained["orphaned"]
    age = float(drained["checkpoint_age_seconds"])
    floor = drained["deletion_floor"]
    checkpoint_id = int(health["checkpoint_id"])
    backup_dir, backup_id = backup or ("", 0)
    backup_dir = drained.get("backup_dir", backup_dir)
    backup_id = int(drained.get("backup_checkpoint_id", backup_id))
    metadata: dict[str, Any] = {
        **where.metadata, "checkpoint_id": checkpoint_id, "deletion_floor": floor, "log_files": health["log_files"],
        "needed": drained["needed"], "orphaned": orphaned,
        "drained_kept_between_needed": drained["drained_kept_between_needed"],
        "checkpoint_age_seconds": round(age, 1), "grace_seconds": settings.drained_log_grace_seconds}
    count = len(orphaned)
    if count and age <= settings.drained_log_grace_seconds:
        return verdict(name, settings, passed=True, metadata=metadata, description=(
            f"{count} segments below the floor, but the checkpoint is only {age:.0f} s old: "
            "deletion may be in progress"))
    if count and backup_dir and backup_id < checkpoint_id:
        metadata["backup_checkpoint_id"] = backup_id
        return verdict(name, settings, passed=False, metadata=metadata, description=(
            f"{count} drained log files below the deletion floor {floor} are kept for the backup copy "
            f"#{backup_id or 'none'} in {backup_dir}, older than checkpoint #{checkpoint_id}: "
            "backup copies are failing (see the agent's log); the disk fills until one succeeds"))
    return verdict(name, settings, passed=not count, metadata=metadata, description=(
        f"{count} drained log files below the deletion floor {floor} were not deleted" if count
        else f"no drained log file below the deletion floor {floor}"))


def judge_incidents(settings: OrchestrationSettings, summary: dict[str, Any] | None, where: Where) -> Verdict:
    """``recovery_losses_acknowledged``: no incident (a range recovery or a repair cut from the
    log, :mod:`ingest_toolkit.channel.incidents`) waits for an operator. ``summary``: what
    ``FileChannel.stats()["incidents"]`` holds, or None when the agent does not report it."""
    name = "recovery_losses_acknowledged"
    if summary is None:
        return verdict(name, settings, passed=True, metadata=dict(where.metadata),
                       description="the agent reports no incidents (a version older than this client)")
    if summary.get("problem"):
        return verdict(name, settings, passed=False, metadata={**where.metadata, "problem": summary["problem"]},
                       description=f"the channel's incident record cannot be read: {summary['problem']}")
    found = summary["incidents"]
    metadata = {**where.metadata, "open_incidents": summary["open"], "events": summary["events"],
                "acknowledged_data": summary["acknowledged_data"],
                "incidents": [{k: i[k] for k in ("id", "kind", "segment", "offset", "events", "transactions",
                                                  "acknowledged_data", "quarantine", "detail")} for i in found]}
    if not found:
        return verdict(name, settings, passed=True, metadata=metadata,
                       description="no open incident: recovery and repairs cut nothing that waits for an operator")
    first = found[0]
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    risk = ("acknowledged commits may be among them" if summary["acknowledged_data"]
            else "none of them was acknowledged to its client")
    return verdict(name, settings, passed=False, metadata=metadata, description=(
        f"{summary['events']} events cut {where.disk()} by {len(found)} open incidents ({risk}): incident "
        f"{first['id']}, {first['kind']} at offset {first['offset']} of {first['segment']}, {first['events']} events"
        f"{more}. Once handled: ingest-toolkit channel acknowledge --incident {first['id']} --note '...'"))
