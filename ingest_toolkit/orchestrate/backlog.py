"""When to land a channel: the landing sensor's decision from ``checkpoint.meta``, and the drain's.

The decision reads only ``checkpoint.meta`` (``read_checkpoint_meta``: no lock, no RPC, one
small file), so an evaluation costs a millisecond and never disturbs the channel's owner. Where
the channel's directories cannot be read, the same fields come from the agent's status API
(:mod:`.remote`: one gRPC call per evaluation).

It requests a run when the *committed backlog* (events committed and not taken: ``queue_size``
minus events in open takes) reaches ``sensor_min_backlog``, or when the oldest of them has waited
``sensor_max_backlog_age_seconds``. Never double-launching rests on three things:

* the run key is the channel *state* the decision was made on: the channel's identity (a new
  UUID whenever a channel directory is created), its last sequence number and its
  ``puts_committed`` / ``takes_committed``. The same state never launches two runs, even if the
  cursor were lost, because the orchestrator skips a run key it has seen; a recreated channel, or
  counters that restarted lower after a replay without a checkpoint, give new keys (sequence
  numbers never go back within one identity, so a repeated key is a repeated state);
* the cursor records the state it last requested a run for; the same state again is skipped
  with that run key in the reason instead of being handed to the orchestrator to drop silently;
* while a landing run of the channel is queued or running, the sensor skips: that run takes
  this backlog (the concurrency pool would only make another wait, then find little to do).

A landing run that *failed* leaves the state unchanged. The sensor does not forget it: when it
sees the state it requested again, it looks up that run (by its run key) and, if it failed,
requests the state again with the key ``<key>-retry<n>`` and the tag ``ingest/retry-of`` (the
failed run), ``sensor_retry_seconds`` after that run ended (a NameNode in safe mode, an agent
restarting: the cause often clears by itself), at most ``sensor_max_retries`` times. Until then,
after the last retry, or for a canceled run, it skips with a reason that names the run and its
error; new events, a take or the drain schedule start over.

:func:`evaluate_landing` is the whole evaluation; the orchestrator supplies what only it knows
(the previous run of a run key, a landing run in progress) as two callables.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from ..channel.checkpoint import CheckpointInfo, CheckpointInvalid
from .remote import AgentUnreachable, LocalState, StateSource
from .settings import OrchestrationSettings

__all__ = ["ChannelState", "Decision", "DrainDecision", "LandingTick", "PreviousRun", "RunOutcome", "SensorCursor",
           "after_repeat", "decide", "drain_decision", "evaluate_landing"]


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
        """Parse a cursor; an unknown or damaged one counts as none (the orchestrator's run keys
        still prevent a second run of a state already requested)."""
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
    repeat: bool = False  # the state a run was already requested for (see after_repeat)
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


class RunOutcome(enum.StrEnum):
    """How a previous landing run stands; ``ACTIVE``: not finished (or not started) yet."""

    ACTIVE = "active"
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELED = "canceled"


@dataclass(frozen=True, slots=True)
class PreviousRun:
    """The run an earlier request of the same state launched, as the orchestrator recorded it."""

    run_id: str
    outcome: RunOutcome
    failure: str = ""  # one line: why it failed
    ended_unix: float | None = None  # when it ended (seconds since the epoch)


def after_repeat(channel: str, settings: OrchestrationSettings, cursor: SensorCursor, decision: Decision,
                 run: PreviousRun | None, now: float | None = None) -> Decision | None:
    """For a state already requested: a retry when its run failed (retries left), or a skip that
    says how that run ended; None (keep ``decision``) when the run is unknown or not finished."""
    if run is None or run.outcome == RunOutcome.ACTIVE:
        return None
    wait = f"waiting for the channel to change (new events or a take) or the drain schedule: {decision.numbers}"
    if run.outcome == RunOutcome.SUCCESS:
        return Decision(False, f"channel {channel}: landing run {run.run_id} of this state succeeded; {wait}")
    if run.outcome == RunOutcome.CANCELED:
        return Decision(False, f"channel {channel}: landing run {run.run_id} was canceled, so it is not retried; "
                               f"{wait}")
    limit = settings.sensor_max_retries
    if cursor.retries >= limit:
        return Decision(False, f"channel {channel}: landing run {run.run_id} failed ({run.failure}) after "
                               f"{cursor.retries} retries of this state (sensor_max_retries = {limit}); {wait}")
    ended = run.ended_unix
    backoff = 0.0 if ended is None else max(0.0, ended + settings.sensor_retry_seconds - (now or time.time()))
    if backoff > 0:
        return Decision(False, f"channel {channel}: landing run {run.run_id} failed ({run.failure}); retry "
                               f"{cursor.retries + 1} of {limit} in {backoff:.0f} s (sensor_retry_seconds): "
                               f"{decision.numbers}")
    assert decision.state is not None
    key = f"{decision.state.run_key(channel)}-retry{cursor.retries + 1}"
    return Decision(True, f"channel {channel}: landing run {run.run_id} failed ({run.failure}); retry "
                          f"{cursor.retries + 1} of {limit}: {decision.numbers}", key, decision.state,
                    repeat=True, numbers=decision.numbers, retry_of=run.run_id)


@dataclass(frozen=True, slots=True)
class LandingTick:
    """One evaluation of the landing sensor: the decision, the cursor to keep, and, when a run is
    requested, the tags it carries."""

    decision: Decision
    cursor: str | None  # None: keep the cursor as it was
    tags: dict[str, str] = field(default_factory=dict)


def evaluate_landing(channel: str, checkpoint_dir: str, settings: OrchestrationSettings, cursor_text: str | None,
                     previous_run: Callable[[str], PreviousRun | None],
                     landing_in_progress: Callable[[], str | None], *,
                     source: StateSource | None = None) -> LandingTick:
    """One evaluation of the landing sensor of ``channel`` (module docstring).

    ``previous_run(run_key)``: the newest run the orchestrator launched with that key, or None;
    ``landing_in_progress()``: the id of a queued or running landing run of the channel, or None.
    Each is called only when the decision needs it. ``source``: where the state is read
    (:func:`~ingest_toolkit.orchestrate.remote.state_source`; default ``checkpoint_dir``); a
    remote state's reasons end with where it came from, an agent that does not answer is a skip
    that names it."""
    source = source or LocalState(checkpoint_dir)
    try:
        info, now_ns = source.checkpoint()
    except AgentUnreachable as err:
        return LandingTick(Decision(False, f"channel {channel}: {err}"), None)
    except (CheckpointInvalid, OSError) as err:
        return LandingTick(Decision(False, f"channel {channel}: checkpoint.meta unreadable: {err}"), None)
    cursor = SensorCursor.parse(cursor_text)
    decision = decide(channel, info, settings, now_ns, cursor=cursor)
    if source.remote:
        decision = replace(decision, reason=f"{decision.reason} (state from {source.where})")
    seen = SensorCursor(info.checkpoint_id if info else cursor.checkpoint_id,
                        info.channel_id if info else cursor.channel_id, cursor.requested, cursor.requested_run_key,
                        cursor.retries)
    if decision.repeat and cursor.requested_run_key is not None:
        decision = after_repeat(channel, settings, cursor, decision, previous_run(cursor.requested_run_key)) or decision
    busy = landing_in_progress() if decision.run else None
    if busy:
        decision = Decision(False, f"{decision.reason}; landing run {busy} of this channel is already queued or "
                                   "running, it takes this backlog")
    if not decision.run:
        return LandingTick(decision, seen.dumps())
    tags = {"ingest/channel": channel, "ingest/trigger": "retry" if decision.retry_of else "backlog"}
    if decision.retry_of:
        tags["ingest/retry-of"] = decision.retry_of
    requested = SensorCursor(seen.checkpoint_id, seen.channel_id, decision.state, decision.run_key,
                             seen.retries + 1 if decision.retry_of else 0)
    return LandingTick(decision, requested.dumps(), tags)


@dataclass(frozen=True, slots=True)
class DrainDecision:
    """The drain schedule's decision: drain (``run``), or skip with ``reason``; ``warning``: the
    checkpoint could not be read (the channel is drained anyway)."""

    run: bool
    reason: str = ""
    warning: str = ""


def drain_decision(channel: str, checkpoint_dir: str, source: StateSource | None = None) -> DrainDecision:
    """Drain unless ``checkpoint.meta`` says the committed backlog is empty (an unreadable one drains).

    ``source``: where the state is read (default ``checkpoint_dir``). An agent that does not
    answer is a skip naming it: the landing would take through that agent and fail the same way."""
    source = source or LocalState(checkpoint_dir)
    try:
        info, _now = source.checkpoint()
    except AgentUnreachable as err:
        return DrainDecision(False, f"channel {channel}: {err}")
    except (CheckpointInvalid, OSError) as err:
        return DrainDecision(True, warning=f"checkpoint.meta unreadable ({err}); draining anyway")
    if info is not None and info.queue_size - info.inflight_takes <= 0:
        suffix = f" (state from {source.where})" if source.remote else ""
        return DrainDecision(False, f"channel {channel}: nothing to drain (committed backlog 0 at checkpoint "
                                    f"{info.checkpoint_id}){suffix}")
    return DrainDecision(True)
