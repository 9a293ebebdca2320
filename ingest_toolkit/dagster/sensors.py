"""Per channel: the landing sensor and the drain schedule, adapting :mod:`ingest_toolkit.orchestrate.backlog`.

The decision (thresholds, run key of the channel state, cursor, retries of a failed run, the
drain's skip) is :func:`~ingest_toolkit.orchestrate.backlog.evaluate_landing`; this module gives
it what only the Dagster instance knows (the run launched for a run key and how it ended, a
landing run in progress: from the ``land_<c>`` job, the asset page, a backfill, whatever the
job) and turns its result into a ``SensorResult`` / ``RunRequest``.
"""

from __future__ import annotations

import dagster as dg

from ingest_toolkit.orchestrate.backlog import PreviousRun, RunOutcome, drain_decision, evaluate_landing
from ingest_toolkit.orchestrate.remote import AgentAccess, state_source
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings

from .naming import ident, landed_key, landing_sensor_name

__all__ = ["build_drain_schedule", "build_landing_sensor", "landing_in_progress", "previous_run", "run_failure"]


def build_landing_sensor(spec: ChannelSpec, settings: OrchestrationSettings,
                         job: dg.UnresolvedAssetJobDefinition,
                         access: AgentAccess | None = None) -> dg.SensorDefinition:
    """The sensor of one channel; ``job`` lands that channel. ``access``: the agent the landing
    takes through, whose status is read where the checkpoint directory cannot be
    (:func:`~ingest_toolkit.orchestrate.remote.state_source`)."""

    @dg.sensor(name=landing_sensor_name(spec.node), job=job,
               minimum_interval_seconds=settings.sensor_interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Requests a landing run of channel {spec.name} from its checkpoint.meta "
                           "when the committed backlog or its age crosses a threshold.")
    def landing_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        tick = evaluate_landing(spec.node, spec.checkpoint_dir, settings, context.cursor,
                                previous_run=lambda key: previous_run(context, key),
                                landing_in_progress=lambda: landing_in_progress(context, job.name,
                                                                                landed_key(spec.node)),
                                source=state_source(spec, access, settings.observe))
        decision = tick.decision
        if not decision.run:
            return dg.SensorResult(skip_reason=decision.reason, cursor=tick.cursor)
        context.log.info(decision.reason)
        return dg.SensorResult(run_requests=[dg.RunRequest(run_key=decision.run_key, tags=tick.tags)],
                               cursor=tick.cursor)

    return landing_sensor


RUN_KEY_TAG = "dagster/run_key"  # the tag Dagster gives a sensor's run (dagster._core.storage.tags)
_OUTCOMES = {dg.DagsterRunStatus.SUCCESS: RunOutcome.SUCCESS, dg.DagsterRunStatus.FAILURE: RunOutcome.FAILURE,
             dg.DagsterRunStatus.CANCELED: RunOutcome.CANCELED}


def previous_run(context: dg.SensorEvaluationContext, run_key: str) -> PreviousRun | None:
    """The newest run with ``run_key`` and how it stands; None without an instance (a unit test)
    or such a run."""
    try:
        instance = context.instance
    except dg.DagsterInvariantViolationError:
        return None
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1)
    if not runs:
        return None
    run = runs[0]
    outcome = _OUTCOMES.get(run.status, RunOutcome.ACTIVE)
    if outcome != RunOutcome.FAILURE:
        return PreviousRun(run.run_id, outcome)
    record = instance.get_run_record_by_id(run.run_id)
    ended = record.end_time if record is not None else None
    return PreviousRun(run.run_id, outcome, run_failure(instance, run.run_id), ended)


def run_failure(instance: dg.DagsterInstance, run_id: str, limit: int = 300) -> str:
    """One line: the innermost error of the run's first failed step, else its failure message."""
    for kind in (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE):
        records = instance.get_records_for_run(run_id, of_type=kind, limit=1).records
        event = records[0].event_log_entry.dagster_event if records else None
        if event is None:
            continue
        error = getattr(event.event_specific_data, "error", None)
        while error is not None and error.cause is not None:
            error = error.cause
        text = (error.message if error is not None else event.message) or ""
        line = " ".join(text.strip().splitlines()[:1])
        return line if len(line) <= limit else line[:limit - 3] + "..."
    return "no failure event recorded"


_ACTIVE = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING,
           dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def landing_in_progress(context: dg.SensorEvaluationContext, job_name: str, key: dg.AssetKey) -> str | None:
    """The id of a queued or running run that materializes ``key`` (any job), else None."""
    try:
        instance = context.instance
    except dg.DagsterInvariantViolationError:  # evaluated without an instance (a unit test)
        return None
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=_ACTIVE), limit=200):
        if run.job_name == job_name or (run.asset_selection is not None and key in run.asset_selection):
            return run.run_id
        if run.asset_selection is None and _plans(instance, run.run_id, key):  # a whole asset job
            return run.run_id
    return None


def _plans(instance: dg.DagsterInstance, run_id: str, key: dg.AssetKey) -> bool:
    """Whether the run planned to materialize ``key`` (Dagster logs the plan when the run is created)."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED).records
    return any(r.event_log_entry.dagster_event is not None and r.event_log_entry.dagster_event.asset_key == key
               for r in records)


def build_drain_schedule(spec: ChannelSpec, settings: OrchestrationSettings,
                         job: dg.UnresolvedAssetJobDefinition, access: AgentAccess | None = None
                         ) -> dg.ScheduleDefinition:
    """The floor: drain the channel every ``drain_cron`` (in ``settings.timezone``) whatever the
    sensor thresholds say."""

    @dg.schedule(name=f"drain_schedule_{ident(spec.node)}", job=job, cron_schedule=settings.drain_cron,
                 execution_timezone=settings.timezone, default_status=dg.DefaultScheduleStatus.RUNNING,
                 description=f"Drains channel {spec.name} periodically (a floor under the sensor).")
    def drain_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        drain = drain_decision(spec.node, spec.checkpoint_dir, state_source(spec, access, settings.observe))
        if drain.warning:
            context.log.warning(drain.warning)
        if not drain.run:
            return dg.SkipReason(drain.reason)
        scheduled = context.scheduled_execution_time
        key = f"drain-{spec.node}-{scheduled.isoformat() if scheduled else 'manual'}"
        return dg.RunRequest(run_key=key, tags={"ingest/channel": spec.node, "ingest/trigger": "schedule"})

    return drain_schedule
