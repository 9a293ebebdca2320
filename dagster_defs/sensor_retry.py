"""The landing sensor's retry of a failed run: the same channel state, a new run key.

The sensor's run key is the channel *state* it decided on, so Dagster never launches two runs
for one state. A landing that fails (the NameNode in safe mode or down, a DataNode lost, a
permission fixed later) rolls its take back and leaves the state as it was: without this, the
sensor would wait for new puts or the drain schedule. :func:`retry_run_key` lets it request
the same state again, ``sensor_retry_seconds`` after the failed run ended, with the key
``<state key>-retry<n>``, so each retry is itself launched once.
"""

from __future__ import annotations

import time

import dagster as dg

__all__ = ["retry_run_key"]

_FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def retry_run_key(context: dg.SensorEvaluationContext, run_key: str | None, backoff_seconds: float,
                  now: float | None = None) -> str | None:
    """The key to request again when the newest run of ``run_key`` failed (or was canceled) at
    least ``backoff_seconds`` ago; None while it is queued, running or succeeded, before the
    backoff, or when no run of that key exists (it may not be launched yet)."""
    if not run_key:
        return None
    try:
        instance = context.instance
    except dg.DagsterInvariantViolationError:  # evaluated without an instance (a unit test)
        return None
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/run_key": run_key}), limit=1)
    if not runs or runs[0].status not in _FAILED:
        return None
    record = instance.get_run_record_by_id(runs[0].run_id)
    ended = record.end_time if record is not None else None
    if ended is not None and (now or time.time()) - ended < backoff_seconds:
        return None
    base, _, attempt = run_key.partition("-retry")
    return f"{base}-retry{int(attempt) + 1 if attempt.isdigit() else 1}"
