"""Throughput, group commit, replay and memory benchmark of the durable file channel.

Run from the repository root with the project's virtualenv::

    python bench/channel_throughput.py            # default parameters, about 1.5 minutes on 2 CPUs
    python bench/channel_throughput.py --quick    # smoke run, well under 30 seconds
    python bench/channel_throughput.py --profile  # also print cProfile hot spots

One run measures, every figure the median of ``--repeats`` runs:

1. put and take events/s for events of ``--event-size`` bytes in transactions of
   ``--batch-size`` events, ``durability="fsync"`` (one fdatasync per commit): with
   ``tx.put_many``, with a ``tx.put`` loop, and both again with 2 small headers per event;
2. a naive baseline: a tight loop appending length+CRC32C framed records to a file with one
   ``os.fdatasync`` per batch, and reading the file back verifying every CRC; our/naive ratios;
3. group commit: ``--threads`` threads committing batches of ``--gc-batch`` concurrently, against
   one thread committing the same batches sequentially (one fsync per commit), the same single
   thread with ``durability="page_cache"`` (its CPU ceiling), and both again on a simulated
   slower disk (``--sim-fsync-ms`` added to every sync); fsyncs/commits from ``ch.stats()``;
4. replay: ``--replay-events`` committed events, then a clean close or a SIGKILL of the writing
   process, then a reopen in a fresh process; events/s of the reopen. Checkpoints (when the
   library has them) are switched off for the full-replay rows, and one row keeps the defaults
   (a clean close writes a checkpoint, the reopen loads it);
5. resident memory per queued event after the reopen: the queue structure
   (``PointerQueue.nbytes / len``) and the RSS growth across the open (psutil), for
   ``--replay-events`` events and for ``--large-events`` events with ``--large-event-size`` bodies.

Everything is written under a fresh temporary directory (or one made inside ``--dir``) that is
removed at the end unless ``--keep`` is given. Writers and reopeners of sections 4 and 5 run as
child processes of this script (hidden ``--child-*`` options).
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import ctypes.util
import gc
import io
import json
import os
import platform
import pstats
import resource
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import crc32c as crc32c_module
import psutil
from crc32c import crc32c

from ingest_toolkit.channel import ChannelConfig, Event, FileChannel
from ingest_toolkit.channel.fs import File, FileSystem, OsFileSystem

HEADERS = {"src": "collector-3", "kind": "click"}  # "2 small headers"
TARGET_RATE = 150_000  # events/s, put and take
TARGET_NAIVE_RATIO = 0.75
TARGET_GROUP_COMMIT = 4.0
TARGET_REPLAY_RATE = 200_000
TARGET_QUEUE_BYTES = 16.0
FIXED = "fixed cost of an open"


# -- helpers -------------------------------------------------------------------------------
def channel_settings(root: str, *, capacity: int, transaction_capacity: int) -> dict[str, Any]:
    return {
        "checkpoint_dir": os.path.join(root, "checkpoint"),
        "data_dirs": [os.path.join(root, "data")],
        "capacity": max(capacity, transaction_capacity),
        "transaction_capacity": transaction_capacity,
        "max_file_size": 256 << 20,
        "durability": "fsync",
        "min_free_bytes": 0,
        "keep_alive": 0.0,
    }


def checkpoint_settings(enabled: bool) -> dict[str, Any]:
    """Settings that switch checkpoints off (``enabled=False``), if this version has them.

    With checkpoints (default settings) a clean close writes one and the reopen loads it instead
    of replaying the logs; the full-replay rows switch them off so that the reopen reads every
    frame. Versions without checkpoints get no extra settings.
    """
    fields = getattr(ChannelConfig, "model_fields", {})
    if enabled or "checkpoint_on_close" not in fields:
        return {}
    return {"checkpoint_on_close": False, "checkpoint_interval": 0.0}


def has_checkpoints() -> bool:
    return "checkpoint_on_close" in getattr(ChannelConfig, "model_fields", {})


def make_events(count: int, size: int, headers: dict[str, str] | None) -> list[Event]:
    """``count`` distinct events with ``size``-byte bodies (built once, outside the timings)."""
    blob = os.urandom(count * size) if size else b""
    return [Event(body=blob[i * size:(i + 1) * size], headers=dict(headers) if headers else {})
            for i in range(count)]


def fresh_dir(parent: str, name: str) -> str:
    path = os.path.join(parent, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fmt_rate(value: float) -> str:
    if value != value:  # NaN
        return "-"
    return f"{value:,.0f}"


def fmt_ratio(value: float) -> str:
    return "-" if value != value else f"{value:.2f}x"


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    print(f"\n{title}")
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True)))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))))


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "crc32c": f"crc32c {getattr(crc32c_module, '__version__', '?')} "
                  f"({'hardware' if getattr(crc32c_module, 'hardware_based', False) else 'software'})",
    }
    return info


_IMPORT_PROBE = """
import json, sys, time, psutil
before = psutil.Process().memory_info().rss
started = time.perf_counter()
import ingest_toolkit.channel
elapsed = time.perf_counter() - started
print(json.dumps({"seconds": elapsed, "rss": psutil.Process().memory_info().rss - before,
                  "pyarrow": "pyarrow" in sys.modules}))
"""


def import_cost() -> dict[str, Any]:
    """Time and RSS of ``import ingest_toolkit.channel`` in a fresh interpreter (median of 3)."""
    runs = [json.loads(subprocess.run([sys.executable, "-c", _IMPORT_PROBE], check=True, capture_output=True,
                                      text=True).stdout) for _ in range(3)]
    return {"seconds": median([r["seconds"] for r in runs]), "rss": median([r["rss"] for r in runs]),
            "pyarrow": runs[0]["pyarrow"]}


def filesystem_type(path: str) -> str:
    best, fstype = "", "?"
    real = os.path.realpath(path)
    for part in psutil.disk_partitions(all=True):
        mount = part.mountpoint
        if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, fstype = mount, part.fstype
    return fstype


# -- 1. throughput ---------------------------------------------------------------------------
def bench_put_take(root: str, *, events: int, size: int, batch: int, headers: bool,
                   loop: bool) -> dict[str, float]:
    """Put ``events`` (fsync per commit), then take them all back; returns rates and counters."""
    settings = channel_settings(root, capacity=max(events, batch) + batch,
                                transaction_capacity=max(batch, 10_000))
    pool = make_events(batch, size, HEADERS if headers else None)
    ch = FileChannel(**settings)
    try:
        batches = events // batch
        gc.collect()
        started = time.perf_counter()
        if loop:
            for _ in range(batches):
                with ch.transaction() as tx:
                    put = tx.put
                    for event in pool:
                        put(event)
        else:
            for _ in range(batches):
                with ch.transaction() as tx:
                    tx.put_many(pool)
        put_s = time.perf_counter() - started
        stats = ch.stats()
        put_fsyncs, put_commits = stats["fsyncs"], stats["commits"]

        taken = 0
        first: list[Event] = []
        started = time.perf_counter()
        while True:
            with ch.transaction() as tx:
                got = tx.take(batch)
            if not got:
                break
            if not first:
                first = got
            taken += len(got)
        take_s = time.perf_counter() - started
        stats = ch.stats()
    finally:
        ch.close()
    expected = batches * batch
    if taken != expected or first[0].body != pool[0].body or dict(first[0].headers) != dict(pool[0].headers):
        raise SystemExit(f"take returned {taken} events (expected {expected}) or wrong contents")
    shutil.rmtree(root, ignore_errors=True)
    return {
        "put": expected / put_s,
        "take": expected / take_s,
        "put_fsyncs": put_fsyncs,
        "put_commits": put_commits,
        "take_fsyncs": stats["fsyncs"] - put_fsyncs,
        "take_commits": stats["commits"] - put_commits,
    }


_REC = struct.Struct("<II")  # length, CRC32C of the body


def bench_naive(root: str, *, events: int, size: int, batch: int) -> dict[str, float]:
    """Length+CRC32C records, one fdatasync per ``batch`` records; then read back and verify."""
    pool = [e.body for e in make_events(batch, size, None)]
    path = os.path.join(root, "naive.log")
    batches = events // batch
    pack = _REC.pack
    syncs: list[float] = []
    gc.collect()
    started = time.perf_counter()
    with open(path, "wb", buffering=1 << 20) as f:
        fd, write = f.fileno(), f.write
        for _ in range(batches):
            for body in pool:
                write(pack(len(body), crc32c(body)) + body)
            f.flush()
            t0 = time.perf_counter()
            os.fdatasync(fd)
            syncs.append(time.perf_counter() - t0)
    write_s = time.perf_counter() - started

    started = time.perf_counter()
    with open(path, "rb") as f:
        data = f.read()
    unpack, pos, end, count = _REC.unpack_from, 0, len(data), 0
    while pos < end:
        length, crc = unpack(data, pos)
        pos += 8
        body = data[pos:pos + length]
        if crc32c(body) != crc:
            raise SystemExit(f"naive read-back: CRC mismatch at record {count}")
        pos += length
        count += 1
    read_s = time.perf_counter() - started
    if count != batches * batch:
        raise SystemExit(f"naive read-back found {count} records, expected {batches * batch}")
    os.unlink(path)
    return {"put": count / write_s, "take": count / read_s, "fsync_ms": 1000 * median(syncs)}


# -- 3. group commit -------------------------------------------------------------------------
class TimedSyncFileSystem(OsFileSystem):
    """The real file system; records how long each sync of a file takes, and can slow it down.

    With ``extra`` > 0 every sync also sleeps that long: a disk whose fdatasync is slower than
    this machine's (no volatile write cache, network storage), for rows labelled as simulated.
    """

    def __init__(self, extra: float = 0.0) -> None:
        self.extra = extra
        self.durations: list[float] = []  # of the real syncs, without the added sleep

    def create(self, path: str) -> File:
        return _TimedSyncFile(super().create(path), self)

    def open_write(self, path: str) -> File:
        return _TimedSyncFile(super().open_write(path), self)


class _TimedSyncFile:
    def __init__(self, file: File, fs: TimedSyncFileSystem) -> None:
        self._file, self._fs, self.path = file, fs, file.path

    def sync(self) -> None:
        started = time.perf_counter()
        self._file.sync()
        self._fs.durations.append(time.perf_counter() - started)
        if self._fs.extra:
            time.sleep(self._fs.extra)  # releases the GIL, like fdatasync

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def bench_group_commit(root: str, *, threads: int, commits: int, batch: int, size: int,
                       fs: FileSystem | None = None) -> dict[str, float]:
    """``threads`` threads x ``commits`` commits of ``batch`` events each, concurrently."""
    total = threads * commits * batch
    settings = channel_settings(root, capacity=total + batch, transaction_capacity=max(batch, 10_000))
    pools = [make_events(batch, size, None) for _ in range(threads)]
    ch = FileChannel(fs=fs, **settings)
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)

    def worker(pool: list[Event]) -> None:
        try:
            barrier.wait()
            for _ in range(commits):
                with ch.transaction() as tx:
                    tx.put_many(pool)
        except BaseException as err:  # reported below
            errors.append(err)

    workers = [threading.Thread(target=worker, args=(pool,)) for pool in pools]
    try:
        for t in workers:
            t.start()
        gc.collect()
        if isinstance(fs, TimedSyncFileSystem):
            fs.durations.clear()
        barrier.wait()
        started = time.perf_counter()
        for t in workers:
            t.join()
        elapsed = time.perf_counter() - started
        stats = ch.stats()
        syncs = sync_figures(fs, elapsed)
        queued = len(ch)
    finally:
        ch.close()
    if errors:
        raise SystemExit(f"group commit worker failed: {errors[0]!r}")
    if queued != total:
        raise SystemExit(f"group commit: {queued} events queued, expected {total}")
    shutil.rmtree(root, ignore_errors=True)
    return {"events": total / elapsed, "commits": stats["commits"] / elapsed,
            "fsyncs": stats["fsyncs"], "n_commits": stats["commits"], **syncs}


def bench_sequential_commit(root: str, *, commits: int, batch: int, size: int, fs: FileSystem | None = None,
                            durability: str = "fsync") -> dict[str, float]:
    """One thread committing ``commits`` batches of ``batch`` events: one fsync per commit."""
    settings = channel_settings(root, capacity=commits * batch + batch,
                                transaction_capacity=max(batch, 10_000))
    settings["durability"] = durability
    pool = make_events(batch, size, None)
    ch = FileChannel(fs=fs, **settings)
    try:
        gc.collect()
        if isinstance(fs, TimedSyncFileSystem):
            fs.durations.clear()
        started = time.perf_counter()
        for _ in range(commits):
            with ch.transaction() as tx:
                tx.put_many(pool)
        elapsed = time.perf_counter() - started
        stats = ch.stats()
        syncs = sync_figures(fs, elapsed)
    finally:
        ch.close()
    shutil.rmtree(root, ignore_errors=True)
    return {"events": commits * batch / elapsed, "commits": stats["commits"] / elapsed,
            "fsyncs": stats["fsyncs"], "n_commits": stats["commits"], **syncs}


def sync_figures(fs: FileSystem | None, elapsed: float) -> dict[str, float]:
    """Median fdatasync ms and the share of the run a sync was in flight, when ``fs`` timed them."""
    if not isinstance(fs, TimedSyncFileSystem) or not fs.durations:
        return {"sync_ms": float("nan"), "sync_busy": float("nan")}
    durations = fs.durations  # cleared when the timing started
    return {"sync_ms": 1000 * median(durations), "sync_busy": (sum(durations) + fs.extra * len(durations)) / elapsed}


# -- 4 and 5. replay and memory (child processes) ------------------------------------------------
def child_write(root: str, events: int, size: int, batch: int, crash: bool, checkpoints: bool) -> int:
    """Child: commit ``events`` events, then close cleanly or wait to be SIGKILLed."""
    settings = channel_settings(root, capacity=events + batch, transaction_capacity=max(batch, 10_000))
    settings.update(checkpoint_settings(checkpoints))
    pool = make_events(batch, size, None)
    ch = FileChannel(**settings)
    started = time.perf_counter()
    for k in range(0, events, batch):
        with ch.transaction() as tx:
            tx.put_many(pool[: min(batch, events - k)])
    elapsed = time.perf_counter() - started
    report = {"committed": len(ch), "put_rate": events / elapsed}
    if crash:
        print(json.dumps(report), flush=True)
        sys.stdin.read()  # the parent kills us here (SIGKILL), so the newest segment stays unsealed
        return 0
    ch.close()
    print(json.dumps(report), flush=True)
    return 0


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


def after_malloc_trim() -> int | None:
    """RSS after the allocators returned freed memory to the OS (None: not glibc).

    glibc's ``malloc_trim(0)``, and, when the library loaded pyarrow, Arrow's own memory pool
    (mimalloc or jemalloc), which keeps freed blocks for reuse.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return None
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        release = getattr(arrow.default_memory_pool(), "release_unused", None)
        if release is not None:
            release()
    return rss()


def child_reopen(root: str, capacity: int, batch: int, profile: bool) -> int:
    """Child: open (full replay) the channel under ``root``; report time, queue and RSS figures."""
    settings = channel_settings(root, capacity=capacity, transaction_capacity=max(batch, 10_000))
    gc.collect()
    before = rss()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    ch = FileChannel(**settings)
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - started
    gc.collect()
    after = rss()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    after_trim = after_malloc_trim()
    queue = ch._queue  # private, but the benchmark reports the in-memory structure itself
    report: dict[str, Any] = {
        "queued": len(ch),
        "seconds": elapsed,
        "replay_seconds": ch.replay_stats.seconds,
        "frames": ch.replay_stats.frames,
        "segments": ch.replay_stats.segments,
        "torn_bytes": ch.replay_stats.torn_bytes,
        "queue_nbytes": queue.nbytes,
        "rss_before": before,
        "rss_after": after,
        "rss_after_trim": after_trim,
        "peak_growth": max(0, peak - max(before, peak_before)),
    }
    ch.close()
    if profiler:
        report["profile"] = profile_text(profiler, 14)
    print(json.dumps(report), flush=True)
    return 0


def run_child(args: list[str], *, crash: bool = False) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    if not crash:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if not line:
        raise SystemExit("crash writer exited before reporting")
    return dict(json.loads(line))


def bench_replay(root: str, *, events: int, size: int, batch: int, repeats: int, crash: bool,
                 checkpoints: bool = False, profile: bool = False) -> dict[str, Any]:
    """Write ``events`` in a child (clean close, or SIGKILL), then reopen it ``repeats`` times."""
    wrote = run_child(["--child-write", root, str(events), str(size), str(batch), "1" if crash else "0",
                       "1" if checkpoints else "0"], crash=crash)
    if wrote["committed"] != events:
        raise SystemExit(f"writer committed {wrote['committed']} events, expected {events}")
    pristine = None
    if repeats > 1:  # a reopen changes the directory (seals, checkpoints): reopen a fresh copy each time
        pristine = root + ".pristine"
        shutil.copytree(root, pristine)
    runs = []
    for i in range(repeats):
        if pristine and i:
            shutil.rmtree(root)
            shutil.copytree(pristine, root)
        child = ["--child-reopen", root, str(events + batch), str(batch)]
        if profile and i == 0:
            child.append("--child-profile")
        report = run_child(child)
        if report["queued"] != events:
            raise SystemExit(f"reopen found {report['queued']} events, expected {events}")
        runs.append(report)
    shutil.rmtree(root, ignore_errors=True)
    if pristine:
        shutil.rmtree(pristine, ignore_errors=True)
    result = {
        "events": events,
        "write_rate": wrote["put_rate"],
        "reopen_s": median([r["seconds"] for r in runs]),
        "rate": median([events / r["seconds"] for r in runs]),
        "frames": runs[0]["frames"],
        "frames_rate": median([r["frames"] / r["replay_seconds"] for r in runs]) if runs[0]["frames"] else float("nan"),
        "segments": runs[0]["segments"],
        "queue_nbytes": runs[0]["queue_nbytes"],
        "rss_growth": median([r["rss_after"] - r["rss_before"] for r in runs]),
        "rss_growth_trim": (median([r["rss_after_trim"] - r["rss_before"] for r in runs])
                            if all(r["rss_after_trim"] is not None for r in runs) else float("nan")),
        "peak_growth": median([r["peak_growth"] for r in runs]),
    }
    if profile:
        result["profile"] = runs[0].get("profile", "")
    return result


# -- profiling -------------------------------------------------------------------------------
def profile_text(profiler: cProfile.Profile, limit: int) -> str:
    buf = io.StringIO()
    stats = pstats.Stats(profiler, stream=buf)
    stats.sort_stats("tottime").print_stats(limit)
    lines = buf.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return "\n".join(line.replace(root + os.sep, "").replace(sys.prefix + os.sep, "")
                     for line in lines[start:] if line.strip())


def profile_section(root: str, *, events: int, size: int, batch: int) -> None:
    """cProfile of put_many, the put loop and take (fsync per commit), top functions by own time."""
    def profiled(title: str, fn: Callable[[], None]) -> None:
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        fn()
        profiler.disable()
        print(f"\n--- profile: {title} ({time.perf_counter() - started:.2f} s under cProfile) ---")
        print(profile_text(profiler, 14))

    settings = channel_settings(root, capacity=events + batch, transaction_capacity=max(batch, 10_000))
    pool = make_events(batch, size, None)
    hpool = make_events(batch, size, HEADERS)
    for variant, title in (("many", "put_many"), ("loop", "put loop"), ("headers", "put_many + 2 headers")):
        shutil.rmtree(root, ignore_errors=True)
        ch = FileChannel(**settings)
        src = hpool if variant == "headers" else pool

        def put_all(ch: FileChannel = ch, src: list[Event] = src, variant: str = variant) -> None:
            for _ in range(events // batch):
                with ch.transaction() as tx:
                    if variant == "loop":
                        for e in src:
                            tx.put(e)
                    else:
                        tx.put_many(src)

        def take_all(ch: FileChannel = ch) -> None:
            while True:
                with ch.transaction() as tx:
                    if not tx.take(batch):
                        break

        profiled(f"{title}, {events:,} events", put_all)
        if variant != "loop":
            profiled(f"take{' (2 headers)' if variant == 'headers' else ''}, {events:,} events", take_all)
        ch.close()
    shutil.rmtree(root, ignore_errors=True)


# -- main --------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--events", type=int, default=200_000, help="events per put/take measurement (section 1, 2)")
    p.add_argument("--event-size", type=int, default=256, help="body bytes per event")
    p.add_argument("--batch-size", type=int, default=1000, help="events per transaction (section 1, 2, 4)")
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is shown")
    p.add_argument("--dir", default=None, help="parent of the scratch directory (None: the system temp directory)")
    p.add_argument("--keep", action="store_true", help="do not delete the scratch directory")
    p.add_argument("--threads", type=int, default=8, help="concurrent committers (section 3)")
    p.add_argument("--gc-batch", type=int, default=100, help="events per commit in section 3")
    p.add_argument("--gc-commits", type=int, default=250, help="commits per thread in section 3")
    p.add_argument("--sim-fsync-ms", type=float, default=2.0,
                   help="extra ms per fsync for the simulated slow-disk group commit rows; 0 skips them")
    p.add_argument("--sim-commits", type=int, default=60, help="commits per thread in the simulated rows")
    p.add_argument("--replay-events", type=int, default=1_000_000, help="committed events to replay (section 4, 5)")
    p.add_argument("--large-events", type=int, default=5_000_000,
                   help="queued events of the large memory run (section 5); 0 skips it")
    p.add_argument("--large-repeats", type=int, default=1, help="reopens of the large memory run (median)")
    p.add_argument("--large-event-size", type=int, default=16, help="body bytes in the large memory run")
    p.add_argument("--quick", action="store_true", help="small sizes and one repeat: a smoke run under 30 s")
    p.add_argument("--profile", action="store_true", help="also print cProfile hot spots of put, take and replay")
    p.add_argument("--json", default=None, help="also write the results as JSON to this file")
    # hidden: child processes of sections 4 and 5
    p.add_argument("--child-write", nargs=6, help=argparse.SUPPRESS)
    p.add_argument("--child-reopen", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--child-profile", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.events = min(args.events, 20_000)
        args.repeats = 1
        args.gc_commits = min(args.gc_commits, 40)
        args.sim_commits = min(args.sim_commits, 15)
        args.replay_events = min(args.replay_events, 100_000)
        args.large_events = 0
    if args.events < args.batch_size or args.replay_events < 1:
        p.error("--events must be at least --batch-size and --replay-events positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.child_write:
        root, events, size, batch, crash, checkpoints = args.child_write
        return child_write(root, int(events), int(size), int(batch), crash == "1", checkpoints == "1")
    if args.child_reopen:
        root, capacity, batch = args.child_reopen
        return child_reopen(root, int(capacity), int(batch), args.child_profile)

    scratch = tempfile.mkdtemp(prefix="channel-bench-", dir=args.dir)
    try:
        results = run(args, scratch)
    finally:
        if args.keep:
            print(f"\nscratch directory kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


def run(args: argparse.Namespace, scratch: str) -> dict[str, Any]:
    wall = time.perf_counter()
    info = machine_info()
    info["filesystem"] = filesystem_type(scratch)
    cost = import_cost()
    info["import_cost"] = (f"import ingest_toolkit.channel: {cost['seconds']:.2f} s, "
                           f"{cost['rss'] / (1 << 20):.0f} MiB RSS{' (loads pyarrow)' if cost['pyarrow'] else ''}")
    info["load_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min load average)"
    print("File channel benchmark")
    for key, value in info.items():
        print(f"  {key:15} {value}")
    size, batch, n, reps = args.event_size, args.batch_size, args.events, args.repeats
    print(f"  parameters      {n:,} events x {size} B, batches of {batch}, durability=fsync, "
          f"median of {reps} run(s){' (--quick)' if args.quick else ''}")
    results: dict[str, Any] = {"machine": info, "parameters": {k: v for k, v in vars(args).items()
                                                                 if not k.startswith("child")}}

    # 1 + 2: throughput and the naive baseline, interleaved so that disk weather hits all rows alike
    variants = [("put_many", False, False), ("put loop", False, True),
                ("put_many + 2 headers", True, False), ("put loop + 2 headers", True, True)]
    samples: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
    naive: list[dict[str, float]] = []
    for r in range(reps):
        for name, headers, loop in variants:
            samples[name].append(bench_put_take(fresh_dir(scratch, f"tp-{r}"), events=n, size=size,
                                                batch=batch, headers=headers, loop=loop))
        naive.append(bench_naive(fresh_dir(scratch, f"naive-{r}"), events=n, size=size, batch=batch))
    naive_put = median([s["put"] for s in naive])
    naive_take = median([s["take"] for s in naive])
    rows, tp = [], {}
    for name, _, _ in variants:
        put = median([s["put"] for s in samples[name]])
        take = median([s["take"] for s in samples[name]])
        # ratios per repeat (each variant ran next to that repeat's naive run), then the median
        put_ratio = median([s["put"] / b["put"] for s, b in zip(samples[name], naive, strict=True)])
        take_ratio = median([s["take"] / b["take"] for s, b in zip(samples[name], naive, strict=True)])
        last = samples[name][-1]
        tp[name] = {"put": put, "take": take, "put_vs_naive": put_ratio, "take_vs_naive": take_ratio,
                    "put_fsyncs_per_commit": last["put_fsyncs"] / last["put_commits"],
                    "take_fsyncs_per_commit": last["take_fsyncs"] / last["take_commits"]}
        rows.append([name, fmt_rate(put), fmt_rate(take), fmt_ratio(put_ratio), fmt_ratio(take_ratio),
                     f"{last['put_fsyncs']}/{last['put_commits']}", f"{last['take_fsyncs']}/{last['take_commits']}"])
    rows.append(["naive len+CRC32C file", fmt_rate(naive_put), fmt_rate(naive_take), "1.00x", "1.00x",
                 f"{n // batch}/-", "0/-"])
    print_table(f"1+2. Throughput: {size} B events, batches of {batch}, one fdatasync per commit "
                f"(events/s, median of {reps}; ratios: median of per-repeat ratios; "
                f"naive take = read the file + verify CRCs, no sync)",
                ["variant", "put ev/s", "take ev/s", "put/naive", "take/naive", "put fsyncs/commits",
                 "take fsyncs/commits"], rows)
    fsync_ms = median([s["fsync_ms"] for s in naive])
    print(f"  median fdatasync latency in the naive loop: {fsync_ms:.2f} ms "
          f"({batch * (size + 8) / 1024:.0f} KiB per sync)")
    results["throughput"] = tp
    results["naive"] = {"put": naive_put, "take": naive_take, "fsync_ms": fsync_ms}

    # 3: group commit
    threads, gcb, total_commits = args.threads, args.gc_batch, args.threads * args.gc_commits
    conc, seq, ceiling = [], [], []
    for r in range(reps):
        seq.append(bench_sequential_commit(fresh_dir(scratch, f"seq-{r}"), commits=total_commits, batch=gcb, size=size,
                                           fs=TimedSyncFileSystem()))
        conc.append(bench_group_commit(fresh_dir(scratch, f"gc-{r}"), threads=threads,
                                       commits=args.gc_commits, batch=gcb, size=size, fs=TimedSyncFileSystem()))
        ceiling.append(bench_sequential_commit(fresh_dir(scratch, f"pc-{r}"), commits=total_commits, batch=gcb,
                                               size=size, durability="page_cache"))
    sim_seq, sim_conc = [], []
    if args.sim_fsync_ms > 0:
        extra = args.sim_fsync_ms / 1000
        for r in range(reps):
            sim_seq.append(bench_sequential_commit(fresh_dir(scratch, f"sseq-{r}"), commits=threads * args.sim_commits,
                                                   batch=gcb, size=size, fs=TimedSyncFileSystem(extra)))
            sim_conc.append(bench_group_commit(fresh_dir(scratch, f"sgc-{r}"), threads=threads,
                                               commits=args.sim_commits, batch=gcb, size=size,
                                               fs=TimedSyncFileSystem(extra)))

    def gc_row(label: str, runs: list[dict[str, float]]) -> list[str]:
        rate = median([r_["events"] for r_ in runs])
        last = runs[-1]
        sync_ms = median([r_["sync_ms"] for r_ in runs])
        busy = median([r_["sync_busy"] for r_ in runs])
        return [label, fmt_rate(rate), fmt_rate(rate / gcb), f"{last['fsyncs']}/{last['n_commits']}",
                f"{median([r_['n_commits'] / max(1, r_['fsyncs']) for r_ in runs]):.1f}",
                "-" if sync_ms != sync_ms else f"{sync_ms:.2f}", "-" if busy != busy else f"{100 * busy:.0f}%"]

    gc_ratio = median([c["events"] / s_["events"] for c, s_ in zip(conc, seq, strict=True)])
    cpu_bound = median([p_["events"] / s_["events"] for p_, s_ in zip(ceiling, seq, strict=True)])
    rows = [gc_row("1 thread, sequential (one fsync per commit)", seq),
            gc_row(f"{threads} threads, concurrent (group commit)", conc),
            gc_row("1 thread, durability=page_cache (no fsync: CPU ceiling)", ceiling)]
    if sim_seq:
        rows += [gc_row(f"simulated +{args.sim_fsync_ms:g} ms fsync: 1 thread, sequential", sim_seq),
                 gc_row(f"simulated +{args.sim_fsync_ms:g} ms fsync: {threads} threads, concurrent", sim_conc)]
    print_table(f"3. Group commit: batches of {gcb} x {size} B, durability=fsync unless noted (median of {reps})",
                ["committers", "events/s", "commits/s", "fsyncs/commits (last run)", "commits per fsync",
                 "fdatasync ms (median)", "time a sync is in flight"], rows)
    print(f"  speed-up of {threads} concurrent committers over one fsync per commit: {gc_ratio:.2f}x "
          f"(median of per-run ratios)")
    print(f"  bound if a sync cost the same whatever it covers (CPU-only rate / fsync-per-commit rate): "
          f"{cpu_bound:.2f}x")
    results["group_commit"] = {"sequential": median([s_["events"] for s_ in seq]),
                               "concurrent": median([c["events"] for c in conc]), "ratio": gc_ratio,
                               "cpu_ceiling": median([p_["events"] for p_ in ceiling]), "cpu_bound_ratio": cpu_bound,
                               "commits_per_fsync": median([c["n_commits"] / c["fsyncs"] for c in conc]),
                               "sync_ms_sequential": median([s_["sync_ms"] for s_ in seq]),
                               "sync_ms_concurrent": median([c["sync_ms"] for c in conc])}
    if sim_seq:
        sim_ratio = median([c["events"] / s_["events"] for c, s_ in zip(sim_conc, sim_seq, strict=True)])
        print(f"  with a simulated {args.sim_fsync_ms:g} ms slower fsync: {sim_ratio:.2f}x")
        results["group_commit"]["simulated_ratio"] = sim_ratio

    # 4 + 5: replay and memory
    rp = {}
    scenarios = [("clean close, full replay", args.replay_events, size, False, False),
                 ("SIGKILL of the writer, full replay", args.replay_events, size, True, False)]
    if has_checkpoints():
        scenarios.append(("clean close, checkpoint (defaults)", args.replay_events, size, False, True))
    scenarios.append(("clean close, full replay, small bodies", args.large_events, args.large_event_size, False,
                      False))
    scenarios.append((FIXED, batch, size, False, False))  # the fixed RSS cost of an open (section 5)
    for label, events, esize, crash, ckpt in scenarios:
        if events <= 0:
            continue
        rp[label] = bench_replay(os.path.join(scratch, "replay"), events=events, size=esize, batch=batch,
                                 repeats=reps if esize == size else min(reps, args.large_repeats), crash=crash,
                                 checkpoints=ckpt,
                                 profile=args.profile and not crash and not ckpt and esize == size and label != FIXED)
        rp[label]["event_size"] = esize
    rows = []
    for label, r_ in rp.items():
        if label == FIXED:
            continue
        rows.append([f"{r_['events']:,} x {r_['event_size']} B, {label}", f"{r_['reopen_s']:.2f}", fmt_rate(r_["rate"]),
                     fmt_rate(r_["frames_rate"]), str(r_["segments"]), fmt_rate(r_["write_rate"])])
    print_table(f"4. Reopen (FileChannel constructor) in a fresh process, page cache warm (median of {reps})",
                ["committed events, how the writer ended, how the reopen recovers", "reopen s", "events/s",
                 "frames/s in replay", "segments", "writer put ev/s"], rows)
    rows = []
    fixed = rp[FIXED]
    for label, r_ in rp.items():
        e = r_["events"]
        marginal = (r_["rss_growth_trim"] - fixed["rss_growth_trim"]) / (e - fixed["events"]) if label != FIXED else 0
        r_["rss_marginal_per_event"] = marginal
        rows.append([f"{e:,} x {r_['event_size']} B, {label}", f"{r_['queue_nbytes'] / (1 << 20):.1f}",
                     f"{r_['queue_nbytes'] / e:.2f}", f"{r_['rss_growth'] / (1 << 20):.1f}",
                     f"{r_['rss_growth'] / e:.1f}", f"{r_['rss_growth_trim'] / (1 << 20):.1f}",
                     "-" if label == FIXED else f"{marginal:.1f}", f"{r_['peak_growth'] / (1 << 20):.0f}"])
    print_table("5. Resident memory per queued event after the reopen (RSS of the reopening process, psutil)",
                ["queued events", "queue MiB", "queue B/event", "RSS growth MiB", "RSS B/event",
                 "RSS growth after trim*** MiB", "marginal RSS B/event**", "peak RSS growth MiB*"], rows)
    print("  * peak RSS during the open includes the pages of the mmapped segment being scanned and the replay's "
          "temporary Python lists")
    print(f"  ** (RSS growth after trim - that of the {fixed['events']:,}-event open) / extra events: the fixed "
          "cost of an open (libraries initialised on first use, segment writer) taken out; about +-1 MiB of noise, "
          "so meaningful from about a million events")
    print("  *** after glibc malloc_trim(0) and, if pyarrow is loaded, releasing Arrow's memory pool: memory "
          "the open still holds, not freed blocks kept by allocators")
    results["replay"] = {k: {kk: vv for kk, vv in v.items() if kk != "profile"} for k, v in rp.items()}

    # targets
    many = tp["put_many"]
    clean = rp["clean close, full replay"]
    crashed = rp["SIGKILL of the writer, full replay"]
    worst_queue = max(r_["queue_nbytes"] / r_["events"] for r_ in rp.values())
    checks = [
        ("put_many put >= 150k ev/s", f"{fmt_rate(many['put'])}", many["put"] >= TARGET_RATE),
        ("put loop put >= 150k ev/s", f"{fmt_rate(tp['put loop']['put'])}", tp["put loop"]["put"] >= TARGET_RATE),
        ("take >= 150k ev/s", f"{fmt_rate(many['take'])}", many["take"] >= TARGET_RATE),
        ("put_many + headers put >= 150k ev/s", fmt_rate(tp["put_many + 2 headers"]["put"]),
         tp["put_many + 2 headers"]["put"] >= TARGET_RATE),
        ("take with headers >= 150k ev/s", fmt_rate(tp["put_many + 2 headers"]["take"]),
         tp["put_many + 2 headers"]["take"] >= TARGET_RATE),
        ("put_many put >= 0.75x naive", fmt_ratio(many["put_vs_naive"]), many["put_vs_naive"] >= TARGET_NAIVE_RATIO),
        ("put loop put >= 0.75x naive", fmt_ratio(tp["put loop"]["put_vs_naive"]),
         tp["put loop"]["put_vs_naive"] >= TARGET_NAIVE_RATIO),
        ("take >= 0.75x naive read-back", fmt_ratio(many["take_vs_naive"]),
         many["take_vs_naive"] >= TARGET_NAIVE_RATIO),
        ("group commit >= 4x one fsync per commit", fmt_ratio(gc_ratio), gc_ratio >= TARGET_GROUP_COMMIT),
        ("full replay after clean close >= 200k ev/s", fmt_rate(clean["rate"]), clean["rate"] >= TARGET_REPLAY_RATE),
        ("full replay after SIGKILL >= 200k ev/s", fmt_rate(crashed["rate"]), crashed["rate"] >= TARGET_REPLAY_RATE),
        ("queue structure <= 16 B/event", f"{worst_queue:.2f} B", worst_queue <= TARGET_QUEUE_BYTES),
    ]
    print_table("Targets", ["target", "measured", "verdict"], [[c, m, verdict(ok)] for c, m, ok in checks])
    results["targets"] = {c: {"measured": m, "met": ok} for c, m, ok in checks}

    if args.profile:
        profile_section(os.path.join(scratch, "profile"), events=n, size=size, batch=batch)
        for label, r_ in rp.items():
            if r_.get("profile"):
                print(f"\n--- profile: reopen, {r_['events']:,} events, {label} ---")
                print(r_["profile"])
    load = os.getloadavg()
    results["load_end"] = load
    print(f"\nload average at the end (1/5/15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"on {os.cpu_count()} CPUs (this benchmark alone keeps about 1 busy)")
    print(f"total wall time {time.perf_counter() - wall:.0f} s")
    return results


if __name__ == "__main__":
    sys.exit(main())
