"""The landing, the curation of an hour and the checks, as Airflow operators.

Each ``execute`` loads the channel's settings (:class:`~.task.ChannelTask`), calls the function of
:mod:`ingest_toolkit.orchestrate` that the Dagster assets call, and returns its result as plain
values (the XCom). A task that needs Spark starts it when it first needs it and stops it at the
end (:func:`~ingest_toolkit.orchestrate.spark.task_spark`).

* :class:`LandChannelOperator`: up to ``batches`` take transactions (default ``batches_per_run``);
  a failure rolls the open take back (the events stay in the channel) and fails the task. Its
  outlet is the channel's landed asset (:func:`~.assets.landed_asset`).
* :class:`CurateHourOperator`: rebuilds the curated partitions of the run's data interval (one
  per hour of it), replacing each as a whole, so a catch-up, a rerun or ``airflow backfill
  create`` rebuilds hours idempotently. Outlet: the curated asset.
* :class:`ChannelCheckOperator`: one check of :data:`~ingest_toolkit.orchestrate.CHECKS`; an
  ERROR verdict fails the task (no retry: :class:`CheckFailedError`), a WARN verdict logs a
  warning and the task succeeds. A failed check logs its details, one line per metadata key
  (``orphaned``, ``mismatches``, ``damaged``, ...: what the runbook tells on-call to read), and
  its XCom is the verdict either way (a failing task pushes it before it raises). With
  ``landing_task_id``, ``landed_reconciles`` of a Delta or Iceberg table also checks that the
  table carries the batch that task's landing committed.
* :class:`MaintainTableOperator`: compaction and retention of a Delta or Iceberg landed table
  (:func:`~ingest_toolkit.orchestrate.maintenance.maintain`).

Every operator takes ``table_format`` (``parquet``, ``delta``, ``iceberg``) to override
``[landing] format`` of the configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from ..errors import ConfigError, IngestError
from ..orchestrate import channel_checks, curated_checks, data_checks
from ..orchestrate.curation import build_curated_partition, curated_metadata, hourly_windows
from ..orchestrate.forwarding_checks import forward_sinks_reachable
from ..orchestrate.landing import land, landing_lines, landing_metadata
from ..orchestrate.log_presence import referenced_logs_intact
from ..orchestrate.maintenance import maintain, maintenance_lines, maintenance_metadata
from ..orchestrate.spark import task_spark
from ..orchestrate.table_checks import LastLanding
from ..orchestrate.verdict import CHECKS, Severity, Verdict
from .assets import curated_asset, landed_asset
from .task import ChannelTask, plain

__all__ = ["CHANNEL_CHECKS", "CURATED_CHECKS", "LANDED_CHECKS", "ChannelCheckOperator", "CheckFailedError",
           "CurateHourOperator", "LandChannelOperator", "MaintainTableOperator"]

XCOM_RETURN_KEY = "return_value"  # Airflow's key of a task's return value: the verdict's, failed or not
CHANNEL_CHECKS = [name for name, info in CHECKS.items() if info.target == "channel"]
LANDED_CHECKS = [name for name, info in CHECKS.items() if info.target == "landed"]
CURATED_CHECKS = [name for name, info in CHECKS.items() if info.target == "curated"]


class _ChannelOperator(BaseOperator):
    """An operator of one channel: ``conf_dir`` (default ``INGEST_CONF_DIR``, else ``conf``) and
    the optional ``ingest_agent`` connection ``agent_conn_id``. Only ``conf_dir`` is templated: the
    channel names the task's assets, which Airflow must know when it parses the DAG."""

    template_fields = ("conf_dir",)

    def __init__(self, *, channel: str, conf_dir: str | None = None, agent_conn_id: str | None = None,
                 table_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.channel, self.conf_dir, self.agent_conn_id = channel, conf_dir, agent_conn_id
        self.table_format = table_format

    def channel_task(self) -> ChannelTask:
        return ChannelTask.load(self.channel, self.conf_dir, self.agent_conn_id, self.table_format)


class LandChannelOperator(_ChannelOperator):
    """Land channel ``channel``: take transactions into Parquet, exactly once (module docstring)."""

    def __init__(self, *, channel: str, batches: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [landed_asset(channel)])
        super().__init__(channel=channel, **kwargs)
        self.batches = batches

    def execute(self, context: Context) -> dict[str, Any]:
        job = self.channel_task()
        with task_spark(job.landing.spark) as start_spark:
            run = land(job.spec, job.landing, start_spark, batches=self.batches or job.settings.batches_per_run,
                       token=job.token, notice=self.log.info)
        for line in landing_lines(run, self.channel):
            self.log.info(line)
        result: dict[str, Any] = plain(landing_metadata(run, job.landing.root, self.channel))
        asset = landed_asset(self.channel)
        if any(outlet == asset for outlet in self.outlets):
            context["outlet_events"][asset].extra = _landed_event(result)
        return result


def _landed_event(result: dict[str, Any]) -> dict[str, Any]:
    """The extra of a landing's asset event: what the run made final in the table. ``events``
    counts the batches it completed: the events it wrote, and those of a batch an earlier, failed
    landing wrote but could not commit the take of (``redelivered``: the table held them already,
    this run committed their take; no asset event was emitted for them before)."""
    return {"events": result["events"] + result["redelivered"], "written": result["events"],
            **{key: result[key] for key in ("redelivered", "partitions", "batch_ids", "root", "backlog_after",
                                            "format", "table_uri", "table_version", "batch_number")}}


class CurateHourOperator(_ChannelOperator):
    """Rebuild the curated partitions of the data interval of the run (module docstring)."""

    def __init__(self, *, channel: str, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [curated_asset(channel)])
        super().__init__(channel=channel, **kwargs)

    def execute(self, context: Context) -> list[dict[str, Any]]:
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is None or end is None:
            raise ConfigError(f"task {self.task_id} has no data interval (a manual run of a DAG without a "
                              "schedule): give the DAG an hourly data-interval timetable", key="schedule")
        windows = hourly_windows(start, end)
        job = self.channel_task()
        built = []
        curation = job.settings.curated.for_channel(self.channel)
        with task_spark(job.landing.spark) as start_spark:
            for first, last in windows:
                result = build_curated_partition(start_spark(), job.landing, job.settings.curated_root,
                                                 self.channel, first, last, curation, run_id=str(context["run_id"]))
                self.log.info("hour %s: %d rows from %d landed files (%s), %d duplicates dropped, %d columns "
                              "(new: %s), %d rows with rescued data, %d discarded", first.isoformat(), result.rows,
                              result.landed_files, result.format, result.duplicates_dropped, result.columns,
                              ", ".join(result.columns_added) or "none", result.rescued_rows, result.discarded_rows)
                built.append(plain(curated_metadata(result)))
        asset = curated_asset(self.channel)
        if any(outlet == asset for outlet in self.outlets):
            context["outlet_events"][asset].extra = {"hours": [hour["window_utc"] for hour in built],
                                                     "rows": [hour["rows"] for hour in built]}
        return built


class CheckFailedError(IngestError, AirflowFailException):
    """An ERROR check failed; the task fails without retries (the data will not change by itself)."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(f"check {verdict.check} failed ({verdict.severity}): {verdict.description}; "
                         f"runbook: {verdict.runbook}")
        self.verdict = verdict


class _CheckRun:
    """What a check of the curated table reads from its DAG run: the hours built by the
    :class:`CurateHourOperator` tasks upstream of it (their XCom) and where the DAG's hours start."""

    def __init__(self, operator: BaseOperator, context: Context) -> None:
        self.operator, self.context = operator, context

    def built(self) -> list[dict[str, Any]]:
        curate = [t.task_id for t in self.operator.get_flat_relatives(upstream=True)
                  if isinstance(t, CurateHourOperator) and getattr(t, "channel", None) == getattr(
                      self.operator, "channel", None)]
        if not curate:
            raise ConfigError(f"check task {self.operator.task_id} judges the hours a run curated, but no "
                              "CurateHourOperator of its channel is upstream of it: set it downstream of the "
                              "curation task", key="check")
        hours: list[dict[str, Any]] = []
        for task_id in curate:
            pulled = self.context["ti"].xcom_pull(task_ids=task_id)
            hours += list(pulled or [])
        return hours

    def first_hour(self) -> Any:
        """The first hour the DAG curates: its ``start_date`` (a run's data interval never starts earlier)."""
        dag = self.context["dag"]
        start = dag.start_date or self.context.get("data_interval_start")
        if start is None:
            raise ConfigError(f"DAG {dag.dag_id} has no start_date: curated_covers_landed compares the landed hours "
                              "with the first hour the DAG curates", key="start_date")
        return start


_Check = Callable[[ChannelTask, Callable[[], Any], _CheckRun], Verdict]

# What each check reads; the checks themselves are ingest_toolkit.orchestrate's.
_RUN: dict[str, _Check] = {
    "refcounts_match_recount": lambda job, _spark, _run: channel_checks.refcounts_match_recount(
        job.spec, job.settings, source=job.source()),
    "referenced_logs_intact": lambda job, _spark, _run: referenced_logs_intact(
        job.spec, job.settings, source=job.source()),
    "drained_logs_deleted": lambda job, _spark, _run: channel_checks.drained_logs_deleted(
        job.spec, job.settings, source=job.source()),
    "checkpoint_fresh": lambda job, _spark, _run: channel_checks.checkpoint_fresh(job.spec, job.settings,
                                                                            agent=job.landing.agent,
                                                                            source=job.source()),
    "recovery_losses_acknowledged": lambda job, _spark, _run: channel_checks.recovery_losses_acknowledged(
        job.spec, job.settings, source=job.source()),
    "backlog_below_capacity": lambda job, _spark, _run: channel_checks.backlog_below_capacity(
        job.spec, job.settings, source=job.source()),
    "forward_sinks_reachable": lambda job, _spark, _run: forward_sinks_reachable(job.spec, job.settings,
                                                                                source=job.source()),
    "landed_reconciles": lambda job, spark, _run: data_checks.landed_reconciles(job.spec, job.settings, job.landing,
                                                                          spark, token=job.token),
    "landed_no_duplicate_event_ids": lambda job, spark, _run: data_checks.landed_no_duplicate_event_ids(
        job.spec, job.settings, job.landing.root, spark, landing=job.landing),
    "landed_files_per_partition": lambda job, spark, _run: data_checks.landed_files_per_partition(
        job.spec, job.settings, job.landing, spark),
    "landed_fully_replicated": lambda job, spark, _run: data_checks.landed_fully_replicated(
        job.spec, job.settings, job.landing.root, spark),
    "curated_no_duplicate_event_ids": lambda job, spark, _run: curated_checks.curated_no_duplicate_event_ids(
        job.spec, job.settings, job.landing, job.settings.curated_root, spark),
    "curated_covers_landed": lambda job, spark, run: curated_checks.curated_covers_landed(
        job.spec, job.settings, job.landing, run.first_hour(), spark),
    "curated_schema_drift": lambda job, _spark, run: curated_checks.curated_schema_drift(
        job.spec, job.settings, run.built()),
    "curated_rescued_below_threshold": lambda job, _spark, run: curated_checks.curated_rescued_below_threshold(
        job.spec, job.settings, run.built()),
    "curated_rows_discarded": lambda job, _spark, run: curated_checks.curated_rows_discarded(
        job.spec, job.settings, run.built()),
}
assert set(_RUN) == set(CHECKS), "every check of the runbook has an operator"


class ChannelCheckOperator(_ChannelOperator):
    """Run check ``check`` on channel ``channel``; the XCom is the verdict (module docstring)."""

    def __init__(self, *, check: str, channel: str, landing_task_id: str | None = None, **kwargs: Any) -> None:
        if check not in CHECKS:
            raise ConfigError(f"unknown check {check!r}; the checks: {', '.join(CHECKS)}", key="check")
        super().__init__(channel=channel, **kwargs)
        self.check, self.landing_task_id = check, landing_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        job = self.channel_task()
        last = None
        if self.landing_task_id:  # the landing of this DAG run: its XCom is the landing's summary
            landed = context["ti"].xcom_pull(task_ids=self.landing_task_id)
            last = LastLanding.from_metadata(landed) if isinstance(landed, dict) else None
        with task_spark(job.landing.spark) as start_spark:
            if self.check == "landed_reconciles" and last is not None:
                verdict = data_checks.landed_reconciles(job.spec, job.settings, job.landing, start_spark,
                                                        token=job.token, last=last)
            else:
                verdict = _RUN[self.check](job, start_spark, _CheckRun(self, context))
        outcome: dict[str, Any] = plain({"check": verdict.check, "passed": verdict.passed,
                                         "severity": str(verdict.severity), "description": verdict.description,
                                         "metadata": verdict.metadata})
        if verdict.passed:
            self.log.info("check %s passed: %s", verdict.check, verdict.description)
            return outcome
        if verdict.severity == Severity.WARN:
            self.log.warning("check %s failed (WARN, the task succeeds): %s; runbook: %s", verdict.check,
                             verdict.description, verdict.runbook)
        for line in detail_lines(outcome["metadata"]):  # what the runbook tells on-call to read
            self.log.warning("%s", line)
        if verdict.severity == Severity.WARN:
            return outcome
        ti = context.get("ti")  # absent when execute() is called outside a task run
        if ti is not None:
            ti.xcom_push(key=XCOM_RETURN_KEY, value=outcome)  # a failed task returns nothing
        raise CheckFailedError(verdict)


def detail_lines(metadata: dict[str, Any]) -> list[str]:
    """The verdict's details as log lines, one per metadata key (``orphaned: ["/data/log-3", ...]``,
    ``mismatches: {"log-7": {"recorded": 12, "recounted": 5}}``): lists and mappings as JSON on
    their line, so each reads whole in the task log and greps by its key."""
    return [f"{key}: {value if isinstance(value, str) else json.dumps(value, sort_keys=True)}"
            for key, value in metadata.items()]


class MaintainTableOperator(_ChannelOperator):
    """Compact the channel's Delta or Iceberg landed table and apply retention (``[landing]
    retention_hours``); the XCom is what it did (files before and after, files deleted...)."""

    def execute(self, context: Context) -> dict[str, Any]:
        job = self.channel_task()
        result = maintain(job.spec, job.landing)
        for line in maintenance_lines(result, self.channel):
            self.log.info(line)
        summary: dict[str, Any] = plain(maintenance_metadata(result))
        return summary
