"""Ingest channel ``events``: wait for a backlog (deferred), land it, run the checks.

Copy this file into your Airflow dags folder and change ``CHANNEL``. The settings are read when
the tasks run, from ``INGEST_CONF_DIR`` (default ``conf`` in the worker's directory): the channel
from ``agent.toml``, the landing root and Spark from ``landing.toml``, the sensor's thresholds
from ``orchestrate.toml`` / ``dagster.toml`` (the Dagster sensor's). The landing takes through
the agent that owns the channel (found from its ports file) or opens a stopped channel itself; to
name the agent, give ``agent_conn_id`` an ``ingest_agent`` connection (address, token, TLS
files: ``airflow connections add``), never the values themselves.

One run at a time (``max_active_runs=1``), started again as soon as one ends (``@continuous``):
the sensor waits in the triggerer, without a worker slot, until the committed backlog or its age
crosses a threshold, or for 30 minutes at most before it lands whatever is there (the drain).
A check with an ERROR verdict fails its task; a WARN verdict is logged and the task succeeds.
Downstream DAGs can schedule on ``landed_asset(CHANNEL)``. The landed table's format is ``[landing]
format`` (``parquet``, ``delta``, ``iceberg``), or ``TABLE_FORMAT`` here; a Delta or Iceberg table is
landed without Spark and maintained by maintain_events.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from ingest_toolkit.airflow import (
    CHANNEL_CHECKS,
    LANDED_CHECKS,
    ChannelBacklogSensor,
    ChannelCheckOperator,
    LandChannelOperator,
)

CHANNEL = "events"
AGENT_CONN_ID = None  # or the id of an "ingest_agent" connection
TABLE_FORMAT = None  # or "delta" / "iceberg": overrides [landing] format of landing.toml

with DAG(dag_id=f"ingest_{CHANNEL}", schedule="@continuous", start_date=datetime(2026, 1, 1, tzinfo=UTC),
         catchup=False, max_active_runs=1, tags=["ingest-toolkit"],
         default_args={"retries": 2, "retry_delay": timedelta(minutes=1)}):
    backlog = ChannelBacklogSensor(task_id="wait_for_backlog", channel=CHANNEL, drain_after=timedelta(minutes=30))
    landing = LandChannelOperator(task_id="land", channel=CHANNEL, agent_conn_id=AGENT_CONN_ID,
                                  table_format=TABLE_FORMAT)
    channel_checks = [ChannelCheckOperator(task_id=check, check=check, channel=CHANNEL, agent_conn_id=AGENT_CONN_ID)
                      for check in CHANNEL_CHECKS]
    landed_checks = [ChannelCheckOperator(task_id=check, check=check, channel=CHANNEL, agent_conn_id=AGENT_CONN_ID,
                                          table_format=TABLE_FORMAT, landing_task_id="land")
                     for check in LANDED_CHECKS]
    backlog >> landing >> [*channel_checks, *landed_checks]
