"""What an orchestrator runs, without the orchestrator: landing, curation, the sensor's decision, checks.

Dagster (``ingest_toolkit.dagster``), Airflow (``ingest_toolkit.airflow``) and any other orchestrator adapt
these functions; none of them holds pipeline logic of its own, so a fix lands in every one at once.
Nothing here imports an orchestrator, and pyspark is imported only inside the functions that start
or use a session.

* :mod:`.settings`: the channels to orchestrate (:class:`ChannelSpec`) and the thresholds
  (:class:`OrchestrationSettings`: the ``[orchestrate]`` table, ``[dagster]`` on top);
* :mod:`.landing`: a landing run of one channel (:func:`land`) and its summary;
* :mod:`.curation`: one curated partition built from the landed hours (:func:`build_curated_partition`),
  the hourly partitions of an orchestrator's interval (:func:`hourly_windows`);
* :mod:`.spark`: the Spark session of one task, started only when needed (:func:`task_spark`);
* :mod:`.remote`: where a channel's state is read: its directories, or its agent's gRPC status
  (:func:`state_source`; the checks judged from it are in :mod:`.agent_checks`);
* :mod:`.backlog`: when to land (:func:`evaluate_landing`, :func:`decide`) and when to drain;
* the checks, each returning a :class:`Verdict` (passed, severity, description, metadata,
  runbook link): :mod:`.channel_checks`, :mod:`.log_presence` (channel health),
  :mod:`.forwarding_checks` (the sinks that forward a channel answer),
  :mod:`.data_checks` (reconciliation, duplicate event ids), :mod:`.curated_checks` (every
  landed hour curated, schema drift, rescued data, discarded rows, duplicates); the three segment checks judge one
  channel health document, computed here or served by the agent, in :mod:`.health_verdicts`;
  :data:`CHECKS` lists them with the severity and description docs/runbook.md gives each.
"""

from __future__ import annotations

from .backlog import (
    ChannelState,
    Decision,
    DrainDecision,
    LandingTick,
    PreviousRun,
    RunOutcome,
    SensorCursor,
    decide,
    drain_decision,
    evaluate_landing,
)
from .channel_checks import (
    backlog_below_capacity,
    checkpoint_fresh,
    drained_logs_deleted,
    missing_directory,
    refcounts_match_recount,
)
from .curated_checks import (
    curated_covers_landed,
    curated_no_duplicate_event_ids,
    curated_rescued_below_threshold,
    curated_rows_discarded,
    curated_schema_drift,
)
from .curation import CuratedResult, build_curated_partition, hour_of_landed_dir, hourly_windows
from .data_checks import landed_fully_replicated, landed_no_duplicate_event_ids, landed_reconciles
from .forwarding_checks import forward_sinks_reachable
from .landing import agent_status, agent_token, channel_route, land, landing_lines, landing_metadata
from .log_presence import referenced_logs_intact
from .remote import AgentAccess, AgentState, AgentUnreachable, LocalState, state_source
from .settings import (
    ChannelSpec,
    OrchestrationSettings,
    channel_spec,
    load_channel_specs,
    load_orchestration_settings,
)
from .spark import task_spark
from .verdict import (
    CHECKS,
    SEVERITIES,
    CheckInfo,
    PathValue,
    Severity,
    TextValue,
    UrlValue,
    Verdict,
    check_description,
    runbook_ref,
)

__all__ = ["CHECKS", "SEVERITIES", "AgentAccess", "AgentState", "AgentUnreachable", "ChannelSpec", "LocalState",
           "state_source", "ChannelState", "CheckInfo", "CuratedResult", "Decision", "DrainDecision", "LandingTick",
           "OrchestrationSettings", "PathValue", "PreviousRun", "RunOutcome", "SensorCursor", "Severity", "TextValue",
           "UrlValue", "Verdict", "agent_status", "agent_token", "backlog_below_capacity", "build_curated_partition",
           "channel_route", "channel_spec", "check_description", "checkpoint_fresh", "curated_covers_landed",
           "curated_no_duplicate_event_ids", "curated_rescued_below_threshold", "curated_rows_discarded",
           "curated_schema_drift", "decide", "drain_decision", "drained_logs_deleted", "evaluate_landing",
           "forward_sinks_reachable",
           "hour_of_landed_dir", "hourly_windows", "land", "landed_fully_replicated", "landed_no_duplicate_event_ids",
           "landed_reconciles",
           "landing_lines", "landing_metadata", "load_channel_specs", "load_orchestration_settings",
           "missing_directory", "referenced_logs_intact", "refcounts_match_recount", "runbook_ref", "task_spark"]
