"""The maintenance of a channel's Delta or Iceberg landed table as a scheduled asset.

``<c>_landed_maintenance`` (after ``<c>_landed``) compacts the table's small files and applies
retention (:func:`ingest_toolkit.orchestrate.maintenance.maintain`); the job ``maintain_<c>``
runs it, and the schedule ``maintenance_schedule_<c>`` launches that job every
``maintenance_cron`` (default daily at 03:00, in ``timezone``). Its materialization records what
it did: files before and after, per partition at most, partitions compacted, snapshots expired,
files deleted, the table version it left.

The asset runs in the landing's pool (``landing-<c>``): the maintenance and the landings of a
channel take turns. Nothing depends on that for correctness (a compaction and a landing that do
race are refused by the table's commit, and the loser plans again; docs/landing.md), it only
keeps one of them from redoing its work. A plain Parquet landing has no maintenance: no asset,
job or schedule is built for it.
"""

# No ``from __future__ import annotations``: Dagster reads the ``context`` annotation at decoration time.

import time
from dataclasses import dataclass
from typing import Any

import dagster as dg

from ingest_toolkit.orchestrate.maintenance import maintain, maintenance_lines, maintenance_metadata
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings

from .metadata import dagster_metadata
from .naming import landed_key, maintenance_job_name, maintenance_key, maintenance_schedule_name
from .resources import ResourceKeys

__all__ = ["KINDS", "Maintenance", "build_maintenance"]

KINDS = {"delta": {"deltalake", "python"}, "iceberg": {"iceberg", "python"}, "parquet": {"spark", "parquet"}}


@dataclass(frozen=True)
class Maintenance:
    """The maintenance asset of a channel's table, its job and its schedule."""

    asset: dg.AssetsDefinition
    job: Any  # an asset job (dagster's UnresolvedAssetJobDefinition)
    schedule: dg.ScheduleDefinition


def build_maintenance(spec: ChannelSpec, settings: OrchestrationSettings, keys: ResourceKeys, pool: str,
                      table_format: str) -> Maintenance:
    """The maintenance asset, its job and its schedule."""
    asset = _asset(spec, keys, pool, table_format)
    job = dg.define_asset_job(maintenance_job_name(spec.node), selection=dg.AssetSelection.assets(asset.key),
                              description=f"Compact and apply retention to the {table_format} table of channel "
                                          f"{spec.name}.",
                              tags={"ingest/channel": spec.node})
    schedule = dg.ScheduleDefinition(
        name=maintenance_schedule_name(spec.node), job=job, cron_schedule=settings.maintenance_cron,
        execution_timezone=settings.timezone, default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Maintains the landed {table_format} table of channel {spec.name} (compaction, retention).")
    return Maintenance(asset, job, schedule)


def _asset(spec: ChannelSpec, keys: ResourceKeys, pool: str, table_format: str) -> dg.AssetsDefinition:
    @dg.asset(key=maintenance_key(spec.node), deps=[landed_key(spec.node)], pool=pool, group_name="landing",
              required_resource_keys={keys.landing}, kinds=KINDS[table_format],
              description=f"Upkeep of the landed {table_format} table of channel '{spec.name}': compaction of "
                          "small files, then retention (vacuum / snapshot expiry, unreferenced files older than "
                          "[landing] retention_hours). Exactly-once is kept: the batch numbers survive both.")
    def maintained(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        started = time.monotonic()
        result = maintain(spec, keys.landing_of(context).config())
        for line in maintenance_lines(result, spec.name):
            context.log.info(line)
        return dg.MaterializeResult(metadata={**dagster_metadata(maintenance_metadata(result)),
                                              "duration_s": round(time.monotonic() - started, 3)})

    return maintained
