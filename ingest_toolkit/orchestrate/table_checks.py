"""The landed-table checks of a Delta or Iceberg table, read through the table layer's reader
(:func:`~ingest_toolkit.land.tables.reading.open_reader`: delta-rs and PyIceberg, on a local
path, HDFS or S3, no JVM).

``landed_reconciles`` judges three things, each from what the table itself records:

* **events landed = events taken**: the rows of the channel in the table's current version
  (counted by ``event_id``, whose first 32 characters are the channel's identity) equal the
  channel's ``takes_committed`` (when the landing is its only taker);
* **the commits account for the rows**: while the table's history still holds every batch
  commit of a channel (its batch numbers 1..N all have a commit: a retention job may have
  trimmed the oldest), the events those commits record (``ingest.events``) equal its rows;
* **the last table version carries the last batch**: the channel's batch number recorded in
  the table (Delta app transaction, Iceberg property) is the one its newest commit carries, and
  at least the number of the last landing the orchestrator knows of (:class:`LastLanding`), whose
  commit, while the history holds it, records that landing's batch and events.

``landed_no_duplicate_event_ids`` reads ``event_id`` of the current version only (the files a
Delta or Iceberg reader sees: files of failed writes or replaced by compaction are not rows).
``landed_files_per_partition`` (every format, WARN) counts the current version's data files
per partition against ``max_files_per_partition``: above it, run the maintenance (compaction).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..land.tables.reading import CommitRecord, TableReader, files_per_partition, history_complete
from .table_scan import TableScan, scan_chunks
from .verdict import PathValue, TextValue, Verdict, verdict

if TYPE_CHECKING:
    from .settings import OrchestrationSettings

__all__ = ["LastLanding", "TakenCount", "files_verdict", "reconcile_table", "table_duplicates"]


@dataclass(frozen=True, slots=True)
class TakenCount:
    """``takes_committed`` of the channel, where it was read and whether it is newer than the
    newest manifest (only then must it equal the manifests' total)."""

    takes_committed: int
    source: str
    current: bool
    channel_id: str | None = None  # the channel's identity (32 hex digits), to pick its manifests in a shared table


@dataclass(frozen=True, slots=True)
class LastLanding:
    """The newest landing an orchestrator recorded (its asset materialization, its XCom)."""

    batch_id: str
    batch_number: int
    events: int
    table_version: int | None = None

    @classmethod
    def from_metadata(cls, values: dict[str, Any]) -> LastLanding | None:
        """From a landing's summary (:func:`~ingest_toolkit.orchestrate.landing.landing_metadata`);
        None when that landing committed no batch."""
        number, batch = values.get("batch_number"), values.get("batch_id")
        if not batch or number in (None, ""):
            return None
        version = values.get("table_version")
        return cls(str(batch), int(number), int(values.get("last_batch_events") or 0),
                   int(version) if version not in (None, "") else None)


def table_duplicates(check: str, settings: OrchestrationSettings, reader: TableReader, what: str) -> Verdict:
    """No ``event_id`` twice in the current version of a Delta or Iceberg table."""
    scan = scan_chunks(reader.event_ids(), files=len(reader.files()))
    return duplicates_verdict(check, settings, scan, f"{what} ({reader.format})", reader.uri, reader.format)


def duplicates_verdict(check: str, settings: OrchestrationSettings, scan: TableScan, label: str, uri: str,
                       table_format: str | None = None) -> Verdict:
    """The verdict of a duplicate-id check on ``scan`` of the table at ``uri`` (``label`` opens the
    description; ``table_format``, when given, joins the metadata): every landed and curated
    table, whatever read it, is judged and reported the same way."""
    worst = dict(sorted(scan.duplicates_by_partition.items(), key=lambda kv: -kv[1])[:10])
    return verdict(
        check, settings, passed=scan.extra_rows == 0,
        description=(f"{label}: {scan.rows} rows in {scan.files} files, every event_id once" if scan.extra_rows == 0
                     else f"{label}: {scan.duplicate_ids} event_ids occur more than once ({scan.extra_rows} extra "
                          "rows)"),
        metadata={"table": PathValue(uri), **({"format": table_format} if table_format else {}), "rows": scan.rows,
                  "files": scan.files, "duplicate_event_ids": scan.duplicate_ids, "extra_rows": scan.extra_rows,
                  "sample_duplicates": scan.sample, "partitions": len(scan.rows_by_partition),
                  "duplicates_by_partition": worst})


def files_verdict(settings: OrchestrationSettings, reader: TableReader) -> Verdict:
    """At most ``max_files_per_partition`` data files in every partition of the current version."""
    counts = files_per_partition(reader.files())
    limit = settings.max_files_per_partition
    crowded = dict(sorted(((p, n) for p, n in counts.items() if n > limit), key=lambda kv: -kv[1])[:10])
    worst = max(counts.values(), default=0)
    description = (f"{reader.format} table: at most {worst} data files per partition ({len(counts)} partitions, "
                   f"{sum(counts.values())} files; limit {limit})" if not crowded else
                   f"{reader.format} table: {len(crowded)} partitions hold more than {limit} data files (worst "
                   f"{worst}): run the maintenance (compaction)")
    return verdict("landed_files_per_partition", settings, passed=not crowded, description=description,
                   metadata={"table": PathValue(reader.uri), "format": reader.format, "partitions": len(counts),
                             "files": sum(counts.values()), "max_files_in_a_partition": worst,
                             "limit": TextValue(limit), "crowded_partitions": crowded})


def reconcile_table(settings: OrchestrationSettings, reader: TableReader, taken: TakenCount | None,
                    channel_id: str | None, *, unavailable: str | None = None,
                    last: LastLanding | None = None) -> Verdict:
    """``landed_reconciles`` of a Delta or Iceberg table (module docstring). ``channel_id``: the
    channel's identity (32 hex digits; None: unknown, the whole table is judged)."""
    scan = scan_chunks(reader.event_ids(), files=len(reader.files()))
    commits = reader.commits()
    own = channel_id or (next(iter(scan.rows_by_channel)) if len(scan.rows_by_channel) == 1 else None)
    problems = [unavailable] if unavailable else []
    version = reader.version()
    metadata: dict[str, Any] = {"format": reader.format, "table": PathValue(reader.uri),
                                "table_version": TextValue("" if version is None else version),
                                "commit_batches": len(commits), "commit_events": sum(c.events for c in commits),
                                "landed_rows": scan.rows, "landed_files": scan.files}
    complete = _commits_account_for_rows(reader, commits, scan, problems)
    metadata["history_complete"] = complete
    own_rows = scan.rows_by_channel.get(own, 0) if own else scan.rows
    if own:
        metadata.update(channel_id=own, rows_of_channel=own_rows)
        _last_batch(reader, commits, own, last, problems, metadata)
    note = _takes(taken, own_rows, problems, metadata)
    description = "; ".join(problems) if problems else (
        f"{own_rows} rows of the channel in the {reader.format} table"
        + (f" (of {scan.rows}, {len(scan.rows_by_channel)} channels)" if own_rows != scan.rows else "")
        + (" = takes committed by the channel" if taken is not None and taken.current else "")
        + ("; every batch commit's events = its rows" if complete else
           "; older batch commits trimmed by retention: commit events not compared")
        + (f"; batch number {metadata['batch_number']} = the newest commit's" if "batch_number" in metadata else "")
        + note)
    return verdict("landed_reconciles", settings, passed=not problems, description=description, metadata=metadata)


def _commits_account_for_rows(reader: TableReader, commits: list[CommitRecord], scan: TableScan,
                              problems: list[str]) -> bool:
    """Per channel whose history is complete: its commits' events == its rows. Whether every
    channel's history is complete."""
    events: dict[str, int] = {}
    for c in commits:
        events[c.channel_id] = events.get(c.channel_id, 0) + c.events
    complete = True
    for channel in sorted(set(events) | set(scan.rows_by_channel)):
        if not history_complete(commits, channel, reader.batch_number(channel)):
            complete = False
            continue
        rows = scan.rows_by_channel.get(channel, 0)
        if events.get(channel, 0) != rows:
            problems.append(f"the table's commits of channel {channel} record {events.get(channel, 0)} events but "
                            f"the table holds {rows} rows of it")
    return complete


def _last_batch(reader: TableReader, commits: list[CommitRecord], channel: str, last: LastLanding | None,
                problems: list[str], metadata: dict[str, Any]) -> None:
    """The last table version carries the channel's last batch (module docstring)."""
    number = reader.batch_number(channel)
    mine = [c for c in commits if c.channel_id == channel]
    newest = max(mine, key=lambda c: c.batch_number, default=None)
    metadata["batch_number"] = number
    if newest is not None:
        metadata.update(newest_commit_batch=newest.batch_number, newest_commit_batch_id=newest.batch_id)
        if newest.batch_number != number:
            problems.append(f"the table records batch number {number} for the channel but its newest batch commit "
                            f"carries {newest.batch_number} ({newest.batch_id})")
    if last is None:
        return
    metadata.update(last_landing_batch=last.batch_number, last_landing_batch_id=last.batch_id)
    if number < last.batch_number:
        problems.append(f"the last landing committed batch {last.batch_number} ({last.batch_id}) but the table "
                        f"records batch number {number}: the table lost commits (restored to an older version?)")
    record = next((c for c in mine if c.batch_id == last.batch_id), None)
    if record is not None and (record.batch_number, record.events) != (last.batch_number, last.events or record.events):
        problems.append(f"the commit of the last landing's batch {last.batch_id} records batch {record.batch_number} "
                        f"with {record.events} events; the landing reported batch {last.batch_number} with "
                        f"{last.events}")


def _takes(taken: TakenCount | None, own_rows: int, problems: list[str], metadata: dict[str, Any]) -> str:
    """events landed = events taken; the note for a count that predates the last landing."""
    if taken is None:
        return ""
    metadata.update(takes_committed=taken.takes_committed, takes_source=taken.source, takes_current=taken.current)
    if taken.current and taken.takes_committed != own_rows:
        problems.append(f"the channel committed takes of {taken.takes_committed} events ({taken.source}), the "
                        f"table holds {own_rows} rows of the channel")
    elif not taken.current and taken.takes_committed > own_rows:
        problems.append(f"the channel had committed takes of {taken.takes_committed} events ({taken.source}), more "
                        f"than the {own_rows} rows of the channel in the table")
    elif not taken.current:
        return (f"; {taken.source} predates the last landing: takes_committed {taken.takes_committed} <= rows "
                "checked, equality not judged")
    return ""
