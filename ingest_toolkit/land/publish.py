"""From Spark's staged output to files in the partitions: check, sync, move, recover.

* :func:`staged_files` lists what Spark committed to a batch's staging directory, checks that
  its Parquet footers hold exactly the batch's rows (a staging directory that something else
  emptied must fail the run, not commit an empty manifest), makes the files durable and names
  their final places.
* :func:`finish_moves` moves a committed batch's files into place; idempotent, and safe to run
  by two processes at once (a move never replaces a file).
* :func:`recover_channel_dir` finishes batches whose manifest exists and removes leftovers of
  failed runs once they have been idle for the grace period.
"""

from __future__ import annotations

import time

from .errors import LandingError
from .faults import fault_point
from .manifest import Manifest, ManifestFile, ManifestLog
from .storage import Storage

__all__ = ["STAGING_DIR", "finish_moves", "recover_channel_dir", "staged_files"]

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


def recover_channel_dir(store: Storage, channel: str, grace_seconds: float) -> tuple[int, int]:
    """Finish committed batches and drop idle leftovers; returns (rolled forward, deleted).

    A staging directory without a manifest is deleted only when neither it nor any file in it
    changed for ``grace_seconds``: a landing still writing keeps touching its files.
    """
    log = ManifestLog(store, channel)
    log.repair_index()
    staged = store.list_dir(f"{channel}/{STAGING_DIR}")
    if not staged:
        return 0, 0
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
    return forward, deleted


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
