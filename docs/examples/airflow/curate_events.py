"""Hourly curated table of channel ``events``: one run per hour, rebuilt as a whole each time.

Each run rebuilds the curated partitions of its data interval (``CronDataIntervalTimetable``:
the hour before the run) from the landed table, one row per ``event_id``, the bodies parsed into
typed columns (``[orchestrate.curated]``, docs/curation.md), then runs the curated checks: no
``event_id`` twice, every landed hour at or after ``start_date``, and, judging the hours this run
built (the XCom of ``curate_hour``), schema drift (WARN), rescued data and discarded rows (WARN).
A rebuilt hour replaces the old one, so catch-up (``catchup=True``
runs every hour since ``start_date``), clearing a run, and a backfill rebuild hours idempotently::

    airflow backfill create --dag-id curate_events --from-date 2026-11-20T00:00:00+00:00 \\
        --to-date 2026-11-21T00:00:00+00:00 --reprocess-behavior completed

One run at a time: two runs rebuilding the same hour must not swap its directory at once.
Settings as in ingest_events.py (``INGEST_CONF_DIR``). Copy the file and change ``CHANNEL``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import DAG, CronDataIntervalTimetable

from ingest_toolkit.airflow import CURATED_CHECKS, ChannelCheckOperator, CurateHourOperator

CHANNEL = "events"

with DAG(dag_id=f"curate_{CHANNEL}", schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
         start_date=datetime(2026, 11, 1, tzinfo=UTC), catchup=True, max_active_runs=1,
         tags=["ingest-toolkit"]):
    curate = CurateHourOperator(task_id="curate_hour", channel=CHANNEL)
    checks = [ChannelCheckOperator(task_id=check, check=check, channel=CHANNEL) for check in CURATED_CHECKS]
    curate >> checks
