"""``forward_sinks_reachable`` (WARN): the sinks that forward a channel to other agents answer.

A channel that a sink group empties (an edge's, or a regional aggregator's in a chain of tiers)
is forwarded only while its sinks answer. The group keeps, per sink, how long its puts have gone
unanswered; the agent serves it in the channel's gRPC status (``forwarding``), and this check
fails when a sink has been unreachable for longer than its group's ``unreachable_after`` (default
120 s): an aggregator down, or listening somewhere else (one restarted on another port: forward
targets need a fixed address). The edge keeps buffering meanwhile (its channel holds the backlog
up to its capacity, and a failover group forwards through the other sinks), hence a warning.

Only the agent knows its sinks: a channel whose state is read from its directories
(:class:`~.remote.LocalState`) passes with a note saying so (once its directories exist, as every
channel check demands); a channel no sink group empties passes (nothing to reach). An agent that
does not answer fails the check naming its address, as every remote check does.
"""

from __future__ import annotations

from typing import Any

from .channel_checks import missing_directory, observed
from .remote import AgentState, AgentUnreachable, StateSource
from .settings import ChannelSpec, OrchestrationSettings
from .verdict import Verdict, verdict

__all__ = ["forward_sinks_reachable", "remote_forward_sinks_reachable"]

NAME = "forward_sinks_reachable"


def remote_forward_sinks_reachable(spec: ChannelSpec, settings: OrchestrationSettings, source: AgentState) -> Verdict:
    """Judged from the agent's status: every sink of the group that forwards the channel answered
    within ``unreachable_after``."""
    where = {"state_from": source.where, "agent": source.access.address}
    try:
        status = source.status()
    except AgentUnreachable as err:
        return verdict(NAME, settings, passed=False, metadata={**where, "channel": spec.name}, description=str(err))
    forwarding = status.get("forwarding")
    if not forwarding:
        return verdict(NAME, settings, passed=True, metadata=where, description=(
            f"no sink group of agent {source.access.address} forwards channel {spec.name}: nothing to reach"))
    return _judge(spec, settings, forwarding, where)


def _judge(spec: ChannelSpec, settings: OrchestrationSettings, forwarding: dict[str, Any],
           where: dict[str, Any]) -> Verdict:
    limit, sinks = float(forwarding["unreachable_after"]), forwarding["sinks"]
    late = {name: sinks[name] for name in forwarding["unreachable"]}  # judged by the agent, at its clock
    metadata = {**where, "group": forwarding["group"], "unreachable_after_seconds": limit,
                "unreachable": sorted(late), "waiting_in_doubt": forwarding.get("waiting_in_doubt", 0),
                "sinks": {name: {"address": sink["address"], "unreachable_seconds": sink["unreachable_seconds"]}
                          for name, sink in sinks.items()}}
    if not late:
        return verdict(NAME, settings, passed=True, metadata=metadata, description=(
            f"sink group {forwarding['group']} forwards channel {spec.name} through {len(sinks)} sink(s), each "
            f"answering (unreachable after {limit:g} s)"))
    named = "; ".join(f"sink {name} ({sink['address']}) unanswered for {float(sink['unreachable_seconds']):.0f} s: "
                      f"{sink['last_error'] or 'no answer'}" for name, sink in sorted(late.items()))
    return verdict(NAME, settings, passed=False, metadata=metadata, description=(
        f"channel {spec.name} of agent {where['agent']}: {named} (more than unreachable_after {limit:g} s); the "
        "edge buffers meanwhile: start that agent, or point the sink at the address it listens on (a fixed "
        "port, never 0)"))


@observed(remote_forward_sinks_reachable)
def forward_sinks_reachable(spec: ChannelSpec, settings: OrchestrationSettings, *,
                            source: StateSource | None = None) -> Verdict:
    """The check (module doc); from the directories only the note that the agent must be asked."""
    missing = missing_directory(NAME, spec, settings)
    if missing is not None:
        return missing
    return verdict(NAME, settings, passed=True, metadata={"channel": spec.name}, description=(
        f"channel {spec.name}: its state is read from its directories here, and only its agent knows its sinks: "
        "give the check an agent to ask (the component's agent, [landing] agent or an agent connection) to "
        "judge them"))
