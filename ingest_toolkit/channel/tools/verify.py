"""``channel verify``: an offline consistency check of checkpoint and logs. Changes nothing.

Checks, with the directories locked (a live owner is refused):

* the checkpoint loads; its reference counts equal a recount from the queue file and the open
  takes, and its queue size matches;
* every segment an event refers to exists; no segment lies below the deletion floor unreferenced
  (an *orphan*: the deletion rule would have removed it); every segment but the newest is sealed;
* the state from checkpoint + replay of the frames after it equals the state from an independent
  full replay of every segment; commit tags found by both agree (the full replay cannot see tags
  of deleted segments, and the checkpoint forgets tags out of the channel's window, so only the
  tags both know are compared);
* when a replay fails, every segment is scanned and each damaged range reported.
"""

from __future__ import annotations

import os
import uuid

from ...errors import ChannelIdentityError, CheckpointInvalid, CorruptLogError, TailRefusedError
from .. import checkpointer
from ..backup import usable_backup
from ..checkpoint import Checkpoint, load_checkpoint, written_through
from ..crypto import KeyChain
from ..format import SEGMENT_HEADER_SIZE as HEADER
from ..format import pointer_log_id, pointer_offset
from ..fs import FileSystem, OsFileSystem
from ..incidents import IncidentsUnreadable, load_incidents, open_incidents
from ..proto import channel_pb2 as pb
from ..replay import ReplayResult, replay
from ..segment import read_meta, survey_headers, vanished_segments, written_proof
from .common import ChannelDirs, PhaseProgress, offline, read_channel_id, segments_of
from .refcounts import Recount, deletion_floor, recount
from .reports import Finding, VerifyReport
from .scan import Damage, header_error, open_image, walk, without_torn_tail

__all__ = ["Finding", "VerifyReport", "verify_channel"]


def verify_channel(checkpoint_dir: str, data_dirs: list[str], *, fs: FileSystem | None = None,
                   progress: PhaseProgress | None = None, backup_dir: str | None = None,
                   keys: KeyChain | None = None) -> VerifyReport:
    """Check a stopped channel; ``report.ok`` tells whether anything was found.

    ``backup_dir``: its ``backup_checkpoint_dir``; by default the one ``checkpoint.meta`` names.
    ``keys`` opens encrypted segments (their PUT frames are authenticated); a segment whose key is
    missing or wrong raises EncryptionKeyError before anything is checked."""
    dirs = ChannelDirs.of(checkpoint_dir, data_dirs)
    keys = keys or KeyChain(None)
    with offline(dirs, "verify"):
        keys.check_segments(fs or OsFileSystem(), segments_of(dirs))
        return _Verifier(dirs, fs or OsFileSystem(), progress, backup_dir, keys).run()


class _Verifier:
    def __init__(self, dirs: ChannelDirs, fs: FileSystem, progress: PhaseProgress | None,
                 backup_dir: str | None = None, keys: KeyChain | None = None) -> None:
        self.dirs, self.fs, self.progress, self.backup_dir = dirs, fs, progress, backup_dir
        self.keys = keys or KeyChain(None)
        self.report = VerifyReport(dirs.checkpoint_dir, list(dirs.data_dirs))
        self.segments = segments_of(dirs)
        self.errors: list[CorruptLogError] = []
        self.proof = written_through(dirs.checkpoint_dir)
        self.lost: set[str] = set()  # segments proven written that lost their header

    def run(self) -> VerifyReport:
        report = self.report
        report.segments = len(self.segments)
        self._check_sealed()
        checkpoint = self._checkpoint()
        backup_floor = self._check_backup(checkpoint)
        resumed = None
        if checkpoint is not None:
            counts = self._check_refcounts(checkpoint)
            self._check_files(checkpoint, counts, backup_floor)
            resumed = self._replay("replay from checkpoint", checkpoint)
        else:
            report.notes.append("no usable checkpoint: the logs were checked by a full replay only")
        full = self._replay("full replay", None)
        if full is not None:
            report.frames, report.queue_size = full.stats.frames, len(full.queue)
            self._check_identity(full)
            self._check_cut(full)
        self._note_incidents()
        if self.errors:
            self._scan_damage()
        if resumed is not None and full is not None:
            self._compare(resumed, full)
        return report

    # -- checkpoint -------------------------------------------------------------------------
    def _checkpoint(self) -> Checkpoint | None:
        channel_id, problem = read_channel_id(self.dirs.checkpoint_dir)
        self.report.channel_id = channel_id
        if problem:
            self.report.add("channel_id", problem)
        try:
            checkpoint = load_checkpoint(self.dirs.checkpoint_dir, uuid.UUID(channel_id).bytes if channel_id else None,
                                         check_counts=False)  # recounted below, each difference reported
        except CheckpointInvalid as err:
            self.report.add("checkpoint_unusable", f"{err} (the next open rebuilds the state by a full replay)",
                            path=err.path)
            return None
        except ChannelIdentityError as err:
            self.report.add("channel_identity", str(err))
            return None
        if checkpoint is not None:
            self.report.checkpoint_id = checkpoint.meta.checkpoint_id
            self.report.log_position = (checkpoint.meta.log_id, checkpoint.meta.log_offset)
        return checkpoint

    def _check_backup(self, checkpoint: Checkpoint | None) -> int | None:
        """Report the backup copy; returns the floor of the segments it keeps (None: keeps none)."""
        directory = self.backup_dir or (checkpoint.meta.backup_dir if checkpoint is not None else "")
        if not directory:
            return None
        channel_id = uuid.UUID(self.report.channel_id).bytes if self.report.channel_id else None
        backup, problem = usable_backup(self.fs, directory, channel_id, dict(self.segments))
        if backup is None:
            if problem:
                self.report.add("backup_unusable", f"{problem}; opening the channel skips it and the next checkpoint "
                                "replaces it", path=directory)
            else:
                self.report.notes.append(f"no backup copy in {directory} yet")
            return None
        backup_id = backup.meta.checkpoint_id
        if checkpoint is not None and checkpoint.meta.checkpoint_id == backup_id:
            self.report.notes.append(f"backup #{backup_id} in {directory}: a copy of the checkpoint in force")
        else:
            self.report.notes.append(f"backup #{backup_id} in {directory} is older than the checkpoint in force "
                                     "(a copy failed): the segments it needs are kept until a copy succeeds")
        return checkpointer.deletion_floor(backup.meta.log_id, dict(backup.meta.log_refcounts), backup.puts)

    def _check_refcounts(self, checkpoint: Checkpoint) -> Recount:
        counts = recount(checkpoint)
        for log_id, (recorded, recounted) in counts.mismatches.items():
            self.report.add("refcount_mismatch",
                            f"checkpoint.meta records {recorded} events in log-{log_id}, "
                            f"the queue and open takes hold {recounted} (the next open refuses this checkpoint "
                            "and recounts by a full replay)",
                            log_id=log_id, recorded=recorded, recounted=recounted)
        recorded_size, size = counts.queue_size_recorded, counts.queue_size_recounted
        if recorded_size != size:
            self.report.add("queue_size_mismatch", f"checkpoint.meta records a queue of {recorded_size} "
                            f"events, its queue file and open takes hold {size} (the next open refuses this "
                            "checkpoint and recounts by a full replay)",
                            recorded=recorded_size, recounted=size)
        return counts

    def _check_files(self, checkpoint: Checkpoint, counts: Recount, backup_floor: int | None = None) -> None:
        floor = deletion_floor(checkpoint, counts, backup_floor)
        present = {log_id for log_id, _path in self.segments}
        dirs = self.dirs.data_dirs
        for log_id in sorted(floor.needed - present):
            path = os.path.join(dirs[log_id % len(dirs)], f"log-{log_id}")
            self.report.add("missing_log", f"{path} is missing but queued or in-flight events point into it",
                            log_id=log_id, path=path)
        for log_id, path in self.segments:
            if log_id < floor.log_id:
                self.report.add("orphaned_log", f"{path} lies below the deletion floor log-{floor.log_id} and no "
                                "event points into it: the deletion rule would have removed it (left over by a crash "
                                "before the deletion, or copied back in)", log_id=log_id, path=path)

    # -- logs -------------------------------------------------------------------------------
    def _check_sealed(self) -> None:
        present = {log_id for log_id, _path in self.segments}
        for path, proof in vanished_segments(self.fs, self.dirs.data_dirs, present, self.proof):
            self.report.add("lost_segment", f"{path} is missing, but {proof}: opening the channel refuses it. "
                            "Restore it from a backup, or see what 'ingest-toolkit channel repair --dry-run' would "
                            "lose", path=path)
        lost, later = survey_headers(self.segments)
        for index, (log_id, path) in enumerate(self.segments):
            self._check_header(log_id, path, lost[index], later_written=later[index])
            try:
                sealed = read_meta(path) is not None
            except CorruptLogError as err:
                self.report.add("meta_unreadable", f"{path}.meta cannot be read ({err}); opening the channel "
                                "fails on it: 'channel repair' rebuilds it from the segment", log_id=log_id, path=path)
                continue
            if not sealed and index < len(self.segments) - 1:
                self.report.add("unsealed_log", f"{path} has no .meta although it is not the newest segment",
                                log_id=log_id, path=path)

    def _check_header(self, log_id: int, path: str, damage: str | None, *, later_written: bool) -> None:
        proof = damage and written_proof(path, log_id, later_written=later_written, checkpoint=self.proof)
        if damage and proof:
            self.lost.add(path)
            meta = _lenient_meta(path)
            held = f" (sealed with {meta.data_end} bytes, {meta.frames} frames)" if meta else ""
            self.report.add("lost_segment", f"{path} {damage}{held}, but {proof}: opening the channel refuses it. "
                            "Restore it from a backup, or see what 'ingest-toolkit channel repair --dry-run' would "
                            "lose", log_id=log_id, path=path)

    def _replay(self, phase: str, start: Checkpoint | None) -> ReplayResult | None:
        def report_progress(done: int, total: int) -> None:
            if self.progress:
                self.progress(phase, done, total)

        try:
            return replay(self.fs, list(self.dirs.data_dirs), start=start, progress=report_progress,
                          checkpoint=self.proof, keys=self.keys)
        except TailRefusedError as err:  # what the next open says (with the default recovery_mode)
            if not any(f.kind == "damaged_tail" for f in self.report.findings):
                self.report.add("damaged_tail", str(err), path=err.path, offset=err.offset, events=err.events,
                                transactions=err.transactions)
        except CorruptLogError as err:
            if not err.path.endswith(".meta"):
                self.errors.append(err)
            elif not any(f.kind == "meta_unreadable" for f in self.report.findings):
                # a damaged .meta, normally already reported by _check_sealed
                self.report.add("meta_unreadable", f"{phase} failed on an unreadable .meta file ({err})")
        except ChannelIdentityError as err:
            self.report.add("channel_identity", str(err))
        return None

    def _check_cut(self, full: ReplayResult) -> None:
        """What the next open cuts from the newest segment: a finding when it drops events (open
        records an incident for it), else a note. A tail open refuses is a replay error."""
        cut = full.cut
        if cut is None:
            return
        if not cut.events:
            self.report.notes.append(f"the newest segment ends in a {cut.describe()}; the next open cuts it and "
                                     "loses nothing")
            return
        self.report.add("torn_tail", f"the next open cuts a {cut.describe()}; none of them was acknowledged under "
                        "durability 'fsync' (a machine crash interrupted the write), and the cut is recorded as an "
                        "incident", path=cut.path, offset=cut.offset, events=cut.events, transactions=cut.transactions)

    def _note_incidents(self) -> None:
        try:
            found = open_incidents(load_incidents(self.dirs.checkpoint_dir))
        except IncidentsUnreadable as err:
            self.report.add("incidents_unreadable", str(err))
            return
        if found:
            self.report.notes.append(f"{len(found)} open incidents ({sum(i.events for i in found)} events cut by "
                                     "earlier recoveries or repairs): 'ingest-toolkit channel incidents' lists them")

    def _check_identity(self, full: ReplayResult) -> None:
        channel_id = self.report.channel_id
        if full.channel_id and channel_id and str(uuid.UUID(bytes=full.channel_id)) != channel_id:
            self.report.add("channel_identity", f"channel.id names {channel_id} but the segments belong to "
                            f"{uuid.UUID(bytes=full.channel_id)}")

    def _scan_damage(self) -> None:
        ranges: list[Damage] = []
        for index, (log_id, path) in enumerate(self.segments):
            ranges += self._scan_segment(log_id, path, newest=index == len(self.segments) - 1)
            if self.progress:
                self.progress("damage scan", index + 1, len(self.segments))
        for d in ranges:
            what = ", ".join(p.type_name for p in d.frames[:5]) + (" ..." if len(d.frames) > 5 else "")
            self.report.add("corrupt_frame", f"{d.path}: {d.length} damaged bytes at offset {d.offset} "
                            f"({d.reason}; frames: {what or 'unreadable'})"
                            f"{' at the end of the segment' if d.tail else ''}",
                            path=d.path, offset=d.offset, length=d.length, reason=d.reason)
        known = {f.data.get("path") for f in self.report.findings
                 if f.kind in ("unsealed_log", "meta_unreadable", "lost_segment")}
        for err in self.errors:
            if err.path not in known and not any(d.path == err.path and d.offset <= err.offset <= d.end
                                                 for d in ranges):
                hint = _MISSING_FRAMES_HINT if "frames are missing" in err.reason and not ranges else ""
                self.report.add("corrupt_log", str(err).split(". Nothing was skipped")[0] + hint,
                                path=err.path, offset=err.offset, reason=err.reason)

    def _scan_segment(self, log_id: int, path: str, *, newest: bool) -> list[Damage]:
        try:
            meta = read_meta(path)
        except CorruptLogError:
            meta = None  # reported by _check_sealed
        if path in self.lost:
            return []  # reported as lost_segment
        with open_image(path) as (image, size):
            if newest and (size < HEADER or bytes(image[:HEADER]) == bytes(HEADER)):
                return []  # creation never completed: recovery removes it, as replay ignores it
            problem = header_error(image)
            if problem:
                return [Damage(log_id, path, 0, min(size, 64), f"segment header: {problem}", tail=False)]
            opener = self.keys.opener(path, bytes(image[:HEADER]))
            items = list(walk(image, size, log_id, path, data_end=meta.data_end if meta else None,
                              opener=opener))
            if newest and meta is None:
                items = without_torn_tail(items, image)
        return [item for item in items if isinstance(item, Damage)]

    def _compare(self, resumed: ReplayResult, full: ReplayResult) -> None:
        self._compare_tags(resumed, full)
        a, b = resumed.queue.to_array(), full.queue.to_array()
        if a == b:
            return
        if sorted(a) == sorted(b):
            self.report.notes.append("checkpoint + replay and the full replay hold the same events in a different "
                                     "order (concurrent take rollbacks can reorder the live queue; see log-format.md)")
            return
        only_checkpoint, only_full = set(a) - set(b), set(b) - set(a)
        differ = sorted(only_checkpoint | only_full)[:5]
        sample = ", ".join(f"log-{pointer_log_id(p)}@{pointer_offset(p)}" for p in differ)
        self.report.add("queue_mismatch", f"checkpoint + replay queues {len(a)} events, a full replay {len(b)}: "
                        f"{len(only_checkpoint)} only in the first, {len(only_full)} only in the second "
                        f"(e.g. {sample})", checkpoint_queue=len(a), full_replay_queue=len(b),
                        only_checkpoint=len(only_checkpoint), only_full_replay=len(only_full))


    def _compare_tags(self, resumed: ReplayResult, full: ReplayResult) -> None:
        mine, theirs = resumed.tags.as_dict(), full.tags.as_dict()
        differing = sorted(tag for tag in mine.keys() & theirs.keys() if mine[tag] != theirs[tag])
        if mine or theirs:
            self.report.notes.append(f"commit tags: {len(mine)} remembered by checkpoint + replay, {len(theirs)} "
                                     f"found by the full replay, {len(mine.keys() & theirs.keys())} by both")
        for tag in differing[:10]:
            a, b = mine[tag], theirs[tag]
            self.report.add("tag_mismatch", f"commit tag {tag!r}: checkpoint + replay records first seq {a.first_seq}, "
                            f"{a.count} events; the full replay first seq {b.first_seq}, {b.count} events",
                            tag=tag, checkpoint_first_seq=a.first_seq, full_replay_first_seq=b.first_seq)


def _lenient_meta(path: str) -> pb.SegmentMeta | None:
    try:
        return read_meta(path)
    except CorruptLogError:
        return None  # reported as meta_unreadable


_MISSING_FRAMES_HINT = (" (no damaged bytes were found: frames of this transaction are in a segment missing from "
                        "the middle of the log, so a full replay fails; restore that segment from a backup)")
