"""The deferrable sensor's trigger: polls ``checkpoint.meta`` in the triggerer, no worker slot held.

Each poll is one evaluation of the Dagster landing sensor's decision
(:func:`~ingest_toolkit.orchestrate.backlog.evaluate_landing`: committed backlog against
``sensor_min_backlog``, the oldest event's age against ``sensor_max_backlog_age_seconds``), with
the same settings, so both orchestrators land at the same moment. The file read runs in a thread:
the triggerer's event loop serves every other deferred task meanwhile.

Where the triggerer cannot read the channel's directories, the trigger polls the agent's gRPC
status instead (``agent``: the address and the TLS files of the landing configuration or the
``ingest_agent`` connection; ``observe`` of the settings decides, as for the Dagster sensor:
:func:`~ingest_toolkit.orchestrate.remote.state_source`). The bearer token is never serialized
with the trigger: it is read in the triggerer from the connection ``agent_conn_id``, else from
the token variable of the landing configuration. An agent that does not answer is logged (naming
its address) and polled again.

Optionally the trigger drains: ``drain_after_seconds`` after it started it fires for any committed
backlog below the thresholds (:func:`~ingest_toolkit.orchestrate.backlog.drain_decision`), the
floor the Dagster drain schedule gives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..orchestrate.backlog import drain_decision, evaluate_landing
from ..orchestrate.remote import AgentAccess, StateSource, state_source
from ..orchestrate.settings import OrchestrationSettings, remote_channel_spec

__all__ = ["ChannelBacklogTrigger", "backlog_event"]


def backlog_event(channel: str, checkpoint_dir: str, settings: OrchestrationSettings,
                  drain_at: float | None = None, source: StateSource | None = None
                  ) -> tuple[dict[str, Any] | None, str]:
    """One poll: the event to fire (``trigger``: ``backlog`` or ``drain``, ``reason``, ``run_key``,
    ``state_from``), or None; and the decision's reason either way. ``source``: where the state is
    read (default ``checkpoint_dir``)."""
    tick = evaluate_landing(channel, checkpoint_dir, settings, None, previous_run=lambda _key: None,
                            landing_in_progress=lambda: None, source=source)
    where = source.where if source is not None else f"checkpoint directory {checkpoint_dir}"
    decision = tick.decision
    if decision.run:
        return {"channel": channel, "trigger": "backlog", "reason": decision.reason,
                "run_key": decision.run_key, "state_from": where}, decision.reason
    if drain_at is not None and time.time() >= drain_at:
        drain = drain_decision(channel, checkpoint_dir, source)
        if drain.run:
            reason = drain.warning or f"channel {channel}: drain: {decision.reason}"
            return {"channel": channel, "trigger": "drain", "reason": reason, "run_key": None,
                    "state_from": where}, reason
    return None, decision.reason


class ChannelBacklogTrigger(BaseTrigger):
    """Fires once channel ``channel`` has a backlog to land (module docstring). ``settings``: the
    :class:`OrchestrationSettings` values (serialized with the trigger)."""

    def __init__(self, channel: str, checkpoint_dir: str, settings: dict[str, Any], poll_seconds: float,
                 drain_at: float | None = None, agent: dict[str, Any] | None = None,
                 agent_conn_id: str | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.channel, self.checkpoint_dir = channel, checkpoint_dir
        self.settings, self.poll_seconds, self.drain_at = settings, poll_seconds, drain_at
        self.agent, self.agent_conn_id = agent, agent_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"channel": self.channel, "checkpoint_dir": self.checkpoint_dir, "settings": self.settings,
                 "poll_seconds": self.poll_seconds, "drain_at": self.drain_at, "agent": self.agent,
                 "agent_conn_id": self.agent_conn_id})

    def source(self, settings: OrchestrationSettings) -> StateSource:
        """The directories, or the agent's status (its token read here, in the triggerer)."""
        access = None
        if self.agent:
            token = None
            if self.agent_conn_id:
                from .hooks import IngestAgentHook

                token = IngestAgentHook(self.agent_conn_id).token()
            access = AgentAccess(**{**self.agent, "token": token})
        return state_source(remote_channel_spec(self.channel, checkpoint_dir=self.checkpoint_dir), access,
                            settings.observe)

    def poll(self, settings: OrchestrationSettings) -> tuple[dict[str, Any] | None, str]:
        return backlog_event(self.channel, self.checkpoint_dir, settings, self.drain_at, self.source(settings))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settings = OrchestrationSettings(**self.settings)
        while True:
            event, reason = await asyncio.to_thread(self.poll, settings)
            if event is not None:
                self.log.info(event["reason"])
                yield TriggerEvent(event)  # type: ignore[no-untyped-call]
                return
            (self.log.warning if "did not serve the status" in reason else self.log.debug)(reason)
            await asyncio.sleep(self.poll_seconds)
