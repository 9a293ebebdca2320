"""Per channel: a sensor that requests landing runs from ``checkpoint.meta``, and a drain schedule.

The sensor reads only ``checkpoint.meta`` (:func:`read_checkpoint_meta`: no lock, no RPC, one
small file), so an evaluation costs a millisecond and never disturbs the channel's owner.

It requests a run when the *committed backlog* (events committed and not taken: ``queue_size``
minus events in open takes) reaches ``sensor_min_backlog``, or when the oldest of them has waited
``sensor_max_backlog_age_seconds``. Never double-launching rests on two things:

* the run key is the channel state the decision was made on (``puts_committed`` and
  ``takes_committed``): the same backlog can never launch a second run, even if the cursor were
  lost, because Dagster skips a run key it has seen;
* while a landing run of the channel is queued or running, the sensor skips: the backlog that
  run is about to take is not a reason for another one (the concurrency pool would only make
  it wait, then find little to do).

A failed landing leaves the state unchanged, so the sensor does not retry it on its own; new
puts (a new state) or the drain schedule do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import dagster as dg

from ingest_toolkit.channel.checkpoint import CheckpointInfo, CheckpointInvalid, read_checkpoint_meta

from .naming import ident
from .settings import ChannelSpec, OrchestrationSettings

__all__ = ["Decision", "build_drain_schedule", "build_landing_sensor", "decide"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What the sensor concluded from one ``checkpoint.meta``."""

    run: bool
    reason: str
    run_key: str | None = None


def decide(channel: str, info: CheckpointInfo | None, settings: OrchestrationSettings,
           now_ns: int | None = None) -> Decision:
    """Pure decision: request a landing run for this checkpoint state, or say why not."""
    if info is None:
        return Decision(False, f"channel {channel}: no checkpoint.meta yet (the channel never checkpointed)")
    backlog = info.queue_size - info.inflight_takes
    age = info.backlog_age_seconds(now_ns) if backlog > 0 else 0.0
    numbers = (f"committed backlog {backlog} events (threshold {settings.sensor_min_backlog}), oldest "
               f"{age:.0f} s old (threshold {settings.sensor_max_backlog_age_seconds:.0f} s), "
               f"{info.inflight_takes} in open takes, checkpoint {info.checkpoint_id} "
               f"written {info.age_seconds(now_ns):.0f} s ago")
    if backlog <= 0 or (backlog < settings.sensor_min_backlog and age < settings.sensor_max_backlog_age_seconds):
        return Decision(False, f"channel {channel}: below thresholds: {numbers}")
    run_key = f"land-{channel}-puts{info.puts_committed}-takes{info.takes_committed}"
    return Decision(True, f"channel {channel}: {numbers}", run_key)


def _cursor(checkpoint_id: int, run_key: str | None, previous: str | None) -> str:
    last_key = run_key or (json.loads(previous).get("last_run_key") if previous else None)
    return json.dumps({"checkpoint_id": checkpoint_id, "last_run_key": last_key})


def build_landing_sensor(spec: ChannelSpec, settings: OrchestrationSettings,
                         job: dg.UnresolvedAssetJobDefinition) -> dg.SensorDefinition:
    """The sensor of one channel; ``job`` lands that channel."""

    @dg.sensor(name=f"landing_sensor_{ident(spec.name)}", job=job,
               minimum_interval_seconds=settings.sensor_interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Requests a landing run of channel {spec.name} from its checkpoint.meta "
                           "when the committed backlog or its age crosses a threshold.")
    def landing_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        try:
            info = read_checkpoint_meta(spec.checkpoint_dir)
        except (CheckpointInvalid, OSError) as err:
            return dg.SensorResult(skip_reason=f"channel {spec.name}: checkpoint.meta unreadable: {err}")
        checkpoint_id = info.checkpoint_id if info else 0
        decision = decide(spec.name, info, settings)
        if decision.run and _landing_in_progress(context, job.name):
            decision = Decision(False, f"{decision.reason}; a landing run of this channel is already queued or "
                                       "running, it takes this backlog")
        if not decision.run:
            return dg.SensorResult(skip_reason=decision.reason, cursor=_cursor(checkpoint_id, None, context.cursor))
        context.log.info(decision.reason)
        request = dg.RunRequest(run_key=decision.run_key, tags={"ingest/channel": spec.name,
                                                                 "ingest/trigger": "backlog"})
        return dg.SensorResult(run_requests=[request], cursor=_cursor(checkpoint_id, decision.run_key, context.cursor))

    return landing_sensor


_ACTIVE = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING,
           dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def _landing_in_progress(context: dg.SensorEvaluationContext, job_name: str) -> bool:
    try:
        instance = context.instance
    except dg.DagsterInvariantViolationError:  # evaluated without an instance (a unit test)
        return False
    return bool(instance.get_runs(filters=dg.RunsFilter(job_name=job_name, statuses=_ACTIVE), limit=1))


def build_drain_schedule(spec: ChannelSpec, settings: OrchestrationSettings,
                         job: dg.UnresolvedAssetJobDefinition) -> dg.ScheduleDefinition:
    """The floor: drain the channel every ``drain_cron`` whatever the sensor thresholds say."""

    @dg.schedule(name=f"drain_schedule_{ident(spec.name)}", job=job, cron_schedule=settings.drain_cron,
                 execution_timezone=settings.timezone, default_status=dg.DefaultScheduleStatus.RUNNING,
                 description=f"Drains channel {spec.name} periodically (a floor under the sensor).")
    def drain_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        try:
            info = read_checkpoint_meta(spec.checkpoint_dir)
        except (CheckpointInvalid, OSError) as err:
            info = None
            context.log.warning(f"checkpoint.meta unreadable ({err}); draining anyway")
        if info is not None and info.queue_size - info.inflight_takes <= 0:
            return dg.SkipReason(f"channel {spec.name}: nothing to drain (committed backlog 0 at checkpoint "
                                 f"{info.checkpoint_id})")
        scheduled = context.scheduled_execution_time
        key = f"drain-{spec.name}-{scheduled.isoformat() if scheduled else 'manual'}"
        return dg.RunRequest(run_key=key, tags={"ingest/channel": spec.name, "ingest/trigger": "schedule"})

    return drain_schedule
