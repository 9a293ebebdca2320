"""``channel inspect`` on a channel that a process owns right now.

``inspect`` reads ``checkpoint.meta``, which the owner rewrites every ``checkpoint_interval``
(30 s by default): on a live channel its queue and counters are that old, and a burst sent since
is not in them. So for an owned channel the command says so first: who owns it (the agent of the
configuration, found as every client command finds it, or just a pid), which checkpoint it is
reading and how old, and which command shows the channel live (``ingest-toolkit status``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .channel.lock import lock_holder
from .channel.tools.reports import InspectReport
from .errors import ConfigError

__all__ = ["LiveView", "live_view"]


@dataclass(frozen=True)
class LiveView:
    """What ``inspect`` says about an owned channel (also its JSON ``live`` object)."""

    pid: int | None
    agent: str | None  # the name of the configuration's agent when it is the owner
    checkpoint_id: int | None
    checkpoint_age_seconds: float | None
    checkpoint_interval_seconds: float | None
    live_command: str  # the command that shows the channel live
    note: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def live_view(report: InspectReport, conf: Path | None) -> LiveView | None:
    """None for a channel no process owns; ``conf``: the agent configuration the channel was
    named in (None: given by its directories)."""
    if not report.locked:
        return None
    pid = lock_holder(report.checkpoint_dir)
    agent = _owning_agent(conf, pid)
    command = f"ingest-toolkit status --conf {conf if agent else '<its agent configuration>'}"
    owner = f"agent {agent!r} (pid {pid})" if agent else f"process {pid}" if pid else "a process"
    cp = report.checkpoint
    if cp is None:
        reading = "it has not written a checkpoint yet, so there are no queue figures below"
        age = interval = None
    else:
        age, interval = round(cp.age_seconds(report.now_ns), 1), cp.checkpoint_interval_s
        reading = (f"the figures below are checkpoint #{cp.checkpoint_id}, written {age:.0f} s ago (every "
                   f"{interval:g} s), not the current state")
    note = f"live channel: {owner} owns it; {reading}. Live figures: {command}"
    return LiveView(pid, agent, cp.checkpoint_id if cp else None, age, interval, command, note)


def _owning_agent(conf: Path | None, pid: int | None) -> str | None:
    """The name of the agent of ``conf`` when that agent is process ``pid`` (it holds the state
    directory's lock), else None."""
    if conf is None or pid is None or not conf.exists():
        return None
    from .collect.config import load_agent_config

    try:
        config = load_agent_config(conf)
    except ConfigError:
        return None  # a [channel] settings file: no agent
    return config.agent.name if lock_holder(str(config.agent.state_dir)) == pid else None
