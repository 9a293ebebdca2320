"""Per-batch manifests: the commit point of the landed table.

A manifest is a small JSON document in ``<root>/<channel>/_manifests/``, written atomically
(temporary file, sync, rename) after Spark committed the batch's files to staging and before
they are moved into the partitions. Once it exists, the batch's events count as landed: a
redelivery of any of its seqs is recognised and not written again.

File name: ``<first seq:020d>-<last seq:020d>-<batch id>.json``, so a landing run finds the
manifests that may cover the seqs it took from one directory listing, and opens only those.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .batches import event_id
from .storage import Storage, open_storage

__all__ = ["MANIFEST_DIR", "MANIFEST_FORMAT", "Manifest", "ManifestFile", "landed_ranges", "list_manifest_names",
           "load_manifest", "read_manifests", "write_manifest"]

MANIFEST_DIR = "_manifests"
MANIFEST_FORMAT = "ingest-toolkit/landing-manifest/1"
_NAME = re.compile(r"^(\d{20})-(\d{20})-([A-Za-z0-9_.-]+)\.json$")


@dataclass(frozen=True)
class ManifestFile:
    path: str  # relative to <root>/<channel>, e.g. event_date=2026-11-22/event_hour=08/part-....parquet
    bytes: int
    staging: str  # where Spark wrote it, relative to <root>/<channel>


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
        return f"{self.first_seq:020d}-{self.last_seq:020d}-{self.batch_id}.json"

    @property
    def staging_dir(self) -> str:
        return f"_staging/{self.batch_id}"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format, "channel": self.channel, "channel_id": self.channel_id,
            "batch_id": self.batch_id, "count": self.count, "seq_ranges": [list(r) for r in self.seq_ranges],
            "files": [{"path": f.path, "bytes": f.bytes, "staging": f.staging} for f in self.files],
            "partitions": list(self.partitions), "bytes": self.bytes, "created": self.created,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Manifest:
        if doc.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unknown manifest format {doc.get('format')!r}")
        return cls(channel=doc["channel"], channel_id=doc["channel_id"], batch_id=doc["batch_id"],
                   seq_ranges=tuple((int(a), int(b)) for a, b in doc["seq_ranges"]), count=int(doc["count"]),
                   files=tuple(ManifestFile(f["path"], int(f["bytes"]), f["staging"]) for f in doc["files"]),
                   created=doc["created"], partitions=tuple(doc.get("partitions", ())))


def write_manifest(storage: Storage, channel: str, manifest: Manifest) -> str:
    """Write atomically; returns the manifest's URI."""
    rel = f"{channel}/{MANIFEST_DIR}/{manifest.name}"
    storage.write_atomic(rel, json.dumps(manifest.to_json(), indent=1).encode())
    return storage.uri(rel)


def list_manifest_names(storage: Storage, channel: str) -> list[str]:
    """Names of complete manifests (temporary files of an interrupted write are not listed)."""
    return sorted(n for n in storage.list_dir(f"{channel}/{MANIFEST_DIR}") if _NAME.match(n))


def load_manifest(storage: Storage, channel: str, name: str) -> Manifest:
    return Manifest.from_json(json.loads(storage.read_bytes(f"{channel}/{MANIFEST_DIR}/{name}")))


def landed_ranges(storage: Storage, channel: str, channel_id: bytes, lo: int, hi: int) -> list[tuple[int, int]]:
    """Seq ranges of ``channel_id`` that manifests record as landed, within ``[lo, hi]``.

    Only manifests whose name's seq span overlaps ``[lo, hi]`` are opened.
    """
    wanted = channel_id.hex()
    found: list[tuple[int, int]] = []
    for name in list_manifest_names(storage, channel):
        match = _NAME.match(name)
        if match is None or int(match.group(2)) < lo or int(match.group(1)) > hi:
            continue
        manifest = load_manifest(storage, channel, name)
        if manifest.channel_id == wanted:
            found.extend(r for r in manifest.seq_ranges if r[1] >= lo and r[0] <= hi)
    return found


def read_manifests(root: str, channel: str, *, spark: Any = None, storage: str = "auto") -> list[Manifest]:
    """Every manifest of ``channel`` under ``root``, oldest seqs first (for reconciliation checks).

    Without ``spark`` (or with ``storage="arrow"``) the files are read with ``pyarrow.fs``.
    """
    from .config import root_uri

    store = open_storage(root_uri(root), storage, spark)
    return [load_manifest(store, channel, name) for name in list_manifest_names(store, channel)]
