"""``ChannelBacklogSensor``: wait, deferred, until a channel has a backlog worth landing.

The sensor reads the channel's settings in the worker, looks once (no deferral when the backlog
is already there), then defers to :class:`~.triggers.ChannelBacklogTrigger`, which polls
``checkpoint.meta`` in the triggerer every ``sensor_interval_seconds`` with the thresholds of the
orchestration settings (``[orchestrate]`` / ``[dagster]``: the Dagster sensor's). Its XCom is the
trigger's event: ``trigger`` (``backlog`` or ``drain``), ``reason``, ``run_key`` (the channel
state it fired on), ``state_from``. The triggerer reads the channel's checkpoint directory, or,
where it cannot (or ``observe = "remote"``), polls the status of the agent the landing takes
through: ``[landing] agent`` or the ``ingest_agent`` connection ``agent_conn_id`` (token and TLS
as for the landing; the token is read from the connection in the triggerer, never serialized).
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
                 agent_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.channel, self.conf_dir, self.drain_after = channel, conf_dir, drain_after
        self.agent_conn_id = agent_conn_id

    def execute(self, context: Context) -> Any:
        job = ChannelTask.load(self.channel, self.conf_dir, self.agent_conn_id)
        drain_at = time.time() + self.drain_after.total_seconds() if self.drain_after is not None else None
        event, reason = backlog_event(self.channel, job.spec.checkpoint_dir, job.settings, drain_at, job.source())
        if event is not None:
            return self.execute_complete(context, event)
        self.log.info("deferring: %s", reason)
        access = job.access()
        agent = None if access is None else {
            "address": access.address, "token_env": access.token_env, "tls_ca": access.tls_ca,
            "tls_cert": access.tls_cert, "tls_key": access.tls_key}
        trigger = ChannelBacklogTrigger(self.channel, job.spec.checkpoint_dir, job.settings.model_dump(),
                                        float(job.settings.sensor_interval_seconds), drain_at, agent,
                                        self.agent_conn_id)
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        self.log.info(event["reason"])
        return event
