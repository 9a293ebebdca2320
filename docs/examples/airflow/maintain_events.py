"""Maintenance of channel ``events``'s landed table, daily: compaction of small files, then
retention, then the files-per-partition check.

For a Delta or Iceberg landed table (``[landing] format`` in ``landing.toml``, or
``table_format=`` on the operators): every landing batch leaves one small file in each hour its
events fell in; ``MaintainTableOperator`` compacts them (Delta ``OPTIMIZE``; Iceberg: each crowded
partition rewritten in one commit) and applies retention with ``[landing] retention_hours``
(vacuum / snapshot expiry and unreferenced files older than the window; default 7 days, refused
below the landing's longest write). The channel's batch numbers survive both, so exactly-once is
kept. ``landed_files_per_partition`` then warns (the task succeeds) if a partition still holds more
than ``max_files_per_partition`` files.

It may run while ingest_events.py lands: a commit that loses the race is refused by the table and
its side tries again (docs/landing.md, "Maintenance"). To make them take turns instead, give both
the land task and this one the same one-slot Airflow pool (``airflow pools set ingest_events 1
"landing and maintenance of events"``, then ``pool="ingest_events"`` on both operators).
Settings as in ingest_events.py (``INGEST_CONF_DIR``). Copy the file and change ``CHANNEL``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from ingest_toolkit.airflow import ChannelCheckOperator, MaintainTableOperator

CHANNEL = "events"
TABLE_FORMAT = None  # or "delta" / "iceberg": overrides [landing] format of landing.toml

with DAG(dag_id=f"maintain_{CHANNEL}", schedule="0 3 * * *", start_date=datetime(2026, 1, 1, tzinfo=UTC),
         catchup=False, max_active_runs=1, tags=["ingest-toolkit"],
         default_args={"retries": 2, "retry_delay": timedelta(minutes=5)}):
    maintain = MaintainTableOperator(task_id="maintain", channel=CHANNEL, table_format=TABLE_FORMAT)
    files = ChannelCheckOperator(task_id="landed_files_per_partition", check="landed_files_per_partition",
                                 channel=CHANNEL, table_format=TABLE_FORMAT)
    maintain >> files
