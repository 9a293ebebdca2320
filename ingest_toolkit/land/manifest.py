"""Per-batch manifests: the commit log of a channel's landed table.

Each landed batch is one manifest, a small JSON document named by its **commit number**:
``<root>/<channel>/_manifests/<commit:012d>.json``. A landing run commits its batch by
*creating* the next number's file exclusively (:meth:`Storage.create_exclusive`): of two runs
that try the same number one wins, and the other reads the winner's manifest before it tries the
next number. A run therefore commits only after it has seen every earlier commit, and it refuses
to commit seqs that an earlier manifest holds (:class:`CommitConflict`). That serial order, not
any lock or lease, is what keeps two landings of the same events out of the table: a take whose
lease ran out while Spark wrote, and whose events another landing took meanwhile, loses the race
cleanly.

Finding the manifests that may hold some seqs must not mean opening every manifest: after its
commit a run also writes an empty index entry ``_manifests/_index/<commit>-<first seq>-<last
seq>-<batch id>``, so one listing gives every batch's seq span and batch id. A crash between the
two leaves a commit without an entry; readers open such manifests themselves and recovery
writes the missing entries.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from .batches import event_id
from .errors import CommitConflict, LandingError
from .storage import Storage, open_storage
from .tables.base import Landed, overlap

__all__ = ["INDEX_DIR", "MANIFEST_DIR", "MANIFEST_FORMAT", "CommitConflict", "Landed", "LogEntry", "Manifest",
           "ManifestFile", "ManifestLog", "overlap", "read_manifests"]

MANIFEST_DIR = "_manifests"
INDEX_DIR = f"{MANIFEST_DIR}/_index"
MANIFEST_FORMAT = "ingest-toolkit/landing-manifest/2"
_COMMIT_NAME = re.compile(r"^(\d{12})\.json$")
_INDEX_NAME = re.compile(r"^(\d{12})-(\d{20})-(\d{20})-([A-Za-z0-9_.-]+)$")
_FORMAT_1_NAME = re.compile(r"^\d{20}-\d{20}-[A-Za-z0-9_.-]+\.json$")


@dataclass(frozen=True)
class ManifestFile:
    path: str  # relative to <root>/<channel>, e.g. event_date=2026-11-22/event_hour=08/part-....parquet
    bytes: int
    staging: str  # where Spark wrote it, relative to <root>/<channel>
    rows: int = 0


@dataclass(frozen=True)
class Manifest:
    """What one landing batch wrote: which events (seq ranges of one channel identity) and where."""

    channel: str
    channel_id: str  # 32 hex digits
    batch_id: str
    seq_ranges: tuple[tuple[int, int], ...]
    count: int
    files: tuple[ManifestFile, ...]
    created: str  # ISO 8601, UTC
    partitions: tuple[str, ...] = field(default=())
    commit: int = 0  # set when committed
    format: str = MANIFEST_FORMAT

    @property
    def first_seq(self) -> int:
        return self.seq_ranges[0][0]

    @property
    def last_seq(self) -> int:
        return self.seq_ranges[-1][1]

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def event_id_ranges(self) -> list[tuple[str, str]]:
        cid = bytes.fromhex(self.channel_id)
        return [(event_id(cid, a), event_id(cid, b)) for a, b in self.seq_ranges]

    @property
    def name(self) -> str:
        return _commit_name(self.commit)

    @property
    def index_name(self) -> str:
        return f"{self.commit:012d}-{self.first_seq:020d}-{self.last_seq:020d}-{self.batch_id}"

    @property
    def staging_dir(self) -> str:
        return f"_staging/{self.batch_id}"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format, "commit": self.commit, "channel": self.channel, "channel_id": self.channel_id,
            "batch_id": self.batch_id, "count": self.count, "seq_ranges": [list(r) for r in self.seq_ranges],
            "files": [{"path": f.path, "bytes": f.bytes, "rows": f.rows, "staging": f.staging} for f in self.files],
            "partitions": list(self.partitions), "bytes": self.bytes, "created": self.created,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Manifest:
        if doc.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unknown manifest format {doc.get('format')!r} (this version reads {MANIFEST_FORMAT})")
        return cls(channel=doc["channel"], channel_id=doc["channel_id"], batch_id=doc["batch_id"],
                   seq_ranges=tuple((int(a), int(b)) for a, b in doc["seq_ranges"]), count=int(doc["count"]),
                   files=tuple(ManifestFile(f["path"], int(f["bytes"]), f["staging"], int(f.get("rows", 0)))
                               for f in doc["files"]),
                   created=doc["created"], partitions=tuple(doc.get("partitions", ())), commit=int(doc["commit"]))


@dataclass(frozen=True)
class LogEntry:
    """One commit as a listing shows it; ``span``/``batch_id`` are None until its index entry exists."""

    commit: int
    span: tuple[int, int] | None
    batch_id: str | None


class ManifestLog:
    """The commit log of one channel under a landing root."""

    def __init__(self, store: Storage, channel: str) -> None:
        self.store, self.channel = store, channel

    def _rel(self, name: str, directory: str = MANIFEST_DIR) -> str:
        return f"{self.channel}/{directory}/{name}"

    def uri(self, manifest: Manifest) -> str:
        return self.store.uri(self._rel(manifest.name))

    def entries(self) -> list[LogEntry]:
        """Every commit, oldest first (two listings, no file opened)."""
        names = self.store.list_dir(f"{self.channel}/{MANIFEST_DIR}")
        old = [n for n in names if _FORMAT_1_NAME.match(n)]
        if old:
            raise LandingError(f"{self.store.uri(f'{self.channel}/{MANIFEST_DIR}')} holds manifests of an earlier "
                               f"format ({old[0]}, ...), which this version cannot extend safely: land into a new "
                               "root", channel=self.channel, phase="reading the manifests", rolled_back=True)
        commits = sorted(int(m.group(1)) for n in names if (m := _COMMIT_NAME.match(n)))
        indexed = {}
        for name in self.store.list_dir(f"{self.channel}/{INDEX_DIR}"):
            m = _INDEX_NAME.match(name)
            if m:
                indexed[int(m.group(1))] = ((int(m.group(2)), int(m.group(3))), m.group(4))
        return [LogEntry(c, *indexed.get(c, (None, None))) for c in commits]

    def load(self, commit: int) -> Manifest:
        rel = self._rel(_commit_name(commit))
        try:
            return Manifest.from_json(json.loads(self.store.read_bytes(rel)))
        except (ValueError, KeyError, TypeError) as err:
            raise LandingError(f"manifest {self.store.uri(rel)} is unreadable ({err}); every landing of this channel "
                               "stops until it is repaired (docs/landing.md, 'Damaged manifests')",
                               channel=self.channel, phase="reading the manifests", rolled_back=True) from err

    def landed(self, channel_id: bytes, lo: int, hi: int) -> Landed:
        """The seq ranges of ``channel_id`` that committed manifests hold within ``[lo, hi]``, with
        those manifests' partitions. Opens only manifests whose span may overlap."""
        wanted, newest = channel_id.hex(), 0
        found: list[tuple[int, int]] = []
        partitions: set[str] = set()
        for entry in self.entries():
            newest = entry.commit
            if entry.span is not None and (entry.span[1] < lo or entry.span[0] > hi):
                continue
            manifest = self.load(entry.commit)
            inside = [r for r in manifest.seq_ranges if r[1] >= lo and r[0] <= hi]
            if manifest.channel_id == wanted and inside:
                found.extend(inside)
                partitions.update(manifest.partitions)
        return Landed(found, tuple(sorted(partitions)), newest)

    def commit(self, manifest: Manifest, after: int) -> Manifest:
        """Commit ``manifest`` as the first free number after ``after`` (the newest commit the
        caller has checked its seqs against); raises :class:`CommitConflict` if a commit it had
        not seen holds any of its seqs. Returns the manifest with its commit number."""
        number = after + 1
        while True:
            committed = replace(manifest, commit=number)
            try:
                self.store.create_exclusive(self._rel(committed.name), _encode(committed))
                break
            except FileExistsError:
                number = self._check_newer(manifest, number)
        self.write_index(committed)
        return committed

    def _check_newer(self, manifest: Manifest, taken: int) -> int:
        """Check the commits from ``taken`` on against ``manifest``; the next number to try."""
        newest = taken
        for entry in self.entries():
            if entry.commit < taken:
                continue
            newest = max(newest, entry.commit)
            other = self.load(entry.commit)
            if other.channel_id == manifest.channel_id and overlap(other.seq_ranges, manifest.seq_ranges):
                raise CommitConflict(
                    f"channel {self.channel!r}: commit {other.commit} (batch {other.batch_id}) landed some of these "
                    "events first, while this batch was being written (a concurrent landing, or a remote take whose "
                    "lease ran out); this batch is discarded", channel=self.channel,
                    phase="committing the manifest", rolled_back=False)
        return newest + 1

    def write_index(self, manifest: Manifest) -> None:
        try:
            self.store.create_exclusive(self._rel(manifest.index_name, INDEX_DIR), b"")
        except FileExistsError:
            pass

    def repair_index(self) -> int:
        """Write the index entries a crash left out; returns how many."""
        missing = [e.commit for e in self.entries() if e.span is None]
        for commit in missing:
            self.write_index(self.load(commit))
        return len(missing)

    def manifests(self) -> list[Manifest]:
        return [self.load(e.commit) for e in self.entries()]

    def by_batch(self) -> dict[str, int]:
        """Batch id -> commit number, for every commit (opens the unindexed ones)."""
        return {e.batch_id if e.batch_id is not None else self.load(e.commit).batch_id: e.commit
                for e in self.entries()}


def _commit_name(commit: int) -> str:
    return f"{commit:012d}.json"


def _encode(manifest: Manifest) -> bytes:
    return json.dumps(manifest.to_json(), indent=1).encode()


def read_manifests(root: str, channel: str, *, spark: Any = None, storage: str = "auto") -> list[Manifest]:
    """Every manifest of ``channel`` under ``root``, in commit order (for reconciliation checks).

    Without ``spark`` (or with ``storage="arrow"``) the files are read with ``pyarrow.fs``.
    """
    from .config import root_uri

    return ManifestLog(open_storage(root_uri(root), storage, spark), channel).manifests()

