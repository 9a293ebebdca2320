"""Per channel: a sensor that requests landing runs from ``checkpoint.meta``, and a drain schedule.

The sensor reads only ``checkpoint.meta`` (:func:`read_checkpoint_meta`: no lock, no RPC, one
small file), so an evaluation costs a millisecond and never disturbs the channel's owner.

It requests a run when the *committed backlog* (events committed and not taken: ``queue_size``
minus events in open takes) reaches ``sensor_min_backlog``, or when the oldest of them has waited
``sensor_max_backlog_age_seconds``. Never double-launching rests on three things:

* the run key is the channel *state* the decision was made on: the channel's identity (a new
  UUID whenever a channel directory is created), its last sequence number and its
  ``puts_committed`` / ``takes_committed``. The same state never launches two runs, even if the
  cursor were lost, because Dagster skips a run key it has seen; a recreated channel, or
  counters that restarted lower after a replay without a checkpoint, give new keys (sequence
  numbers never go back within one identity, so a repeated key is a repeated state);
* the cursor records the state it last requested a run for; the same state again is skipped
  with that run key in the reason instead of being handed to Dagster to drop silently;
* while a run that materializes the landing asset is queued or running (from the ``land_<c>``
  job, the asset page, a backfill: whatever the job), the sensor skips: that run takes this
  backlog (the concurrency pool would only make another wait, then find little to do).

A landing run that *failed* leaves the state unchanged. The sensor does not forget it: when it
sees the state it requested again, it looks up that run (by its run key) and, if it failed,
requests the state again with the key ``<key>-retry<n>`` and the tag ``ingest/retry-of`` (the
failed run), ``sensor_retry_seconds`` after that run ended (a NameNode in safe mode, an agent
restarting: the cause often clears by itself), at most ``sensor_max_retries`` times. Until then,
after the last retry, or for a canceled run, it skips with a reason that names the run and its
error; new events, a take or the drain schedule start over.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

import dagster as dg

from ingest_toolkit.channel.checkpoint import CheckpointInfo, CheckpointInvalid, read_checkpoint_meta

from .naming import ident, landed_key, landing_sensor_name
from .settings import ChannelSpec, OrchestrationSettings

__all__ = ["ChannelState", "Decision", "SensorCursor", "build_drain_schedule", "build_landing_sensor", "decide",
           "landing_in_progress"]


@dataclass(frozen=True, slots=True)
class ChannelState:
    """What a landing decision is made on; equal states are the same backlog."""

    channel_id: str
    last_seq: int
    puts_committed: int
    takes_committed: int

    @classmethod
    def of(cls, info: CheckpointInfo) -> ChannelState:
        return cls(info.channel_id, info.last_seq, info.puts_committed, info.takes_committed)

    def run_key(self, channel: str) -> str:
        return (f"land-{channel}-{self.channel_id.replace('-', '')}-seq{self.last_seq}-puts{self.puts_committed}"
                f"-takes{self.takes_committed}")


@dataclass(frozen=True, slots=True)
class SensorCursor:
    """The landing sensor's cursor: the last checkpoint seen and the last state a run was requested for."""

    checkpoint_id: int = 0
    channel_id: str | None = None
    requested: ChannelState | None = None
    requested_run_key: str | None = None
    retries: int = 0  # runs requested again for ``requested`` after a failure

    @classmethod
    def parse(cls, text: str | None) -> SensorCursor:
        """Parse a cursor; an unknown or damaged one counts as none (Dagster's run keys still
        prevent a second run of a state already requested)."""
        try:
            doc = json.loads(text) if text else {}
            requested = doc.get("requested")
            return cls(int(doc.get("checkpoint_id", 0)), doc.get("channel_id"),
                       ChannelState(**requested) if requested else None, doc.get("requested_run_key"),
                       int(doc.get("retries", 0)))
        except (ValueError, TypeError, AttributeError):
            return cls()

    def dumps(self) -> str:
        requested = None if self.requested is None else asdict(self.requested)
        return json.dumps({"checkpoint_id": self.checkpoint_id, "channel_id": self.channel_id,
                           "requested": requested, "requested_run_key": self.requested_run_key,
                           "retries": self.retries}, sort_keys=True)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the sensor concluded from one ``checkpoint.meta``."""

    run: bool
    reason: str
    run_key: str | None = None
    state: ChannelState | None = None
    repeat: bool = False  # the state a run was already requested for (see _after_repeat)
    numbers: str = ""
    retry_of: str | None = None  # the failed run this request retries


def decide(channel: str, info: CheckpointInfo | None, settings: OrchestrationSettings,
           now_ns: int | None = None, cursor: SensorCursor | None = None) -> Decision:
    """Pure decision: request a landing run for this checkpoint state, or say why not."""
    if info is None:
        return Decision(False, f"channel {channel}: no checkpoint.meta yet (the channel never checkpointed)")
    cursor = cursor or SensorCursor()
    backlog = info.queue_size - info.inflight_takes
    age = info.backlog_age_seconds(now_ns) if backlog > 0 else 0.0
    numbers = (f"committed backlog {backlog} events (threshold {settings.sensor_min_backlog}), oldest "
               f"{age:.0f} s old (threshold {settings.sensor_max_backlog_age_seconds:.0f} s), "
               f"{info.inflight_takes} in open takes, checkpoint {info.checkpoint_id} "
               f"written {info.age_seconds(now_ns):.0f} s ago")
    if cursor.channel_id not in (None, info.channel_id):
        numbers += f"; new channel identity {info.channel_id} (was {cursor.channel_id}: the channel was recreated)"
    if backlog <= 0 or (backlog < settings.sensor_min_backlog and age < settings.sensor_max_backlog_age_seconds):
        return Decision(False, f"channel {channel}: below thresholds: {numbers}")
    state = ChannelState.of(info)
    if state == cursor.requested:
        return Decision(False, f"channel {channel}: a landing run was already requested for this state (run key "
                               f"{cursor.requested_run_key}); waiting for the channel to change: {numbers}",
                        cursor.requested_run_key, state, repeat=True, numbers=numbers)
    return Decision(True, f"channel {channel}: {numbers}", state.run_key(channel), state, numbers=numbers)


def build_landing_sensor(spec: ChannelSpec, settings: OrchestrationSettings,
                         job: dg.UnresolvedAssetJobDefinition) -> dg.SensorDefinition:
    """The sensor of one channel; ``job`` lands that channel."""

    @dg.sensor(name=landing_sensor_name(spec.name), job=job,
               minimum_interval_seconds=settings.sensor_interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Requests a landing run of channel {spec.name} from its checkpoint.meta "
                           "when the committed backlog or its age crosses a threshold.")
    def landing_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        try:
            info = read_checkpoint_meta(spec.checkpoint_dir)
        except (CheckpointInvalid, OSError) as err:
            return dg.SensorResult(skip_reason=f"channel {spec.name}: checkpoint.meta unreadable: {err}")
        cursor = SensorCursor.parse(context.cursor)
        decision = decide(spec.name, info, settings, cursor=cursor)
        seen = SensorCursor(info.checkpoint_id if info else cursor.checkpoint_id,
                            info.channel_id if info else cursor.channel_id, cursor.requested, cursor.requested_run_key,
                            cursor.retries)
        retry = decision.repeat and _after_repeat(context, spec.name, settings, cursor, decision)
        if retry:
            decision = retry
        busy = decision.run and landing_in_progress(context, job.name, landed_key(spec.name))
        if busy:
            decision = Decision(False, f"{decision.reason}; landing run {busy} of this channel is already queued or "
                                       "running, it takes this backlog")
        if not decision.run:
            return dg.SensorResult(skip_reason=decision.reason, cursor=seen.dumps())
        context.log.info(decision.reason)
        tags = {"ingest/channel": spec.name, "ingest/trigger": "retry" if decision.retry_of else "backlog"}
        if decision.retry_of:
            tags["ingest/retry-of"] = decision.retry_of
        request = dg.RunRequest(run_key=decision.run_key, tags=tags)
        requested = SensorCursor(seen.checkpoint_id, seen.channel_id, decision.state, decision.run_key,
                                 seen.retries + 1 if decision.retry_of else 0)
        return dg.SensorResult(run_requests=[request], cursor=requested.dumps())

    return landing_sensor


RUN_KEY_TAG = "dagster/run_key"  # the tag Dagster gives a sensor's run (dagster._core.storage.tags)


def _after_repeat(context: dg.SensorEvaluationContext, channel: str, settings: OrchestrationSettings,
                  cursor: SensorCursor, decision: Decision) -> Decision | None:
    """For a state already requested: a retry when its run failed (retries left), or a skip that
    says how that run ended; None (keep ``decision``) when the run is unknown, queued or running."""
    run = _run_of(context, cursor.requested_run_key)
    if run is None or run.status not in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED,
                                         dg.DagsterRunStatus.SUCCESS):
        return None
    wait = f"waiting for the channel to change (new events or a take) or the drain schedule: {decision.numbers}"
    if run.status == dg.DagsterRunStatus.SUCCESS:
        return Decision(False, f"channel {channel}: landing run {run.run_id} of this state succeeded; {wait}")
    if run.status == dg.DagsterRunStatus.CANCELED:
        return Decision(False, f"channel {channel}: landing run {run.run_id} was canceled, so it is not retried; "
                               f"{wait}")
    failure = run_failure(context.instance, run.run_id)
    limit = settings.sensor_max_retries
    if cursor.retries >= limit:
        return Decision(False, f"channel {channel}: landing run {run.run_id} failed ({failure}) after {cursor.retries} "
                               f"retries of this state (sensor_max_retries = {limit}); {wait}")
    backoff = _backoff_left(context.instance, run.run_id, settings.sensor_retry_seconds)
    if backoff > 0:
        return Decision(False, f"channel {channel}: landing run {run.run_id} failed ({failure}); retry "
                               f"{cursor.retries + 1} of {limit} in {backoff:.0f} s (sensor_retry_seconds): "
                               f"{decision.numbers}")
    assert decision.state is not None
    key = f"{decision.state.run_key(channel)}-retry{cursor.retries + 1}"
    return Decision(True, f"channel {channel}: landing run {run.run_id} failed ({failure}); retry "
                          f"{cursor.retries + 1} of {limit}: {decision.numbers}", key, decision.state,
                    repeat=True, numbers=decision.numbers, retry_of=run.run_id)


def _backoff_left(instance: dg.DagsterInstance, run_id: str, backoff_seconds: float) -> float:
    """Seconds until a retry of the failed run ``run_id`` is due (0 when it is)."""
    record = instance.get_run_record_by_id(run_id)
    ended = record.end_time if record is not None else None
    return 0.0 if ended is None else max(0.0, ended + backoff_seconds - time.time())


def _run_of(context: dg.SensorEvaluationContext, run_key: str | None) -> dg.DagsterRun | None:
    """The newest run with ``run_key``; None without an instance (a unit test) or such a run."""
    if run_key is None:
        return None
    try:
        instance = context.instance
    except dg.DagsterInvariantViolationError:
        return None
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1)
    return runs[0] if runs else None


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
                         job: dg.UnresolvedAssetJobDefinition) -> dg.ScheduleDefinition:
    """The floor: drain the channel every ``drain_cron`` (in ``settings.timezone``) whatever the
    sensor thresholds say."""

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
