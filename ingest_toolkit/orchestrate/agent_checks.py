"""The channel checks judged from the agent's status API: a channel whose directories this host cannot read.

The agent serves every field of ``checkpoint.meta`` and the segment health the checks judge
(:func:`~ingest_toolkit.channel.tools.health.channel_health`: the reference recount, the drained
segments below the deletion floor, the needed segments missing or cut short), computed on its host
by the same function the local checks call, and the three segment checks are judged by the same
functions as the local ones (:mod:`.health_verdicts`); :mod:`.channel_checks` and
:mod:`.log_presence` call these when their ``source`` is an :class:`~.remote.AgentState`. An
agent that does not answer fails the check with a verdict naming its address and the cause.
"""

from __future__ import annotations

from typing import Any

from .health_verdicts import Where, judge_drained, judge_incidents, judge_intact, judge_recount
from .remote import AgentState, AgentUnreachable, info_from_status
from .settings import ChannelSpec, OrchestrationSettings
from .verdict import Verdict, verdict

__all__ = ["remote_backlog_below_capacity", "remote_checkpoint_fresh", "remote_drained_logs_deleted",
           "remote_recovery_losses_acknowledged", "remote_referenced_logs_intact", "remote_refcounts_match_recount"]


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


def _where(source: AgentState) -> Where:
    return Where(_from(source), host=source.access.address)


def remote_refcounts_match_recount(spec: ChannelSpec, settings: OrchestrationSettings, source: AgentState) -> Verdict:
    found = _health("refcounts_match_recount", spec, settings, source)
    return found if isinstance(found, Verdict) else judge_recount(settings, found[1], _where(source))


def remote_referenced_logs_intact(spec: ChannelSpec, settings: OrchestrationSettings,
                                  source: AgentState) -> Verdict:
    found = _health("referenced_logs_intact", spec, settings, source)
    return found if isinstance(found, Verdict) else judge_intact(settings, found[1], _where(source))


def remote_drained_logs_deleted(spec: ChannelSpec, settings: OrchestrationSettings, source: AgentState) -> Verdict:
    found = _health("drained_logs_deleted", spec, settings, source)
    if isinstance(found, Verdict):
        return found
    status, health = found
    meta = status.get("checkpoint_meta") or {}
    return judge_drained(settings, health, _where(source),
                         backup=(meta.get("backup_dir", ""), int(meta.get("backup_checkpoint_id", 0))))


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


def remote_recovery_losses_acknowledged(spec: ChannelSpec, settings: OrchestrationSettings,
                                        source: AgentState) -> Verdict:
    status = _status("recovery_losses_acknowledged", spec, settings, source)
    if isinstance(status, Verdict):
        return status
    return judge_incidents(settings, (status.get("live") or {}).get("incidents"), _where(source))
