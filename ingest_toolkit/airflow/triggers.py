"""The deferrable sensor's trigger: polls ``checkpoint.meta`` in the triggerer, no worker slot held.

Each poll is one evaluation of the Dagster landing sensor's decision
(:func:`~ingest_toolkit.orchestrate.backlog.evaluate_landing`: committed backlog against
``sensor_min_backlog``, the oldest event's age against ``sensor_max_backlog_age_seconds``), with
the same settings, so both orchestrators land at the same moment. The file read runs in a thread:
the triggerer's event loop serves every other deferred task meanwhile.

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
from ..orchestrate.settings import OrchestrationSettings

__all__ = ["ChannelBacklogTrigger", "backlog_event"]


def backlog_event(channel: str, checkpoint_dir: str, settings: OrchestrationSettings,
                  drain_at: float | None = None) -> tuple[dict[str, Any] | None, str]:
    """One poll: the event to fire (``trigger``: ``backlog`` or ``drain``, ``reason``, ``run_key``),
    or None; and the decision's reason either way."""
    tick = evaluate_landing(channel, checkpoint_dir, settings, None, previous_run=lambda _key: None,
                            landing_in_progress=lambda: None)
    decision = tick.decision
    if decision.run:
        return {"channel": channel, "trigger": "backlog", "reason": decision.reason,
                "run_key": decision.run_key}, decision.reason
    if drain_at is not None and time.time() >= drain_at:
        drain = drain_decision(channel, checkpoint_dir)
        if drain.run:
            reason = drain.warning or f"channel {channel}: drain: {decision.reason}"
            return {"channel": channel, "trigger": "drain", "reason": reason, "run_key": None}, reason
    return None, decision.reason


class ChannelBacklogTrigger(BaseTrigger):
    """Fires once channel ``channel`` has a backlog to land (module docstring). ``settings``: the
    :class:`OrchestrationSettings` values (serialized with the trigger)."""

    def __init__(self, channel: str, checkpoint_dir: str, settings: dict[str, Any], poll_seconds: float,
                 drain_at: float | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.channel, self.checkpoint_dir = channel, checkpoint_dir
        self.settings, self.poll_seconds, self.drain_at = settings, poll_seconds, drain_at

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"channel": self.channel, "checkpoint_dir": self.checkpoint_dir, "settings": self.settings,
                 "poll_seconds": self.poll_seconds, "drain_at": self.drain_at})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settings = OrchestrationSettings(**self.settings)
        while True:
            event, reason = await asyncio.to_thread(backlog_event, self.channel, self.checkpoint_dir, settings,
                                                    self.drain_at)
            if event is not None:
                self.log.info(event["reason"])
                yield TriggerEvent(event)  # type: ignore[no-untyped-call]
                return
            self.log.debug(reason)
            await asyncio.sleep(self.poll_seconds)
