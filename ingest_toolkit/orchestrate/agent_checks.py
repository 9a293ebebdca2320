"""The channel checks judged from the agent's status API: a channel whose directories this host cannot read.

The agent serves every field of ``checkpoint.meta`` and the segment health the checks judge
(:func:`~ingest_toolkit.channel.tools.health.channel_health`: the reference recount, the drained
segments below the deletion floor, the needed segments missing or cut short), computed on its host
by the same functions the local checks call. Each function here makes the verdict the local
check makes from the same numbers; :mod:`.channel_checks` and :mod:`.log_presence` call them when
their ``source`` is an :class:`~.remote.AgentState`. An agent that does not answer fails the
check with a verdict naming its address and the cause.
"""

from __future__ import annotations

from typing import Any

from .remote import AgentState, AgentUnreachable, info_from_status
from .settings import ChannelSpec, OrchestrationSettings
from .verdict import TextValue, Verdict, verdict

__all__ = ["judge_drained", "remote_backlog_below_capacity", "remote_checkpoint_fresh", "remote_drained_logs_deleted",
           "remote_referenced_logs_intact", "remote_refcounts_match_recount"]


def _from(source: AgentState) -> dict[str, Any]:
    return {"state_from": source.where, "agent": source.access.address}


def _status(check: str, spec: ChannelSpec, settings: OrchestrationSettings,
            source: AgentState) -> dict[str, Any] | Verdict:
    try:
        return source.status()
    except AgentUnreachable as err:
        return verdict(check, settings, passed=False, metadata={**_from(source), "channel": spec.name},
                       description=str(err))


def _health(check: str, spec: ChannelSpec, settings: OrchestrationSettings,
            source: AgentState) -> tuple[dict[str, Any], dict[str, Any]] | Verdict:
    """The status and its segment health, or the failing verdict when the agent could not compute it."""
    status = _status(check, spec, settings, source)
    if isinstance(status, Verdict):
        return status
    health = status.get("segments")
    if health is None:
        problem = status.get("segments_error", "no segment health in the status (an agent older than this client)")
        return verdict(check, settings, passed=False, metadata={**_from(source), "problem": problem},
                       description=f"agent {source.access.address} could not judge the segments of channel "
                                   f"{spec.name}: {problem}")
    return status, health


def remote_refcounts_match_recount(spec: ChannelSpec, settings: OrchestrationSettings, source: AgentState) -> Verdict:
    name = "refcounts_match_recount"
    found = _health(name, spec, settings, source)
    if isinstance(found, Verdict):
        return found
    _status_doc, health = found
    counts = health.get("recount")
    if counts is None:
        return verdict(name, settings, passed=True, description="no checkpoint yet: nothing to recount",
                       metadata=_from(source))
    mismatches = counts["mismatches"]
    return verdict(
        name, settings, passed=bool(counts["ok"]),
        description=("reference counts match a recount of the queue and open takes" if counts["ok"] else
                     f"{len(mismatches)} log files disagree, queue_size {counts['queue_size_recorded']} vs "
                     f"{counts['queue_size_recounted']} recounted"),
        metadata={**_from(source), "checkpoint_id": health["checkpoint_id"],
                  "log_files_referenced": counts["log_files_referenced"],
                  "events_recounted": counts["events_recounted"],
                  "queue_size_recorded": counts["queue_size_recorded"],
                  "queue_size_recounted": counts["queue_size_recounted"], "mismatches": mismatches,
                  "read_attempts": health.get("read_attempts", 1)})


def remote_referenced_logs_intact(spec: ChannelSpec, settings: OrchestrationSettings,
                                  source: AgentState) -> Verdict:
    name = "referenced_logs_intact"
    found = _health(name, spec, settings, source)
    if isinstance(found, Verdict):
        return found
    _status_doc, health = found
    if health.get("checkpoint_id") is None:
        return verdict(name, settings, passed=True, description="no checkpoint yet: nothing is referenced",
                       metadata=_from(source))
    segments = health["segments"]
    damaged: dict[str, str] = segments["damaged"]
    metadata = {**_from(source), "checkpoint_id": TextValue(health["checkpoint_id"]),
                "segments_needed": segments["needed"], "events_referenced": segments["events_referenced"],
                "damaged": damaged, "events_in_damaged_segments": segments["events_in_damaged_segments"],
                "read_attempts": health.get("read_attempts", 1)}
    if not damaged:
        return verdict(name, settings, passed=True, metadata=metadata, description=(
            f"all {len(segments['needed'])} segments the checkpoint needs are on the agent's disk, whole"))
    found_text = "; ".join(f"{path.rsplit('/', 1)[-1]} {problem}" for path, problem in sorted(damaged.items()))
    return verdict(name, settings, passed=False, metadata=metadata, description=(
        f"{found_text} on agent {source.access.address} ({segments['events_in_damaged_segments']:,} queued or "
        "in-flight events point into them). Those events are lost unless the files are restored, and the channel "
        "cannot be opened again (recovery refuses it): see the runbook"))


def remote_drained_logs_deleted(spec: ChannelSpec, settings: OrchestrationSettings, source: AgentState) -> Verdict:
    name = "drained_logs_deleted"
    found = _health(name, spec, settings, source)
    if isinstance(found, Verdict):
        return found
    status, health = found
    drained = health.get("drained")
    if drained is None:
        return verdict(name, settings, passed=True, description="no checkpoint yet: deletion has not started",
                       metadata={**_from(source), "log_files": health.get("log_files", 0)})
    below: list[str] = drained["orphaned"]
    age = float(drained["checkpoint_age_seconds"])
    floor = drained["deletion_floor"]
    metadata: dict[str, Any] = {
        **_from(source), "checkpoint_id": health["checkpoint_id"], "deletion_floor": floor,
        "log_files": health["log_files"], "needed": drained["needed"], "orphaned": below,
        "drained_kept_between_needed": drained["drained_kept_between_needed"],
        "checkpoint_age_seconds": round(age, 1), "grace_seconds": settings.drained_log_grace_seconds}
    meta = status.get("checkpoint_meta") or {}
    return judge_drained(settings, metadata, orphaned=len(below), age=age, floor=floor,
                         backup_dir=meta.get("backup_dir", ""), backup_id=int(meta.get("backup_checkpoint_id", 0)),
                         checkpoint_id=int(meta.get("checkpoint_id", 0)))


def judge_drained(settings: OrchestrationSettings, metadata: dict[str, Any], *, orphaned: int, age: float, floor: str,
                  backup_dir: str, backup_id: int, checkpoint_id: int) -> Verdict:
    """The verdict of ``drained_logs_deleted`` from its numbers, read locally or from the agent:
    ``orphaned`` segments below the deletion ``floor`` fail the check once the checkpoint is older
    than the grace, naming a failing backup copy when that is what keeps them."""
    name = "drained_logs_deleted"
    if orphaned and age <= settings.drained_log_grace_seconds:
        return verdict(name, settings, passed=True, metadata=metadata, description=(
            f"{orphaned} segments below the floor, but the checkpoint is only {age:.0f} s old: "
            "deletion may be in progress"))
    if orphaned and backup_dir and backup_id < checkpoint_id:
        metadata["backup_checkpoint_id"] = backup_id
        return verdict(name, settings, passed=False, metadata=metadata, description=(
            f"{orphaned} drained log files below the deletion floor {floor} are kept for the backup copy "
            f"#{backup_id or 'none'} in {backup_dir}, older than checkpoint #{checkpoint_id}: "
            "backup copies are failing (see the agent's log); the disk fills until one succeeds"))
    return verdict(name, settings, passed=not orphaned, metadata=metadata, description=(
        f"{orphaned} drained log files below the deletion floor {floor} were not deleted" if orphaned
        else f"no drained log file below the deletion floor {floor}"))


def remote_checkpoint_fresh(spec: ChannelSpec, settings: OrchestrationSettings, source: AgentState) -> Verdict:
    """An agent that answers owns the channel; one that does not answer fails the check (nothing is
    ingested or landed through it)."""
    name = "checkpoint_fresh"
    status = _status(name, spec, settings, source)
    if isinstance(status, Verdict):
        return status
    served = {**_from(source), "owned": "True", "holder": f"agent {source.access.address}"}
    info = info_from_status(status)
    if info is None:
        return verdict(name, settings, passed=False, metadata=served,
                       description="no checkpoint.meta although the agent owns the channel")
    age = float(status["checkpoint"].get("age_seconds", info.age_seconds()))
    interval = info.checkpoint_interval_s
    limit = interval * settings.checkpoint_stale_factor
    metadata: dict[str, Any] = {
        "checkpoint_id": info.checkpoint_id, "age_seconds": round(age, 1), "interval_seconds": interval,
        "stale_after_seconds": limit, **served}
    if interval <= 0:
        return verdict(name, settings, passed=True, metadata=metadata,
                       description="periodic checkpoints are disabled (checkpoint_interval = 0)")
    return verdict(name, settings, passed=age <= limit, metadata=metadata, description=(
        f"checkpoint {info.checkpoint_id} is {age:.0f} s old (agent {source.access.address}); stale after "
        f"{limit:.0f} s ({settings.checkpoint_stale_factor:g} x interval {interval:g} s)"))


def remote_backlog_below_capacity(spec: ChannelSpec, settings: OrchestrationSettings, source: AgentState) -> Verdict:
    name = "backlog_below_capacity"
    status = _status(name, spec, settings, source)
    if isinstance(status, Verdict):
        return status
    info = info_from_status(status)
    if info is None:
        return verdict(name, settings, passed=True, description="no checkpoint yet", metadata=_from(source))
    used = info.queue_size + info.inflight_puts
    capacity = info.capacity or spec.capacity
    fill = used / capacity
    backlog_age = float(status["checkpoint"].get("backlog_age_seconds", 0.0))
    return verdict(
        name, settings, passed=fill < settings.backlog_warn_fraction,
        description=f"{used} of {capacity} slots in use ({fill:.1%}; warn at {settings.backlog_warn_fraction:.0%})",
        metadata={**_from(source), "queued": info.queue_size, "inflight_puts": info.inflight_puts,
                  "capacity": capacity, "fill_fraction": round(fill, 4),
                  "warn_fraction": settings.backlog_warn_fraction, "backlog_age_seconds": round(backlog_age, 1),
                  "checkpoint_id": info.checkpoint_id})
