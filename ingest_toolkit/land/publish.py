"""From Spark's staged output to files in the partitions: check, sync, move, recover.

* :func:`staged_files` lists what Spark committed to a batch's staging directory, checks that
  its Parquet footers hold exactly the batch's rows (a staging directory that something else
  emptied must fail the run, not commit an empty manifest), makes the files durable and names
  their final places.
* :func:`finish_moves` moves a committed batch's files into place; idempotent, and safe to run
  by two processes at once (a move never replaces a file).
* :func:`recover_channel_dir` finishes batches whose manifest exists and removes leftovers of
  failed runs once they have been idle for the grace period: staging directories without a
  manifest, and the temporary files of commits killed mid-write (:func:`sweep_temp_files`).
"""

from __future__ import annotations

import time
from typing import NamedTuple

from .errors import LandingError
from .faults import fault_point
from .manifest import INDEX_DIR, MANIFEST_DIR, Manifest, ManifestFile, ManifestLog
from .storage import Storage, is_tmp_name

__all__ = ["STAGING_DIR", "Recovery", "finish_moves", "recover_channel_dir", "staged_files", "sweep_temp_files"]

STAGING_DIR = "_staging"


def staged_files(store: Storage, channel: str, batch_id: str, rows: int) -> tuple[ManifestFile, ...]:
    """The Parquet files Spark committed for ``batch_id``, synced, with their final names
    (batch id + ordinal, so a name belongs to one batch only). Raises LandingError unless their
    footers add up to ``rows``."""
    staging = f"{STAGING_DIR}/{batch_id}"
    staged = sorted((f.path, f.size) for f in store.list_files(f"{channel}/{staging}")
                    if f.path.rsplit("/", 1)[-1].startswith("part-") and f.path.endswith(".parquet"))
    files = []
    for i, (rel, size) in enumerate(staged):
        directory, _, name = rel.rpartition("/")
        final = f"part-{batch_id}-{i:05d}.{name.split('.', 1)[1]}"  # keeps c000.snappy.parquet
        count = store.parquet_rows(f"{channel}/{staging}/{rel}")
        files.append(ManifestFile(f"{directory}/{final}" if directory else final, size, f"{staging}/{rel}", count))
    found = sum(f.rows for f in files)
    if found != rows:
        raise LandingError(f"Spark's output in {store.uri(f'{channel}/{staging}')} holds {found} rows in {len(files)} "
                           f"files, the batch has {rows}: it was changed after Spark committed it (another run's "
                           "cleanup, or an operator); nothing was published", channel=channel,
                           phase="checking Spark's output", rolled_back=False)
    store.sync([f"{channel}/{f.staging}" for f in files])
    return tuple(files)


def finish_moves(store: Storage, channel: str, manifest: Manifest) -> None:
    """Move every file of ``manifest`` from staging to its final name, sync, drop the staging dir.

    Idempotent: a file already in place is skipped, so a crash at any point is finished by
    running this again, by this process or another one at the same time.
    """
    for i, f in enumerate(manifest.files):
        src, dst = f"{channel}/{f.staging}", f"{channel}/{f.path}"
        try:
            moved = store.move(src, dst)
        except FileNotFoundError:
            moved = False  # moved by a concurrent roll-forward a moment ago: checked below
        if not moved:
            _check_in_place(store, channel, manifest, dst, src)
        if i == 0:
            fault_point("during_moves")
    store.sync([f"{channel}/{f.path}" for f in manifest.files], contents=False)  # synced in staging already
    store.delete(f"{channel}/{manifest.staging_dir}")


def _check_in_place(store: Storage, channel: str, manifest: Manifest, dst: str, src: str) -> None:
    if not store.exists(dst):
        raise LandingError(f"manifest {manifest.name} names {store.uri(dst)}, which is neither in staging nor in "
                           "place: the landed file was deleted by something else", channel=channel,
                           phase="moving files", rolled_back=False)
    if store.exists(src):  # both: a copy left by a move that copies (object stores); same bytes
        store.delete(src)


class Recovery(NamedTuple):
    """What :func:`recover_channel_dir` did: batches rolled forward, staging directories deleted,
    temporary files of killed commits removed, and those kept because they are younger than the
    grace period (``temp_files_pending``: removed by a later recovery)."""

    rolled_forward: int
    deleted: int
    temp_files_removed: int = 0
    temp_files_pending: int = 0


def recover_channel_dir(store: Storage, channel: str, grace_seconds: float) -> Recovery:
    """Finish committed batches and drop idle leftovers (:class:`Recovery` counts them).

    A staging directory without a manifest is deleted only when neither it nor any file in it
    changed for ``grace_seconds``: a landing still writing keeps touching its files. The same
    grace protects the temporary files of a commit (:func:`sweep_temp_files`).
    """
    log = ManifestLog(store, channel)
    log.repair_index()
    temp = sweep_temp_files(store, channel, grace_seconds)
    staged = store.list_dir(f"{channel}/{STAGING_DIR}")
    if not staged:
        return Recovery(0, 0, *temp)
    committed = log.by_batch()
    forward = deleted = 0
    now = time.time()
    for batch_id in staged:
        path = f"{channel}/{STAGING_DIR}/{batch_id}"
        if batch_id in committed:
            finish_moves(store, channel, log.load(committed[batch_id]))
            forward += 1
        elif now - _last_change(store, path) >= grace_seconds:
            store.delete(path)
            deleted += 1
    return Recovery(forward, deleted, *temp)


def sweep_temp_files(store: Storage, channel: str, grace_seconds: float) -> tuple[int, int]:
    """Remove the temporary files of killed commits: a manifest or index entry is written under a
    hidden name (``_manifests/.<name>.tmp-*``, ``_manifests/_index/.<name>.tmp-*``) and then
    published, so a landing killed in between leaves one behind, one per such crash. Readers
    never take them for commits; this removes them once older than ``grace_seconds`` and keeps
    younger ones, which a live landing may still be writing. Returns (removed, kept)."""
    removed = kept = 0
    now = time.time()
    for directory in (MANIFEST_DIR, INDEX_DIR):
        for name in store.list_dir(f"{channel}/{directory}"):
            rel = f"{channel}/{directory}/{name}"
            if not is_tmp_name(name) or (written := _mtime(store, rel)) is None:
                continue
            if now - written >= grace_seconds:
                store.delete(rel)
                removed += 1
            else:
                kept += 1
    return removed, kept


def _mtime(store: Storage, rel: str) -> float | None:
    """When ``rel`` was last written; None once it is gone (published or removed meanwhile).
    Hadoop reports a missing file as a Java exception, not FileNotFoundError: asked again."""
    try:
        return store.mtime(rel)
    except Exception:
        if not store.exists(rel):
            return None
        raise


def _last_change(store: Storage, path: str) -> float:
    """The newest mtime of the files under ``path``; the directory's own only when it holds none.
    An object store has no directory mtime (S3A reports the time of the call), which would
    keep every leftover forever; creating or deleting a file shows in the files' times anyway."""
    mtimes = [f.mtime for f in store.list_files(path)]
    if mtimes:
        return max(mtimes)
    try:
        return store.mtime(path)
    except FileNotFoundError:
        return time.time()  # removed meanwhile: leave it to whoever did
