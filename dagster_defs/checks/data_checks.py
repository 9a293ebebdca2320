"""Checks of the landed and curated tables: counts reconcile, no duplicate ``event_id``.

Reconciliation compares three counts:

* the events recorded by the landing's manifests (one manifest per committed batch);
* the rows of the landed table (every data file below ``<root>/<channel>``);
* ``takes_committed`` of the channel, when the landing is its only taker
  (``[dagster] landing_only_taker``): every event a take removed must have landed.

``takes_committed`` comes from the agent's live counters when the landing takes through an
agent, else from ``checkpoint.meta``, which is as of the last checkpoint: a landing that
committed after it makes the channel's count lag behind the manifests. The check then waits up
to ``checkpoint_wait_seconds`` for a newer checkpoint and, if none comes, judges only what
cannot lag (takes at the checkpoint <= manifest events) and says so in its description.
A landing running while the check reads can make the counts differ for a moment: run the
checks after the landing (the landing job does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import dagster as dg

from ingest_toolkit.channel.checkpoint import read_checkpoint_meta
from ingest_toolkit.channel.tools.common import lock_state
from ingest_toolkit.land.storage import locate

from ..settings import ChannelSpec
from .table_scan import scan_event_ids

__all__ = ["ManifestTotals", "TakenCount", "check_no_duplicates", "check_reconcile", "taken_from_agent",
           "taken_from_checkpoint"]


class ManifestTotals:
    """What the manifests of one channel add up to."""

    def __init__(self, batches: int, events: int, newest_commit_unix_ns: int) -> None:
        self.batches, self.events, self.newest_commit_unix_ns = batches, events, newest_commit_unix_ns


def check_no_duplicates(table_uri: str, what: str, spark: Any = None) -> dg.AssetCheckResult:
    """No ``event_id`` occurs twice in the table (counted over the table and per partition);
    ``spark``: the session whose Hadoop client reads a non-local table."""
    table = locate(table_uri, spark)
    scan = scan_event_ids(table)
    worst = dict(sorted(scan.duplicates_by_partition.items(), key=lambda kv: -kv[1])[:10])
    return dg.AssetCheckResult(
        passed=scan.extra_rows == 0,
        description=(f"{what}: {scan.rows} rows in {scan.files} files, every event_id once" if scan.extra_rows == 0
                     else f"{what}: {scan.duplicate_ids} event_ids occur more than once "
                          f"({scan.extra_rows} extra rows)"),
        metadata={"table": dg.MetadataValue.path(table.uri), "rows": scan.rows, "files": scan.files,
                  "duplicate_event_ids": scan.duplicate_ids, "extra_rows": scan.extra_rows,
                  "sample_duplicates": scan.sample, "partitions": len(scan.rows_by_partition),
                  "duplicates_by_partition": worst})


@dataclass(frozen=True, slots=True)
class TakenCount:
    """``takes_committed`` of the channel, where it was read and whether it is newer than the
    newest manifest (only then must it equal the manifests' total)."""

    takes_committed: int
    source: str
    current: bool


def taken_from_agent(status: dict[str, object]) -> TakenCount:
    """From the agent's live counters (``AgentClient.status``): exact at the time of the call."""
    live = status.get("live")
    assert isinstance(live, dict)
    return TakenCount(int(live["takes_committed"]), "agent status (live counters)", True)


def taken_from_checkpoint(spec: ChannelSpec, newest_manifest_ns: int, wait_s: float) -> TakenCount | None:
    """From ``checkpoint.meta``: current when no process owns the channel (its close wrote the
    last checkpoint) or when the checkpoint was written after the newest manifest; waits up to
    ``wait_s`` for such a checkpoint. Manifest times have one-second resolution: a checkpoint of
    the same second is not trusted to follow the commit."""
    deadline = time.monotonic() + wait_s
    while True:
        info = read_checkpoint_meta(spec.checkpoint_dir)
        if info is None:
            return None
        owned, _holder = lock_state(spec.checkpoint_dir)
        current = owned is False or info.written_unix_ns >= newest_manifest_ns + 1_000_000_000
        if current or time.monotonic() >= deadline:
            return TakenCount(info.takes_committed, f"checkpoint.meta {info.checkpoint_id}", current)
        time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))


def check_reconcile(table_uri: str, totals: ManifestTotals, taken: TakenCount | None,
                    spark: Any = None, *, unavailable: str | None = None) -> dg.AssetCheckResult:
    """Manifest events == landed rows, and == takes_committed when ``taken`` is given (the landing
    is the channel's only taker). ``unavailable``: why takes_committed, which had to be judged,
    could not be read (an agent that does not answer): the check fails with that reason."""
    scan = scan_event_ids(locate(table_uri, spark))
    metadata: dict[str, Any] = {"manifest_batches": totals.batches, "manifest_events": totals.events,
                                   "landed_rows": scan.rows, "landed_files": scan.files}
    problems = [unavailable] if unavailable else []
    if totals.events != scan.rows:
        problems.append(f"manifests record {totals.events} events but the landed table holds {scan.rows} rows")
    note = ""
    if taken is not None:
        metadata.update(takes_committed=taken.takes_committed, takes_source=taken.source,
                        takes_current=taken.current)
        if taken.current and taken.takes_committed != totals.events:
            problems.append(f"the channel committed takes of {taken.takes_committed} events ({taken.source}), "
                            f"the manifests record {totals.events}")
        elif not taken.current and taken.takes_committed > totals.events:
            problems.append(f"the channel had committed takes of {taken.takes_committed} events ({taken.source}), "
                            f"more than the {totals.events} the manifests record")
        elif not taken.current:
            note = (f"; {taken.source} predates the last landing: takes_committed {taken.takes_committed} <= "
                    "manifest events checked, equality not judged")
    description = "; ".join(problems) if problems else (
        f"{totals.events} events in {totals.batches} manifests = {scan.rows} landed rows"
        + (" = takes committed by the channel" if taken is not None and taken.current else "") + note)
    return dg.AssetCheckResult(passed=not problems, description=description, metadata=metadata)
