"""The landing's commit protocol without Spark: storage primitives, the manifest commit log,
publishing staged files, recovery, and land_once races between two landings.

The races run land_once with its Spark write replaced by a pyarrow write of the same layout
(``part-*.parquet`` under hive partitions in the staging directory), so that a take can be made
to expire, or a staging directory to vanish, at an exact moment. The same races with real Spark
and a real agent are in test_remote.py.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from ingest_toolkit.channel import EventColumns
from ingest_toolkit.errors import ConfigError
from ingest_toolkit.land import LandingConfig, LandingError, Manifest, ManifestFile, land_once, read_manifests
from ingest_toolkit.land.drain import land_until_empty
from ingest_toolkit.land.errors import CommitConflict
from ingest_toolkit.land.manifest import Landed, ManifestLog, overlap
from ingest_toolkit.land.publish import finish_moves, recover_channel_dir, staged_files
from ingest_toolkit.land.storage import ArrowStorage, LocalStorage, Storage, open_storage, tmp_name
from ingest_toolkit.land.tables import parquet as landing_module

CID = bytes(range(16))
PARTITION = "event_date=2026-01-01/event_hour=00"


@pytest.fixture(params=["local", "arrow"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    return LocalStorage(tmp_path.as_uri()) if request.param == "local" else ArrowStorage(tmp_path.as_uri())


# -- storage primitives ------------------------------------------------------------------------

def test_create_exclusive_refuses_an_existing_name_and_keeps_the_first(store: Storage, tmp_path: Path) -> None:
    store.create_exclusive("ch/_manifests/000000000001.json", b"first")
    with pytest.raises(FileExistsError):
        store.create_exclusive("ch/_manifests/000000000001.json", b"second")
    assert (tmp_path / "ch/_manifests/000000000001.json").read_bytes() == b"first"
    assert store.list_dir("ch/_manifests") == ["000000000001.json"]  # no temporary file left behind


def test_local_create_exclusive_has_one_winner_per_name_under_concurrency(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path.as_uri())
    wins: list[tuple[int, int]] = []
    start = threading.Barrier(6)

    def racer(who: int) -> None:
        start.wait()
        for name in range(40):
            try:
                store.create_exclusive(f"log/{name:04d}", str(who).encode())
                wins.append((name, who))
            except FileExistsError:
                pass

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(name for name, _ in wins) == list(range(40))  # each name won exactly once
    for name, who in wins:
        assert (tmp_path / f"log/{name:04d}").read_bytes() == str(who).encode()


def test_move_never_replaces_its_target(store: Storage, tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"new")
    (tmp_path / "b").write_bytes(b"landed")
    assert store.move("a", "b") is False
    assert (tmp_path / "b").read_bytes() == b"landed" and (tmp_path / "a").exists()
    assert store.move("a", "sub/dir/c") is True
    assert (tmp_path / "sub/dir/c").read_bytes() == b"new" and not (tmp_path / "a").exists()


def test_listing_sizes_mtimes_and_parquet_rows(store: Storage, tmp_path: Path) -> None:
    (tmp_path / "d/x").mkdir(parents=True)
    pq.write_table(pa.table({"v": list(range(37))}), tmp_path / "d/x/part-0.parquet")
    (info,) = store.list_files("d")
    assert info.path == "x/part-0.parquet" and info.size == (tmp_path / "d/x/part-0.parquet").stat().st_size
    assert abs(info.mtime - time.time()) < 60
    assert store.parquet_rows("d/x/part-0.parquet") == 37
    assert store.list_files("missing") == [] and store.list_dir("missing") == []


def test_local_sync_fsyncs_each_file_and_every_directory_up_to_the_root(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ch/p1").mkdir(parents=True)
    (tmp_path / "ch/p1/f1").write_bytes(b"1")
    (tmp_path / "ch/f2").write_bytes(b"2")
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    LocalStorage(tmp_path.as_uri()).sync(["ch/p1/f1", "ch/f2"])
    root = str(tmp_path.resolve())
    assert set(synced) == {f"{root}/ch/p1/f1", f"{root}/ch/f2", f"{root}/ch/p1", f"{root}/ch", root}
    assert synced.index(f"{root}/ch/p1") < synced.index(f"{root}/ch")  # children before parents


def test_file_roots_get_local_storage_whatever_the_mode(tmp_path: Path) -> None:
    for mode in ("auto", "hadoop", "arrow"):
        assert isinstance(open_storage(tmp_path.as_uri(), mode, None), LocalStorage)


def test_storage_configuration_errors_name_the_key_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"storage = 'hadoop' needs a classic SparkSession.*set storage = 'arrow'") \
            as no_jvm:
        open_storage("hdfs://namenode:8020/landing", "hadoop", None)
    with pytest.raises(ConfigError, match=r"names the host 'nas'.*write root = 'file:///landing'") as with_host:
        open_storage("file://nas/landing", "auto", None)
    assert (no_jvm.value.key, with_host.value.key) == ("storage", "root")
    assert "\n" not in str(no_jvm.value) + str(with_host.value)
    assert isinstance(open_storage("file://localhost" + str(tmp_path), "auto", None), LocalStorage)


# -- the manifest commit log -------------------------------------------------------------------

def _draft(batch: str, ranges: tuple[tuple[int, int], ...], cid: bytes = CID,
           files: tuple[ManifestFile, ...] = ()) -> Manifest:
    return Manifest(channel="ch", channel_id=cid.hex(), batch_id=batch, seq_ranges=ranges,
                    count=sum(b - a + 1 for a, b in ranges), files=files, created="2026-01-01T00:00:00Z")


def test_commits_are_numbered_and_found_by_seq_span(store: Storage) -> None:
    log = ManifestLog(store, "ch")
    assert log.commit(_draft("b1", ((100, 199),)), after=0).commit == 1
    assert log.commit(_draft("b2", ((200, 250), (260, 299))), after=1).commit == 2
    assert log.commit(_draft("b3", ((150, 160),), cid=bytes(16)), after=2).commit == 3  # other identity
    assert log.landed(CID, 190, 205) == Landed([(100, 199), (200, 250)], (), 3)
    assert log.landed(CID, 300, 400) == Landed([], (), 3)
    assert [m.batch_id for m in read_manifests(store.root, "ch", storage="arrow")] == ["b1", "b2", "b3"]
    m = log.load(1)
    assert (m.first_seq, m.last_seq, m.count, m.name) == (100, 199, 100, "000000000001.json")


def test_a_stale_committer_loses_to_an_overlapping_commit_it_had_not_seen(store: Storage) -> None:
    log = ManifestLog(store, "ch")
    log.commit(_draft("first", ((1, 100),)), after=0)
    # Both checked the log when it was empty; "first" won number 1.
    with pytest.raises(CommitConflict, match="commit 1 \\(batch first\\)"):
        log.commit(_draft("late", ((50, 150),)), after=0)
    assert log.commit(_draft("disjoint", ((101, 150),)), after=0).commit == 2  # no overlap: next number
    assert log.commit(_draft("other-channel", ((1, 100),), cid=bytes(16)), after=0).commit == 3
    assert [e.commit for e in log.entries()] == [1, 2, 3]


def test_concurrent_committers_never_commit_overlapping_seqs(tmp_path: Path) -> None:
    log = ManifestLog(LocalStorage(tmp_path.as_uri()), "ch")
    outcomes: list[tuple[tuple[tuple[int, int], ...], Manifest | CommitConflict | None]] = []
    start = threading.Barrier(4)

    def committer(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for i in range(25):
            lo = rng.randrange(0, 400)
            ranges = ((lo, lo + rng.randrange(0, 15)),)
            landed = log.landed(CID, *ranges[0])  # what a run sees before its (long) write
            seen = landed.newest
            if landed.ranges:  # a run drops the seqs it sees landed; here: skip the whole draft
                outcomes.append((ranges, None))
                continue
            time.sleep(rng.random() * 0.003)  # the batch's write: other runs commit meanwhile
            try:
                outcomes.append((ranges, log.commit(_draft(f"t{seed}-{i}", ranges), after=seen)))
            except CommitConflict as err:
                outcomes.append((ranges, err))

    threads = [threading.Thread(target=committer, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committed = log.manifests()
    assert [m.commit for m in committed] == list(range(1, len(committed) + 1))  # no gaps, no doubles
    for i, a in enumerate(committed):
        for b in committed[i + 1:]:
            assert not overlap(a.seq_ranges, b.seq_ranges), (a, b)
    conflicts = [ranges for ranges, outcome in outcomes if isinstance(outcome, CommitConflict)]
    recognised = [ranges for ranges, outcome in outcomes if outcome is None]
    assert conflicts and len(committed) + len(conflicts) + len(recognised) == 100
    for ranges in conflicts:  # every refusal was for a real overlap with a committed batch
        assert any(overlap(m.seq_ranges, ranges) for m in committed)


def test_a_crash_before_the_index_entry_is_repaired_and_never_hides_a_commit(store: Storage,
                                                                          tmp_path: Path) -> None:
    log = ManifestLog(store, "ch")
    log.commit(_draft("b1", ((1, 10),)), after=0)
    (index,) = (tmp_path / "ch/_manifests/_index").iterdir()
    index.unlink()  # the run died between its commit and the index entry
    assert log.landed(CID, 5, 5).ranges == [(1, 10)]  # an unindexed commit is opened, not skipped
    with pytest.raises(CommitConflict):
        log.commit(_draft("b2", ((5, 20),)), after=0)
    assert log.repair_index() == 1 and log.repair_index() == 0
    assert [p.name for p in (tmp_path / "ch/_manifests/_index").iterdir()] == [index.name]


def test_damaged_and_old_format_manifests_stop_the_landing_with_a_clear_error(store: Storage,
                                                                              tmp_path: Path) -> None:
    log = ManifestLog(store, "ch")
    log.commit(_draft("b1", ((1, 10),)), after=0)
    (tmp_path / "ch/_manifests/000000000001.json").write_text("{torn")
    with pytest.raises(LandingError, match="000000000001.json is unreadable"):
        log.landed(CID, 1, 5)
    (tmp_path / "ch/_manifests/000000000001.json").unlink()
    (tmp_path / "ch/_manifests/00000000000000000001-00000000000000000010-b1.json").write_text("{}")
    with pytest.raises(LandingError, match="earlier format"):
        log.entries()


# -- publishing staged files and recovery ---------------------------------------------------------

def _stage(tmp_path: Path, batch: str, rows: list[int]) -> None:
    """What Spark leaves in staging: one Parquet file per entry of ``rows``."""
    directory = tmp_path / "ch" / "_staging" / batch / PARTITION
    directory.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(rows):
        pq.write_table(pa.table({"seq": list(range(n))}), directory / f"part-{i:05d}-x.c000.snappy.parquet")
    (tmp_path / "ch" / "_staging" / batch / "_SUCCESS").write_bytes(b"")


def test_staged_files_are_named_counted_and_checked_against_the_batch(store: Storage, tmp_path: Path) -> None:
    _stage(tmp_path, "b1", [30, 12])
    files = staged_files(store, "ch", "b1", rows=42)
    assert [(f.path, f.rows) for f in files] == [(f"{PARTITION}/part-b1-00000.c000.snappy.parquet", 30),
                                                 (f"{PARTITION}/part-b1-00001.c000.snappy.parquet", 12)]
    with pytest.raises(LandingError, match="holds 42 rows in 2 files, the batch has 43"):
        staged_files(store, "ch", "b1", rows=43)
    store.delete("ch/_staging/b1")  # another run's cleanup emptied it after Spark's commit
    with pytest.raises(LandingError, match="holds 0 rows in 0 files, the batch has 42"):
        staged_files(store, "ch", "b1", rows=42)


def _committed(store: Storage, tmp_path: Path, batch: str, rows: list[int], first: int = 1) -> Manifest:
    _stage(tmp_path, batch, rows)
    files = staged_files(store, "ch", batch, sum(rows))
    log = ManifestLog(store, "ch")
    newest = log.landed(CID, first, first).newest
    return log.commit(_draft(batch, ((first, first + sum(rows) - 1),), files=files), after=newest)


def test_recovery_rolls_committed_batches_forward_and_drops_idle_leftovers(store: Storage, tmp_path: Path) -> None:
    manifest = _committed(store, tmp_path, "done", [5, 5])
    store.move(f"ch/{manifest.files[0].staging}", f"ch/{manifest.files[0].path}")  # crashed after one move
    _stage(tmp_path, "failed", [3])  # a failed run: no manifest
    assert recover_channel_dir(store, "ch", grace_seconds=3600)[:2] == (1, 0)  # the leftover is too young
    assert sorted(p.name for p in (tmp_path / "ch" / PARTITION).iterdir()) == [
        "part-done-00000.c000.snappy.parquet", "part-done-00001.c000.snappy.parquet"]
    assert sorted(p.name for p in (tmp_path / "ch/_staging").iterdir()) == ["failed"]
    old = time.time() - 7200
    os.utime(tmp_path / "ch/_staging/failed", (old, old))  # the directory is old, a file in it is not:
    assert recover_channel_dir(store, "ch", grace_seconds=3600)[:2] == (0, 0)  # a run may still be writing
    for path in (tmp_path / "ch/_staging/failed").rglob("*"):
        os.utime(path, (old, old))
    assert recover_channel_dir(store, "ch", grace_seconds=3600)[:2] == (0, 1)
    assert list((tmp_path / "ch/_staging").iterdir()) == []
    finish_moves(store, "ch", manifest)  # idempotent once done
    (tmp_path / "ch" / manifest.files[1].path).unlink()
    with pytest.raises(LandingError, match="neither in staging nor in place"):
        finish_moves(store, "ch", manifest)


def _killed_commit(root: Path, rel: str, age_s: float) -> Path:
    """The file a landing killed while writing commit file ``rel`` leaves: its hidden temporary
    name (as :func:`tmp_name` makes it), written ``age_s`` seconds ago."""
    path = root / tmp_name(rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"format": "ingest-toolkit/landing-manifest/2", "commit": ')
    written = time.time() - age_s
    os.utime(path, (written, written))
    return path


def test_recovery_removes_temporary_files_of_killed_commits_once_past_the_grace(store: Storage,
                                                                                tmp_path: Path) -> None:
    """Manifest and index temporaries older than the grace go, younger ones stay (a live landing
    may be writing them) and are counted; commits and other hidden files are not touched."""
    committed = _committed(store, tmp_path, "done", [4])
    old_manifest = _killed_commit(tmp_path, "ch/_manifests/000000000002.json", 7200)
    old_index = _killed_commit(tmp_path, f"ch/_manifests/_index/{committed.index_name}", 7200)
    young = _killed_commit(tmp_path, "ch/_manifests/000000000003.json", 5)
    (tmp_path / "ch/_manifests/.keep").write_text("not ours")
    recovered = recover_channel_dir(store, "ch", grace_seconds=3600)
    assert (recovered.temp_files_removed, recovered.temp_files_pending) == (2, 1)
    assert not old_manifest.exists() and not old_index.exists() and young.exists()
    assert (tmp_path / "ch/_manifests/.keep").exists()
    assert [m.commit for m in read_manifests(str(tmp_path), "ch")] == [1]
    assert recover_channel_dir(store, "ch", grace_seconds=1).temp_files_removed == 1  # past a shorter grace
    assert sorted(os.listdir(tmp_path / "ch/_manifests")) == [".keep", "000000000001.json", "_index"]


def test_the_next_landing_removes_a_killed_commits_temporary_file_and_counts_a_younger_one(
        tmp_path: Path, arrow_spark: Callable[[Callable[[], None]], None]) -> None:
    """A landing (Spark's write replaced, as above) recovers first: it removes the temporary file
    of a commit killed two hours ago, keeps one of a moment ago, and reports it until a landing
    past the grace removes it too."""
    source = _Queue(50)
    config = LandingConfig.build(root=str(tmp_path), max_events=20)
    old = _killed_commit(tmp_path, "ch/_manifests/000000000001.json", 7200)
    young = _killed_commit(tmp_path, "ch/_manifests/000000000001.json", 1)
    result = land_once(source, config, None)  # type: ignore[arg-type]  # no Spark: the write is patched
    assert not old.exists() and young.exists()
    assert result.events == 20 and result.temp_files_pending == 1 and result.to_json()["temp_files_pending"] == 1
    written = time.time() - 7200
    os.utime(young, (written, written))
    again = land_once(source, config, None)  # type: ignore[arg-type]
    assert not young.exists() and again.temp_files_pending == 0 and again.events == 20
    _killed_commit(tmp_path, "ch/_manifests/_index/000000000003-x", 1)
    drained = land_until_empty(source, config, None)  # type: ignore[arg-type]  # recovers once, up front
    assert {r.temp_files_pending for r in drained} == {1} and sum(r.events for r in drained) == 10
    assert [m.commit for m in read_manifests(str(tmp_path), "ch")] == [1, 2, 3]


def test_two_processes_finishing_the_same_batch_at_once_lose_nothing(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path.as_uri())
    for attempt in range(20):
        batch = f"b{attempt}"
        manifest = _committed(store, tmp_path, batch, [1] * 6, first=1 + 6 * attempt)
        errors: list[BaseException] = []
        start = threading.Barrier(2)
        threads = [threading.Thread(target=_finish, args=(store, manifest, start, errors)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert all((tmp_path / "ch" / f.path).exists() for f in manifest.files)
        assert not (tmp_path / "ch/_staging" / batch).exists()


def _finish(store: Storage, manifest: Manifest, start: threading.Barrier, errors: list[BaseException]) -> None:
    start.wait()
    try:
        finish_moves(store, "ch", manifest)
    except BaseException as err:  # noqa: BLE001 - collected and asserted by the test
        errors.append(err)


# -- land_once races (pyarrow in place of Spark) --------------------------------------------------

def _arrow_write(spark: Any, table: pa.Table, uri: str, config: LandingConfig) -> None:
    """Spark's staged layout, written by pyarrow: hive partitions, part-* files, _SUCCESS."""
    path = uri.removeprefix("file://")
    ds.write_dataset(table, path, format="parquet", basename_template="part-x-{i}.c000.snappy.parquet",
                     partitioning=ds.partitioning(pa.schema([("event_date", pa.string()),
                                                             ("event_hour", pa.string())]), flavor="hive"))
    Path(path, "_SUCCESS").write_bytes(b"")


class _Queue:
    """A channel's queue as a lease-holding agent keeps it: takes are disjoint; an expired or
    rolled-back take puts its events back at the head, in order."""

    name = "ch"

    def __init__(self, n: int) -> None:
        self.queue, self.lock = list(range(1, n + 1)), threading.Lock()
        self.takes: list[_Take] = []

    def backlog(self) -> int:
        return len(self.queue)

    def open_take(self, max_events: int) -> _Take:
        with self.lock:
            seqs, self.queue = self.queue[:max_events], self.queue[max_events:]
        take = _Take(self, seqs)
        self.takes.append(take)
        return take


class _Take:
    channel_id = CID

    def __init__(self, queue: _Queue, seqs: list[int]) -> None:
        self.queue, self.seqs, self.ended = queue, seqs, False
        self.columns = EventColumns([b"e%d" % s for s in seqs], list(seqs), [0] * len(seqs))

    def expire(self) -> None:
        with self.queue.lock:
            self.queue.queue = sorted(self.seqs + self.queue.queue)
            self.ended = True

    def commit(self) -> None:
        if self.ended:
            raise LandingError("lease expired", channel="ch", phase="commit", rolled_back=False)
        self.ended = True

    def rollback(self) -> None:
        if not self.ended:
            self.expire()


def _landed_seqs(root: Path) -> list[int]:
    table = ds.dataset(str(root / "ch"), format="parquet", partitioning="hive",
                       exclude_invalid_files=True, ignore_prefixes=["_", "."]).to_table()
    return sorted(table.column("seq").to_pylist())


@pytest.fixture
def arrow_spark(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], None]], None]]:
    """Patches the Spark write; ``hold(fn)`` makes the next write call ``fn`` after writing."""
    hooks: list[Callable[[], None]] = []

    def write(spark: Any, table: pa.Table, uri: str, config: LandingConfig) -> None:
        _arrow_write(spark, table, uri, config)
        if hooks:
            hooks.pop(0)()

    monkeypatch.setattr(landing_module, "write_parquet", write)
    yield hooks.append


def test_a_take_that_expired_mid_write_loses_the_race_to_the_landing_that_retook_it(
        tmp_path: Path, arrow_spark: Callable[[Callable[[], None]], None]) -> None:
    source = _Queue(100)
    config = LandingConfig.build(root=str(tmp_path), max_events=100)
    other: dict[str, Any] = {}

    def expire_and_let_another_landing_run() -> None:
        source.takes[0].expire()  # the agent's lease reaper: the events are back at the head
        other["result"] = land_once(source, config, None)  # type: ignore[arg-type]  # no Spark: the write is patched  # a second landing takes and lands them

    arrow_spark(expire_and_let_another_landing_run)
    with pytest.raises(CommitConflict) as err:
        land_once(source, config, None)  # type: ignore[arg-type]  # no Spark: the write is patched
    assert err.value.rolled_back and "commit 1" in str(err.value)
    assert other["result"].events == 100
    assert _landed_seqs(tmp_path) == list(range(1, 101))  # once each
    assert [m.commit for m in read_manifests(str(tmp_path), "ch")] == [1]
    assert not any((tmp_path / "ch/_staging").iterdir())  # the loser's staging is gone


def test_a_staging_directory_emptied_before_the_manifest_fails_the_run_and_loses_nothing(
        tmp_path: Path, arrow_spark: Callable[[Callable[[], None]], None]) -> None:
    source = _Queue(100)
    config = LandingConfig.build(root=str(tmp_path), max_events=100, staging_grace_seconds=0)
    store = LocalStorage(tmp_path.as_uri())
    arrow_spark(lambda: None if recover_channel_dir(store, "ch", 0) else None)  # another run's cleanup, grace 0
    with pytest.raises(LandingError) as err:
        land_once(source, config, None)  # type: ignore[arg-type]  # no Spark: the write is patched
    assert err.value.phase == "checking Spark's output" and err.value.rolled_back
    assert source.backlog() == 100 and read_manifests(str(tmp_path), "ch") == []
    result = land_once(source, config, None)  # type: ignore[arg-type]  # no Spark: the write is patched
    assert result.events == 100 and source.backlog() == 0
    assert _landed_seqs(tmp_path) == list(range(1, 101))


def test_redelivered_events_of_a_committed_batch_are_only_committed(
        tmp_path: Path, arrow_spark: Callable[[Callable[[], None]], None]) -> None:
    source = _Queue(100)
    config = LandingConfig.build(root=str(tmp_path), max_events=60)
    first = source.open_take(60)
    landed = land_once(_Replay(first), config, None)  # type: ignore[arg-type]  # landed, then its take commit was lost
    first.expire()
    assert landed.events == 60 and source.backlog() == 100
    again = land_once(source, config, None)  # type: ignore[arg-type]  # no Spark: the write is patched
    assert (again.events, again.redelivered) == (0, 60)
    assert again.partitions == landed.partitions and landed.partitions  # its hours, though written earlier
    rest = land_once(source, config, None)  # type: ignore[arg-type]  # no Spark: the write is patched
    assert rest.events == 40 and source.backlog() == 0
    assert _landed_seqs(tmp_path) == list(range(1, 101))
    manifests = read_manifests(str(tmp_path), "ch")
    assert [m.commit for m in manifests] == [1, 2] and json.loads(
        (tmp_path / "ch/_manifests/000000000002.json").read_text())["seq_ranges"] == [[61, 100]]


class _Replay:
    """A source whose one take is an existing one, and whose commit is lost."""

    name = "ch"

    def __init__(self, take: _Take) -> None:
        self.take = take

    def open_take(self, max_events: int) -> Any:
        take = self.take

        class Lost:
            channel_id, columns = take.channel_id, take.columns

            def commit(self) -> None:
                pass

            def rollback(self) -> None:
                pass

        return Lost()

    def backlog(self) -> int:
        return 0
