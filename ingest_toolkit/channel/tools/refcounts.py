"""The reference counts of a checkpoint, recounted, and the deletion floor they imply.

Two rules that ``channel verify`` (offline) and the Dagster channel checks (on a live channel)
both judge a checkpoint by, kept here once:

* :func:`recount`: ``checkpoint.meta`` records, per log segment, how many events point into it;
  a recount from the checkpoint's own queue file and open takes must give the same numbers, and
  the queue size must be the number of those events.
* :func:`deletion_floor`: the channel deletes a segment once it lies below both the checkpoint's
  log position and every segment an event still points into (queued, in an open take, or
  spilled by an open put): :func:`ingest_toolkit.channel.checkpointer.deletion_floor`, the rule
  the channel deletes by, applied to the recorded and the recounted references. A segment below the
  floor that still exists is an orphan; a drained one between needed ones is kept by design.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .. import checkpointer
from ..checkpoint import Checkpoint
from ..format import pointer_log_id
from ..txnframes import count_refs

__all__ = ["DeletionFloor", "Recount", "deletion_floor", "recount"]


@dataclass(frozen=True, slots=True)
class Recount:
    recorded: dict[int, int]  # log id -> events, as checkpoint.meta records them (zeros left out)
    recounted: Counter[int]  # log id -> events, from the queue file and the open takes
    queue_size_recorded: int
    queue_size_recounted: int

    @property
    def mismatches(self) -> dict[int, tuple[int, int]]:
        """Log id -> (recorded, recounted) for every segment whose two counts differ."""
        return {log_id: (self.recorded.get(log_id, 0), self.recounted[log_id])
                for log_id in sorted(set(self.recorded) | set(self.recounted))
                if self.recorded.get(log_id, 0) != self.recounted[log_id]}

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.queue_size_recorded == self.queue_size_recounted


def recount(checkpoint: Checkpoint) -> Recount:
    """The reference counts ``checkpoint.meta`` records beside a recount of the same checkpoint."""
    counted: Counter[int] = Counter(count_refs(checkpoint.queue))
    for _txn, pointers in checkpoint.takes:
        counted.update(pointer_log_id(p) for p in pointers)
    meta = checkpoint.meta
    return Recount(recorded={log_id: n for log_id, n in meta.log_refcounts.items() if n}, recounted=counted,
                   queue_size_recorded=meta.queue_size,
                   queue_size_recounted=len(checkpoint.queue) + sum(len(p) for _t, p in checkpoint.takes))


@dataclass(frozen=True, slots=True)
class DeletionFloor:
    log_id: int  # segments with a smaller id are deleted after this checkpoint
    needed: frozenset[int]  # segments an event points into (recorded or recounted, spilled puts too)


def deletion_floor(checkpoint: Checkpoint, counts: Recount | None = None,
                   backup_floor: int | None = None) -> DeletionFloor:
    """The floor after ``checkpoint``: ``min(checkpoint log id, every needed segment)``, and at
    most ``backup_floor`` (the floor of the backup copy, which keeps what it needs).

    A segment counts as needed when either the recorded or the recounted references point into
    it (a disagreement must not make a needed segment look deletable). ``counts``: the recount,
    when the caller made one already.
    """
    counts = recount(checkpoint) if counts is None else counts
    either = {log_id: 1 for log_id in (*counts.recorded, *counts.recounted)}
    floor = checkpointer.deletion_floor(checkpoint.meta.log_id, either, checkpoint.puts)
    if backup_floor is not None:
        floor = min(floor, backup_floor)
    needed = set(either) | {pointer_log_id(p) for _txn, pointers in checkpoint.puts for p in pointers}
    return DeletionFloor(floor, frozenset(needed))
