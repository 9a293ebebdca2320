"""``ChannelBacklogSensor``: wait, deferred or poking, until a channel has a backlog worth landing.

Deferred (``deferrable=True``, the default): the sensor reads the channel's settings in the
worker, looks once (no deferral when the backlog is already there), then defers to
:class:`~.triggers.ChannelBacklogTrigger`, which polls
``checkpoint.meta`` in the triggerer every ``sensor_interval_seconds`` with the thresholds of the
orchestration settings (``[orchestrate]`` / ``[dagster]``: the Dagster sensor's). Its XCom is the
trigger's event: ``trigger`` (``backlog`` or ``drain``), ``reason``, ``run_key`` (the channel
state it fired on), ``state_from``. The triggerer reads the channel's checkpoint directory, or,
where it cannot (or ``observe = "remote"``), polls the status of the agent the landing takes
through: ``[landing] agent`` or the ``ingest_agent`` connection ``agent_conn_id`` (token and TLS
as for the landing; the token is read from the connection in the triggerer, never serialized).

Poking (``deferrable=False``): a deployment without a triggerer (a deferred task would wait there
forever) runs the same poll in the worker, every ``poke_interval`` (default: the settings'
``sensor_interval_seconds``), in ``mode="poke"`` (holding its worker slot) or ``"reschedule"``
(released between pokes). The XCom is the same event; ``drain_after`` counts from the first poke.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from .task import ChannelTask
from .triggers import ChannelBacklogTrigger, backlog_event

__all__ = ["ChannelBacklogSensor"]


class ChannelBacklogSensor(BaseSensorOperator):
    """Succeeds when channel ``channel`` has a committed backlog at or above the thresholds (or,
    with ``drain_after``, any backlog once that long has passed); deferred, or poking with
    ``deferrable=False`` (module docstring)."""

    template_fields = ("conf_dir",)

    def __init__(self, *, channel: str, conf_dir: str | None = None, drain_after: timedelta | None = None,
                 agent_conn_id: str | None = None, deferrable: bool = True, **kwargs: Any) -> None:
        self._interval_given = "poke_interval" in kwargs
        super().__init__(**kwargs)
        self.channel, self.conf_dir, self.drain_after = channel, conf_dir, drain_after
        self.agent_conn_id, self.deferrable = agent_conn_id, deferrable
        self._first_poke: float | None = None

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            if not self._interval_given:
                self.poke_interval = float(ChannelTask.load(self.channel, self.conf_dir, self.agent_conn_id)
                                           .settings.sensor_interval_seconds)
            return super().execute(context)
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

    def poke(self, context: Context) -> PokeReturnValue:
        """One poll in the worker (``deferrable=False``): the trigger's decision, with its settings."""
        job = ChannelTask.load(self.channel, self.conf_dir, self.agent_conn_id)
        event, reason = backlog_event(self.channel, job.spec.checkpoint_dir, job.settings, self._drain_at(context),
                                      job.source())
        self.log.info(reason if event is None else event["reason"])
        return PokeReturnValue(event is not None, event)

    def _drain_at(self, context: Context) -> float | None:
        """When a drain may fire: ``drain_after`` after the first poke of this try (``poke``) or
        of its first reschedule (``reschedule``: every poke is a new run of the task)."""
        if self.drain_after is None:
            return None
        if self._first_poke is None:
            first = context["ti"].get_first_reschedule_date(context) if self.reschedule else None
            self._first_poke = first.timestamp() if first is not None else time.time()
        return self._first_poke + self.drain_after.total_seconds()
