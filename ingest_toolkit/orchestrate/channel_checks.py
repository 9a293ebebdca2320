"""On-call checks of a channel, safe while its agent is running (no lock is taken).

Each function is named like its check and returns a :class:`~.verdict.Verdict` whose metadata
carries the numbers it judged on; docs/runbook.md says what a failure means and what to do. A
channel whose directory does not exist fails every check with a verdict naming the directory and
the fix (:func:`missing_directory`), never an exception.

Reading a live channel without its lock: ``checkpoint.meta`` is replaced atomically and names
the queue and in-flight files of the same checkpoint (with their sizes and CRC32C), so a
recount from those files is compared with the reference counts *of the same checkpoint
position*, never with a later state. The one race is a new checkpoint replacing the meta and
removing the old files between our reads: the load then fails with a missing file, and
:func:`load_live_checkpoint` reads again (the meta then names the new files).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from ..channel.checkpoint import CheckpointInvalid, read_checkpoint_meta
from ..channel.incidents import IncidentsUnreadable, load_incidents, summarize
from ..channel.tools.common import lock_state
from ..channel.tools.health import LiveCheckpoint, channel_health, load_live_checkpoint
from . import agent_checks
from .health_verdicts import Where, judge_drained, judge_incidents, judge_recount
from .remote import AgentState, StateSource
from .settings import ChannelSpec, OrchestrationSettings
from .verdict import Verdict, verdict

__all__ = ["LiveCheckpoint", "backlog_below_capacity", "checkpoint_fresh", "drained_logs_deleted",
           "load_live_checkpoint", "local_health", "missing_directory", "observed", "read_state",
           "recovery_losses_acknowledged", "refcounts_match_recount"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Verdict])


def observed(remote: Callable[[ChannelSpec, OrchestrationSettings, AgentState], Verdict]) -> Callable[[F], F]:
    """A check with a ``source=`` keyword (:func:`~.remote.state_source`): judged by ``remote`` from
    the agent's status when that is an :class:`~.remote.AgentState`, else by the decorated function
    from the directories; the verdict's ``state_from`` says which."""
    def decorate(local: F) -> F:
        @functools.wraps(local)
        def check(spec: ChannelSpec, settings: OrchestrationSettings, *args: Any,
                  source: StateSource | None = None, **kwargs: Any) -> Verdict:
            if isinstance(source, AgentState):
                return remote(spec, settings, source)
            found = local(spec, settings, *args, **kwargs)  # the directories: ``source`` is not passed on
            return dataclasses.replace(found, metadata={
                "state_from": f"checkpoint directory {spec.checkpoint_dir}", **found.metadata})
        return check  # type: ignore[return-value]
    return decorate


def missing_directory(check: str, spec: ChannelSpec, settings: OrchestrationSettings) -> Verdict | None:
    """A failing verdict of ``check`` when a directory of the channel does not exist, else None.

    The channel tools refuse such a channel (they are pointed at it by hand); a check reports it,
    naming the directory and the fix, so a check run never fails without a verdict."""
    for directory in (spec.checkpoint_dir, *spec.data_dirs):
        if os.path.isdir(directory):
            continue
        problem = "is not a directory" if os.path.exists(directory) else "does not exist"
        where = spec.agent_conf or "the agent configuration"
        return verdict(check, settings, passed=False, metadata={"directory": directory, "channel": spec.name},
                       description=(
                           f"channel {spec.name}: {directory} {problem}: start the agent that serves the channel "
                           f"(it creates its directories), or correct checkpoint_dir / data_dirs of "
                           f"[channels.{spec.name}] in {where}"))
    return None


def read_state(check: str, spec: ChannelSpec, settings: OrchestrationSettings, read: Callable[[str], T],
               **metadata: Any) -> T | Verdict:
    """``read(checkpoint_dir)``, or the failing verdict of ``check`` when a directory of the channel
    is missing or its checkpoint is unreadable (``metadata`` added to that verdict)."""
    if missing := missing_directory(check, spec, settings):
        return missing
    try:
        return read(spec.checkpoint_dir)
    except CheckpointInvalid as err:
        return verdict(check, settings, passed=False, description=f"checkpoint unreadable: {err}",
                       metadata={**metadata, "problem": str(err)})


def local_health(check: str, spec: ChannelSpec, settings: OrchestrationSettings, part: str,
                 now_ns: int | None = None) -> dict[str, Any] | Verdict:
    """The channel health document of the channel's directories with only ``part`` computed
    (:func:`~ingest_toolkit.channel.tools.health.channel_health`, what the agent serves), or the
    failing verdict of ``check`` when a directory is missing or the checkpoint is unreadable."""
    return read_state(check, spec, settings, lambda checkpoint_dir: channel_health(
        checkpoint_dir, spec.data_dirs, parts=frozenset({part}), now_ns=now_ns), checkpoint_dir=spec.checkpoint_dir)


def _here(spec: ChannelSpec) -> Where:
    return Where({"checkpoint_dir": spec.checkpoint_dir})


@observed(agent_checks.remote_refcounts_match_recount)
def refcounts_match_recount(spec: ChannelSpec, settings: OrchestrationSettings, *,
                            source: StateSource | None = None) -> Verdict:
    """``log_refcounts`` in checkpoint.meta equal an offline recount of the same checkpoint."""
    health = local_health("refcounts_match_recount", spec, settings, "recount")
    return health if isinstance(health, Verdict) else judge_recount(settings, health, _here(spec))


@observed(agent_checks.remote_drained_logs_deleted)
def drained_logs_deleted(spec: ChannelSpec, settings: OrchestrationSettings, now_ns: int | None = None, *,
                         source: StateSource | None = None) -> Verdict:
    """No segment below the deletion floor survives its checkpoint by more than the grace.

    The floor is the channel's own rule
    (:func:`~ingest_toolkit.channel.tools.refcounts.deletion_floor`): ``min(checkpoint log id,
    every segment a queued, in-flight or spilled event points into)``. A drained segment
    *between* needed ones is kept by design (a full replay of what remains must stay exact) and
    only reported.
    """
    health = local_health("drained_logs_deleted", spec, settings, "drained", now_ns)
    return health if isinstance(health, Verdict) else judge_drained(settings, health, _here(spec))


@observed(agent_checks.remote_checkpoint_fresh)
def checkpoint_fresh(spec: ChannelSpec, settings: OrchestrationSettings, now_ns: int | None = None,
                     agent: str | None = None, *, source: StateSource | None = None) -> Verdict:
    """The checkpoint is younger than ``checkpoint_stale_factor`` checkpoint intervals.

    ``agent``: the address the landing takes through (``[landing] agent``). When set, an agent
    is meant to own the channel, so a channel that no process owns fails: the agent is down
    (crashed, or stopped and not restarted) and nothing is ingested. Without it, a channel no
    process owns passes with a note (its last checkpoint is the one written at close), unless
    ``checkpoint_stale_when_stopped``.
    """
    name = "checkpoint_fresh"
    info = read_state(name, spec, settings, read_checkpoint_meta)
    if isinstance(info, Verdict):
        return info
    owned, holder = lock_state(spec.checkpoint_dir)
    served = {"owned": str(owned), "holder": holder or "", "agent": agent or ""}
    if owned is False and agent:
        return verdict(name, settings, passed=False, metadata=served, description=(
            f"no process owns the channel, but the landing takes through an agent ({agent}): the agent that "
            "serves this channel is not running (crashed or stopped); nothing is ingested or landed until it is "
            "restarted"))
    if info is None:
        return verdict(name, settings, passed=not owned, metadata=served, description="no checkpoint.meta" + (
            " although a process owns the channel" if owned else " (channel never opened)"))
    age = info.age_seconds(now_ns)
    interval = info.checkpoint_interval_s
    limit = interval * settings.checkpoint_stale_factor
    metadata: dict[str, Any] = {
        "checkpoint_id": info.checkpoint_id, "age_seconds": round(age, 1), "interval_seconds": interval,
        "stale_after_seconds": limit, **served}
    if owned is False and not settings.checkpoint_stale_when_stopped:
        return verdict(name, settings, passed=True, metadata=metadata, description=(
            f"no process owns the channel: its checkpoint ({age:.0f} s old) is the one written at close"))
    if interval <= 0:
        return verdict(name, settings, passed=True, metadata=metadata,
                       description="periodic checkpoints are disabled (checkpoint_interval = 0)")
    return verdict(name, settings, passed=age <= limit, metadata=metadata, description=(
        f"checkpoint {info.checkpoint_id} is {age:.0f} s old; stale after {limit:.0f} s "
        f"({settings.checkpoint_stale_factor:g} x interval {interval:g} s)"))


@observed(agent_checks.remote_backlog_below_capacity)
def backlog_below_capacity(spec: ChannelSpec, settings: OrchestrationSettings, *,
                           source: StateSource | None = None) -> Verdict:
    """Queued events (in-flight takes and spilled puts included) stay below a fraction of capacity."""
    name = "backlog_below_capacity"
    info = read_state(name, spec, settings, read_checkpoint_meta)
    if isinstance(info, Verdict):
        return info
    if info is None:
        return verdict(name, settings, passed=True, description="no checkpoint yet")
    used = info.queue_size + info.inflight_puts
    capacity = info.capacity or spec.capacity
    fill = used / capacity
    return verdict(
        name, settings, passed=fill < settings.backlog_warn_fraction,
        description=f"{used} of {capacity} slots in use ({fill:.1%}; warn at {settings.backlog_warn_fraction:.0%})",
        metadata={"queued": info.queue_size, "inflight_puts": info.inflight_puts, "capacity": capacity,
                  "fill_fraction": round(fill, 4), "warn_fraction": settings.backlog_warn_fraction,
                  "backlog_age_seconds": round(info.backlog_age_seconds(), 1),
                  "checkpoint_id": info.checkpoint_id})


@observed(agent_checks.remote_recovery_losses_acknowledged)
def recovery_losses_acknowledged(spec: ChannelSpec, settings: OrchestrationSettings, *,
                                 source: StateSource | None = None) -> Verdict:
    """No range recovery or a repair cut from the log waits for an operator's acknowledgement
    (``incidents.json`` in the checkpoint directory, read without a lock)."""
    name = "recovery_losses_acknowledged"
    if missing := missing_directory(name, spec, settings):
        return missing
    try:
        summary = summarize(load_incidents(spec.checkpoint_dir))
    except IncidentsUnreadable as err:
        summary = {"problem": str(err)}
    return judge_incidents(settings, summary, _here(spec))
