"""Checks of the landed table: counts reconcile, no duplicate ``event_id`` (the curated table's
are :mod:`.curated_checks`).

Reconciliation compares three counts:

* the events recorded by the landing's manifests (one manifest per committed batch);
* the rows of the landed table (every data file below ``<root>/<channel>``);
* ``takes_committed`` of the channel, when the landing is its only taker
  (``[dagster] landing_only_taker``): every event a take removed must have landed. When several
  channels of the same name (a fleet's aggregators) land into one table, that count is compared
  with the manifests of this channel's identity only; manifests and rows with the whole table.

``takes_committed`` comes from the agent's live counters when the landing takes through an
agent, else from ``checkpoint.meta``, which is as of the last checkpoint: a landing that
committed after it makes the channel's count lag behind the manifests. The check then waits up
to ``checkpoint_wait_seconds`` for a newer checkpoint and, if none comes, judges only what
cannot lag (takes at the checkpoint <= manifest events) and says so in its description.
A landing running while the check reads can make the counts differ for a moment: run the
checks after the landing (the landing job does).

A table on a local path is read with pyarrow (no JVM); ``start_spark`` is called only for a table
on HDFS or S3A, read through Spark's Hadoop client. A Delta or Iceberg table (``[landing] format``)
is judged from its own commits and current version instead, read by its library anywhere
(:mod:`.table_checks`).

Replication (``landed_fully_replicated``, WARN) is judged on HDFS only: every landed file (data
and manifests) must have the replicas it asks for and ask for at least the cluster's
``dfs.replication``. A file asks for what its *writer's* client is set to (Spark's defaults to
3), so a landing without ``spark.hadoop.dfs.replication`` (or ``HADOOP_CONF_DIR``) writes files a
one-DataNode cluster can never replicate, and a client set lower than the cluster writes fewer
copies than the cluster promises.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..channel.checkpoint import read_checkpoint_meta
from ..channel.tools.common import lock_state
from ..errors import IngestError
from ..land.storage import local_path, locate
from .landing import agent_status
from .settings import ChannelSpec, OrchestrationSettings
from .table_checks import LastLanding, TakenCount, duplicates_verdict, files_verdict, reconcile_table, table_duplicates
from .table_scan import scan_event_ids
from .verdict import PathValue, Verdict, verdict

if TYPE_CHECKING:
    from ..land.config import LandingConfig
    from ..land.storage.hadoop_replication import FileReplication, ReplicationReport

__all__ = ["LastLanding", "ManifestTotals", "TakenCount", "landed_files_per_partition", "landed_fully_replicated",
           "landed_no_duplicate_event_ids", "landed_reconciles", "manifest_totals", "session_for", "taken_from_agent",
           "taken_from_checkpoint"]

StartSpark = Callable[[], Any]  # starts (or returns) the Spark session of the run


class ManifestTotals:
    """What the manifests of one table add up to; ``by_channel``: events per channel identity (32
    hex digits): several channels of the same name (a fleet's aggregators) may land into one table."""

    def __init__(self, batches: int, events: int, newest_commit_unix_ns: int,
                 by_channel: dict[str, int] | None = None) -> None:
        self.batches, self.events, self.newest_commit_unix_ns = batches, events, newest_commit_unix_ns
        self.by_channel = by_channel if by_channel is not None else {}


def session_for(root: str, start_spark: StartSpark) -> Any:
    """A Spark session for a table that is not on a local path (HDFS, S3A: read through Spark's
    Hadoop client); None for a local one, which pyarrow reads without a JVM."""
    return None if local_path(root) is not None else start_spark()


def manifest_totals(root: str, channel: str, spark: Any = None) -> ManifestTotals:
    """Batches, events and the newest manifest's creation time (read with pyarrow, no Spark,
    unless ``spark`` is given: a non-local root is then read through its Hadoop client)."""
    import pendulum

    from ..land.manifest import read_manifests

    manifests = read_manifests(root, channel, spark=spark, storage="auto" if spark is not None else "arrow")
    newest = max((pendulum.parse(m.created) for m in manifests), default=None)
    newest_ns = int(newest.timestamp() * 1e9) if isinstance(newest, pendulum.DateTime) else 0
    by_channel: dict[str, int] = {}
    for m in manifests:
        by_channel[m.channel_id] = by_channel.get(m.channel_id, 0) + m.count
    return ManifestTotals(len(manifests), sum(m.count for m in manifests), newest_ns, by_channel)


def landed_no_duplicate_event_ids(spec: ChannelSpec, settings: OrchestrationSettings, landed_root: str,
                                  start_spark: StartSpark, *, landing: LandingConfig | None = None) -> Verdict:
    """Every ``event_id`` occurs once in the landed table ``<landed_root>/<channel>``; with
    ``landing`` (its format and catalog), a Delta or Iceberg table's current version."""
    if landing is not None and landing.format != "parquet":
        from ..land.tables.reading import open_reader

        reader = open_reader(landing.model_copy(update={"root": landed_root}), spec.name)
        return table_duplicates("landed_no_duplicate_event_ids", settings, reader, "landed table")
    root = landed_root.rstrip("/")
    return _no_duplicates("landed_no_duplicate_event_ids", settings, f"{root}/{spec.name}", "landed table",
                          session_for(root, start_spark))


def _no_duplicates(check: str, settings: OrchestrationSettings, table_uri: str, what: str,
                   spark: Any = None) -> Verdict:
    """No ``event_id`` occurs twice in the table (counted over the table and per partition);
    ``spark``: the session whose Hadoop client reads a non-local table."""
    table = locate(table_uri, spark)
    return duplicates_verdict(check, settings, scan_event_ids(table), what, table.uri)


def taken_from_agent(status: dict[str, object]) -> TakenCount:
    """From the agent's live counters (``AgentClient.status``): exact at the time of the call."""
    live = status.get("live")
    assert isinstance(live, dict)
    channel_id = status.get("channel_id")
    return TakenCount(int(live["takes_committed"]), "agent status (live counters)", True,
                      str(channel_id).replace("-", "") if channel_id else None)


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
            return TakenCount(info.takes_committed, f"checkpoint.meta {info.checkpoint_id}", current,
                              info.channel_id.replace("-", ""))
        time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))


def landed_files_per_partition(spec: ChannelSpec, settings: OrchestrationSettings, landing: LandingConfig,
                               start_spark: StartSpark) -> Verdict:
    """At most ``max_files_per_partition`` data files per partition of the landed table (WARN)."""
    from ..land.tables.reading import open_reader

    spark = session_for(landing.root, start_spark) if landing.format == "parquet" else None
    return files_verdict(settings, open_reader(landing, spec.name, spark))


def landed_reconciles(spec: ChannelSpec, settings: OrchestrationSettings, landing: LandingConfig,
                      start_spark: StartSpark, token: str | None = None, *,
                      last: LastLanding | None = None) -> Verdict:
    """Manifest events == landed rows (== takes_committed when ``landing_only_taker``); for a Delta
    or Iceberg table, :func:`~.table_checks.reconcile_table` (``last``: the newest landing the
    orchestrator recorded). An agent that does not answer is a failing verdict with the reason,
    not an exception."""
    if landing.format != "parquet":
        return _reconcile_format(spec, settings, landing, token, last)
    session = session_for(landing.root, start_spark)
    totals = manifest_totals(landing.root, spec.name, session)
    taken, unavailable = _taken(spec, settings, landing, token, totals.newest_commit_unix_ns) \
        if settings.landing_only_taker else (None, None)
    return _reconcile(settings, f"{landing.root}/{spec.name}", totals, taken, session, unavailable=unavailable)


def _reconcile_format(spec: ChannelSpec, settings: OrchestrationSettings, landing: LandingConfig,
                      token: str | None, last: LastLanding | None) -> Verdict:
    from ..land.tables.reading import open_reader

    reader = open_reader(landing, spec.name)
    newest_ns = max((c.timestamp_ms for c in reader.commits()), default=0) * 1_000_000
    taken, unavailable = _taken(spec, settings, landing, token, newest_ns) if settings.landing_only_taker \
        else (None, None)
    channel_id = taken.channel_id if taken is not None else _channel_id(spec)
    return reconcile_table(settings, reader, taken, channel_id, unavailable=unavailable, last=last)


def _taken(spec: ChannelSpec, settings: OrchestrationSettings, landing: LandingConfig, token: str | None,
           newest_ns: int) -> tuple[TakenCount | None, str | None]:
    """``takes_committed``: the agent's live counters, else ``checkpoint.meta``; or why it could not be read."""
    try:
        status = agent_status(spec, landing, token)
    except IngestError as err:  # the agent is down or refuses: a verdict, not a crash of the check
        where = f"at {landing.agent}" if landing.agent else "that owns the channel"
        return None, (f"the channel's takes_committed could not be read from the agent {where} ({err}); start the "
                      "agent (or fix [landing] agent) and run the check again")
    if status is not None:
        return taken_from_agent(status), None
    return taken_from_checkpoint(spec, newest_ns, settings.checkpoint_wait_seconds), None


def _channel_id(spec: ChannelSpec) -> str | None:
    """The channel's identity from ``checkpoint.meta`` (None where it cannot be read here)."""
    try:
        info = read_checkpoint_meta(spec.checkpoint_dir) if spec.checkpoint_dir else None
    except (OSError, IngestError):
        return None
    return info.channel_id.replace("-", "") if info is not None else None


def _takes_note(totals: ManifestTotals, taken: TakenCount | None) -> str:
    if taken is None or not taken.current:
        return ""
    if len(totals.by_channel) > 1 and taken.channel_id:
        return (f"; {totals.by_channel.get(taken.channel_id, 0)} of them from this channel "
                f"({len(totals.by_channel)} channels land into the table) = takes committed by the channel")
    return " = takes committed by the channel"


def _reconcile(settings: OrchestrationSettings, table_uri: str, totals: ManifestTotals, taken: TakenCount | None,
               spark: Any = None, *, unavailable: str | None = None) -> Verdict:
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
        own, whose = totals.events, ""
        if len(totals.by_channel) > 1 and taken.channel_id:  # a table several channels land into
            own, whose = totals.by_channel.get(taken.channel_id, 0), f" of channel {taken.channel_id}"
            metadata.update(channels_in_table=len(totals.by_channel), manifest_events_of_channel=own)
        if taken.current and taken.takes_committed != own:
            problems.append(f"the channel committed takes of {taken.takes_committed} events ({taken.source}), "
                            f"the manifests{whose} record {own}")
        elif not taken.current and taken.takes_committed > own:
            problems.append(f"the channel had committed takes of {taken.takes_committed} events ({taken.source}), "
                            f"more than the {own} the manifests{whose} record")
        elif not taken.current:
            note = (f"; {taken.source} predates the last landing: takes_committed {taken.takes_committed} <= "
                    "manifest events checked, equality not judged")
    description = "; ".join(problems) if problems else (
        f"{totals.events} events in {totals.batches} manifests = {scan.rows} landed rows"
        + _takes_note(totals, taken) + note)
    return verdict("landed_reconciles", settings, passed=not problems, description=description, metadata=metadata)


_REPLICATED = "landed_fully_replicated"


def landed_fully_replicated(spec: ChannelSpec, settings: OrchestrationSettings, landed_root: str,
                            start_spark: StartSpark) -> Verdict:
    """Every file of the landed table ``<landed_root>/<channel>`` (data and manifests) on HDFS has
    the replicas it asks for, and asks for at least the cluster's replication (module
    docstring). A root that is not on HDFS passes with a note, without starting Spark."""
    table = f"{landed_root.rstrip('/')}/{spec.name}"
    if urlparse(table).scheme != "hdfs":
        return verdict(_REPLICATED, settings, passed=True,
                       description=f"the landed table {table} is not on HDFS: no replication to judge",
                       metadata={"table": PathValue(table), "on_hdfs": False})
    from ..land.storage.hadoop_replication import read_replication

    return _replication_verdict(settings, table, read_replication(table, start_spark()))


def _replication_verdict(settings: OrchestrationSettings, table: str, report: ReplicationReport) -> Verdict:
    cluster, live = report.cluster_replication, report.live_datanodes
    short = [f for f in report.files if f.replicas < f.replication]
    below = [f for f in report.files if f.replication < cluster]
    under = {f.path: f for f in [*short, *below]}
    asked: dict[str, int] = {}
    for f in report.files:
        asked[str(f.replication)] = asked.get(str(f.replication), 0) + 1
    metadata: dict[str, Any] = {
        "table": PathValue(table), "on_hdfs": True, "files": len(report.files), "under_replicated": len(under),
        "cluster_replication": cluster, "client_replication": report.client_replication,
        "live_datanodes": live if live is not None else "unknown (the DataNode report needs a superuser)",
        "files_by_replication": asked,
        "sample": [f"{f.path}: {f.replicas} of {f.replication} replicas" for f in list(under.values())[:5]]}
    nodes = f", {live} live DataNodes" if live is not None else ""
    if not under:
        description = (f"{len(report.files)} landed files on HDFS, each with the replicas it asks for "
                       f"({', '.join(sorted(asked)) or '-'}; cluster replication {cluster}{nodes})")
    else:
        description = (f"{len(under)} of {len(report.files)} landed files are under-replicated: "
                       + "; ".join(_replication_causes(short, below, cluster, live)) + "; " + _replication_fix(
                           short, below, cluster, table))
    return verdict(_REPLICATED, settings, passed=not under, description=description, metadata=metadata)


def _replication_causes(short: list[FileReplication], below: list[FileReplication], cluster: int,
                        live: int | None) -> list[str]:
    causes = []
    if short:
        worst = min(short, key=lambda f: f.replicas - f.replication)
        beyond = f", more than the {live} live DataNodes" if live is not None and worst.replication > live else ""
        causes.append(f"{len(short)} have fewer replicas than they ask for (e.g. {worst.path}: {worst.replicas} of "
                      f"{worst.replication}{beyond})")
    if below:
        causes.append(f"{len(below)} ask for {min(f.replication for f in below)} replicas, below the cluster's "
                      f"dfs.replication {cluster}")
    return causes


def _replication_fix(short: list[FileReplication], below: list[FileReplication], cluster: int, table: str) -> str:
    """The way out: the writing client's setting when files ask for other than the cluster's
    replication, else the DataNodes (the NameNode re-replicates once enough of them are live)."""
    if below or any(f.replication > cluster for f in short):
        return (f"a file gets the replication of the client that writes it: set spark.hadoop.dfs.replication = "
                f"{cluster} in the landing's [spark.conf] (or dfs.replication in HADOOP_CONF_DIR's hdfs-site.xml), and "
                f"fix existing files with 'hdfs dfs -setrep {cluster} {table}'")
    return ("the NameNode re-replicates blocks while enough DataNodes are live: bring back the DataNodes that were "
            "lost (hdfs dfsadmin -report) or free space on the live ones")
