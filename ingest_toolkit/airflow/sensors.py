"""``ChannelBacklogSensor``: wait, deferred, until a channel has a backlog worth landing.

The sensor reads the channel's settings in the worker, looks once (no deferral when the backlog
is already there), then defers to :class:`~.triggers.ChannelBacklogTrigger`, which polls
``checkpoint.meta`` in the triggerer every ``sensor_interval_seconds`` with the thresholds of the
orchestration settings (``[orchestrate]`` / ``[dagster]``: the Dagster sensor's). Its XCom is the
trigger's event: ``trigger`` (``backlog`` or ``drain``), ``reason``, ``run_key`` (the channel
state it fired on). The triggerer must be able to read the channel's checkpoint directory.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context

from .task import ChannelTask
from .triggers import ChannelBacklogTrigger, backlog_event

__all__ = ["ChannelBacklogSensor"]


class ChannelBacklogSensor(BaseSensorOperator):
    """Succeeds when channel ``channel`` has a committed backlog at or above the thresholds (or,
    with ``drain_after``, any backlog once that long has passed)."""

    template_fields = ("conf_dir",)

    def __init__(self, *, channel: str, conf_dir: str | None = None, drain_after: timedelta | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.channel, self.conf_dir, self.drain_after = channel, conf_dir, drain_after

    def execute(self, context: Context) -> Any:
        job = ChannelTask.load(self.channel, self.conf_dir)
        drain_at = time.time() + self.drain_after.total_seconds() if self.drain_after is not None else None
        event, reason = backlog_event(self.channel, job.spec.checkpoint_dir, job.settings, drain_at)
        if event is not None:
            return self.execute_complete(context, event)
        self.log.info("deferring: %s", reason)
        trigger = ChannelBacklogTrigger(self.channel, job.spec.checkpoint_dir, job.settings.model_dump(),
                                        float(job.settings.sensor_interval_seconds), drain_at)
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        self.log.info(event["reason"])
        return event
