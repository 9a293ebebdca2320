"""The tools' reports as rich tables for people (their JSON documents are in :mod:`.reports`,
re-exported here)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from ...numbers import count, number
from .reports import inspect_json, repair_json, verify_json

if TYPE_CHECKING:
    from ..incidents import Incident
    from .reports import InspectReport, LogFileInfo, RepairReport, SegmentPlan, VerifyReport
    from .scan import Piece
    from .txnsim import DroppedTxn

__all__ = ["inspect_json", "print_incidents", "print_inspect", "print_repair", "print_verify", "repair_json",
           "verify_json"]


# -- people -------------------------------------------------------------------------------
def print_inspect(console: Console, report: InspectReport, *, live: str | None = None) -> None:
    """The report; ``live``: a note printed first, for a channel a process owns right now (its
    figures are a checkpoint's, not the current state: the note says how old, and where to look)."""
    if live:
        console.print(f"[bold yellow]{live}[/bold yellow]", highlight=False)
    summary = _kv_table("channel")
    summary.add_row("channel id", report.channel_id or "unknown (no channel.id)")
    summary.add_row("owner", _owner(report))
    cp = report.checkpoint
    if cp is None:
        summary.add_row("checkpoint", report.checkpoint_problem or "none yet (the channel has not checkpointed)")
    else:
        fill = report.fill_percent
        summary.add_row("checkpoint", f"#{cp.checkpoint_id}, written {_duration(cp.age_seconds(report.now_ns))} ago "
                                      f"(interval {cp.checkpoint_interval_s:g} s)")
        summary.add_row("queue", f"{cp.queue_size:,} events ({cp.inflight_takes:,} in open takes), "
                                 f"{cp.inflight_puts:,} in open puts")
        summary.add_row("capacity", f"{cp.capacity:,} ({fill:.1f} % used)" if fill is not None else "unknown")
        summary.add_row("last sequence", str(cp.last_seq))
        summary.add_row("backlog age", _duration(cp.backlog_age_seconds(report.now_ns)) if cp.queue_size else "-")
        summary.add_row("log position", f"log-{cp.log_position[0]} @ {cp.log_position[1]:,}")
        summary.add_row("committed", f"{cp.puts_committed:,} put, {cp.takes_committed:,} taken")
    backup = report.backup
    if backup is not None:
        state = " (current)" if backup.current else " (older than the checkpoint: a copy failed)"
        summary.add_row("backup", f"[red]{backup.problem}[/red] ({backup.directory})" if backup.checkpoint_id is None
                        else f"#{backup.checkpoint_id}{state} in {backup.directory}")
    summary.add_row("log files", f"{len(report.logs)} ({_size(report.log_bytes)})")
    for problem in report.problems:
        summary.add_row("problem", f"[red]{problem}[/red]")
    console.print(summary)
    logs = Table(title="log files")
    for name in ("log", "size", "state", "frames", "seq range", "refs", "path"):
        logs.add_column(name, justify="left" if name in ("state", "path", "seq range") else "right")
    for i in report.logs:
        state = _log_state(i, newest=i is report.logs[-1], live=bool(report.locked))
        seqs = f"{i.first_seq}..{i.last_seq}" if i.first_seq else "-"
        logs.add_row(str(i.log_id), _size(i.size), state, _opt(i.frames), seqs, _opt(i.refcount), i.path)
    console.print(logs)


def print_verify(console: Console, report: VerifyReport) -> None:
    where = f"checkpoint #{report.checkpoint_id}" if report.checkpoint_id else "no checkpoint"
    console.print(f"verified {count(report.segments, 'segment')}, {where}; full replay: "
                  f"{_opt(report.frames, 'frame')}, {_opt(report.queue_size, 'event')} queued")
    for note in report.notes:
        console.print(f"note: {note}")
    if report.ok:
        console.print("[green]OK[/green]: no problems found")
        return
    table = Table(title=f"{count(len(report.findings), 'problem')} found")
    table.add_column("problem")
    table.add_column("details")
    for f in report.findings:
        table.add_row(f.kind, f.message)
    console.print(table)


def print_repair(console: Console, report: RepairReport) -> None:
    if not report.changed:
        console.print(f"[green]nothing to repair[/green]: {count(report.scanned, 'segment')} scanned, no damage found")
        return
    table = Table(title=f"repair ({'dry run, nothing changed' if report.dry_run else 'applied'})")
    for name in ("file", "offset", "length", "action", "frames", "reason"):
        table.add_column(name, justify="right" if name in ("offset", "length") else "left")
    for plan in report.segments:
        _plan_rows(table, plan)
    console.print(table)
    for d in report.dropped:
        console.print(_dropped_line(d, report.dry_run))
    loose = [f"{e.seq}?" for e in report.unattributed if not e.already_taken]
    if loose:
        console.print(f"damaged PUT frames of no known transaction (possibly uncommitted): seq {', '.join(loose)}")
    console.print(f"events lost: {number(report.events_lost)}")
    if report.dry_run:
        console.print("run again with --yes to apply; backups of every changed file are kept")
        return
    for backup in report.backups:
        console.print(f"backup: {backup}")
    if report.checkpoint_removed:
        console.print("checkpoint.meta deleted: the next open rebuilds the state by a full replay")
    console.print(f"full replay after the repair: OK, {_opt(report.queue_after, 'event')} queued")


def _plan_rows(table: Table, plan: SegmentPlan) -> None:
    if plan.header_lost:
        table.add_row(plan.path, "0", str(len(plan.header)), "rebuild header", "", plan.header_lost)
    for d in plan.damage:
        action = "fix .meta (bytes missing)" if d.missing else "truncate" if d.tail else "NOOP"
        frames = ", ".join(_piece_text(p) for p in d.frames[:6]) + (" ..." if len(d.frames) > 6 else "")
        table.add_row(plan.path, str(d.offset), str(d.length), action, frames or "unreadable", d.reason)
    for c in plan.commits:
        table.add_row(plan.path, str(c.offset), str(c.length), "NOOP", f"COMMIT txn {c.txn}",
                      "its transaction lost frames")
    if plan.meta_changes and not plan.damage and not plan.commits:
        why = "unreadable .meta" if plan.meta_broken else "no .meta" if plan.meta is None else ".meta disagrees"
        table.add_row(plan.path, "-", "-", "write .meta", "", f"{why}: data_end {plan.end}")


def _piece_text(p: Piece) -> str:
    seq = f" seq {p.seq}" if p.type_name.startswith("PUT") else ""
    return f"{p.type_name} txn {p.txn}{seq}"


def _dropped_line(d: DroppedTxn, dry_run: bool) -> str:
    verb = "would be dropped" if dry_run else "dropped"
    if d.kind == "take":
        returned = "an unknown number of events" if d.returned is None else count(d.returned, "event")
        return (f"take transaction {d.txn_id} {verb} ({d.cause}): {returned} it had taken go back to "
                "the queue and will be delivered again")
    lost = [e for e in d.events if not e.already_taken]
    text = f"put transaction {d.txn_id} {verb} ({d.cause}): {count(d.events_lost, 'event')} lost"
    verified = [e.seq for e in lost if e.verified]
    damaged = [f"{e.seq}?" for e in lost if not e.verified]
    if verified:
        text += f", seq {_seq_ranges(verified)}"
    if damaged:
        text += f"; seq {', '.join(damaged)} read from damaged frames (unverified)"
    if d.unreadable:
        text += f", {d.unreadable} of them unreadable"
    taken = sum(e.already_taken for e in d.events)
    if taken:
        text += f"; {taken} more had already been taken (delivered, not lost)"
    return text


def _seq_ranges(seqs: list[int]) -> str:
    """``1..5, 9``: consecutive numbers as runs."""
    runs: list[list[int]] = []
    for seq in sorted(seqs):
        if runs and seq == runs[-1][-1] + 1:
            runs[-1].append(seq)
        else:
            runs.append([seq])
    return ", ".join(f"{r[0]}..{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _log_state(info: LogFileInfo, *, newest: bool, live: bool) -> str:
    if info.problem:
        return f"[red]{info.problem}[/red]"
    state = "sealed" if info.sealed else "being written" if newest and live else "not sealed"
    return state if info.key_id is None else f"{state}, key {info.key_id}"


def print_incidents(console: Console, checkpoint_dir: str, incidents: list[Incident]) -> None:
    """The incidents of a channel, open ones first, and what to do about the open ones."""
    if not incidents:
        console.print(f"no incidents: recovery and repairs never cut anything from the log of {checkpoint_dir}")
        return
    table = Table(title=f"incidents of {checkpoint_dir}")
    for column in ("id", "state", "what", "segment @ offset", "events", "acknowledged data", "set aside in"):
        table.add_column(column)
    for i in incidents:
        state = "OPEN" if i.open else f"acknowledged: {i.acknowledged_note or '-'}"
        table.add_row(str(i.id), state, i.kind, f"{i.segment} @ {i.offset:,}",
                      f"{i.events:,} of {i.transactions:,} txns", "possibly" if i.acknowledged_data else "no",
                      i.quarantine or "-")
    console.print(table)
    still_open = [i for i in incidents if i.open]
    if still_open:
        console.print(f"{len(still_open)} open: see docs/runbook.md#recovery_losses_acknowledged, then "
                      "'ingest-toolkit channel acknowledge --incident ID --note ...' (or --all)")


def _kv_table(title: str) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    return table


def _owner(report: InspectReport) -> str:
    if report.locked is None:
        return f"unknown (lock file names {report.holder or 'nobody'})"
    return f"running ({report.holder or 'unknown pid'})" if report.locked else "none (stopped)"


def _opt(value: int | None, noun: str | None = None) -> str:
    if value is None:
        return "-" if noun is None else f"- {noun}s"
    return number(value) if noun is None else count(value, noun)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
