"""Restart and checkpoint benchmark of the durable file channel.

Run from the repository root with the project's virtualenv::

    python bench/channel_restart.py            # 1M and 10M queued events; about 2-4 minutes
    python bench/channel_restart.py --quick    # 100k and 1M queued events; about half a minute

It measures, each timing the median of ``--repeats`` runs unless noted:

1. **Restart after a clean close.** ``--events`` (1M) and ``--large-events`` (10M) events with
   ``--body-size``-byte bodies (16 B by default, so that 10M events are quick to build) are put
   and the channel is closed, which writes a checkpoint. A fresh process then opens the channel
   (it loads the checkpoint and replays nothing); the time of ``FileChannel(...)`` alone is
   measured, imports excluded, and the first take is checked. Targets: < 1 s and < 5 s.
2. **Restart after a crash.** A writer process with ``checkpoint_interval=0`` and
   ``checkpoint_on_close=False`` commits ``--crash-events`` (1M) events of ``--crash-body-size``
   bytes, reports, and is SIGKILLed: nothing was ever checkpointed, so the reopen (fresh
   process) replays every frame, then writes the checkpoint an open writes after replaying.
   Events per second of the whole open; target >= 200,000/s. The replay-only rate is shown too.
3. **How long a checkpoint blocks puts** with ``--large-events`` queued: a putter thread commits
   one-event put transactions (``durability=fsync``), pausing ``--put-pause-ms`` (1 ms) between
   them, while the main thread takes ``--checkpoints`` checkpoints. Reported: the longest
   ``blocked_seconds`` (the library's figure for the snapshot under the channel lock), and the
   longest put-commit latency of the commits that overlapped a checkpoint, against the longest
   latency of the same putter over an equally long stretch without a checkpoint. Target: <= 50 ms.
   Then ``--starve-runs`` checkpoints next to a putter committing *back to back* (no pause),
   each given ``--starve-cap`` seconds before the putter pauses: checkpoints used to wait for a
   moment with no commit sync in flight, which one busy committer never left (fixed; this row
   checks it stays fixed).
4. **The same with the backup copy on** (``backup_checkpoint_dir``, on the same disk here):
   ``blocked_seconds``, the longest put during the checkpoint, the whole checkpoint and the time
   of the backup copy alone, beside the plain figures. ``--no-backup`` skips it.

``--blocking-only`` builds the ``--large-events`` channel and runs sections 3 and 4 only.

The page cache is warm in every reopen (the files were just written); dropping caches needs
root on the host. Everything is written under a fresh temporary directory (or one made inside
``--dir``) that is removed at the end unless ``--keep`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

import psutil

from ingest_toolkit.channel import Event, FileChannel

TARGET_CLEAN_S = {"events": 1.0, "large": 5.0}
TARGET_CRASH_RATE = 200_000
TARGET_BLOCK_MS = 50.0
BATCH = 100_000


# -- helpers -------------------------------------------------------------------------------------
def settings(root: str, *, capacity: int, crash_writer: bool = False, durability: str = "fsync") -> dict[str, Any]:
    values: dict[str, Any] = {
        "checkpoint_dir": os.path.join(root, "checkpoint"),
        "data_dirs": [os.path.join(root, "data")],
        "capacity": max(capacity, BATCH),
        "transaction_capacity": BATCH,
        "max_file_size": 256 << 20,
        "durability": durability,
        "min_free_bytes": 0,
        "keep_alive": 0.0,
        "checkpoint_interval": 0.0,  # checkpoints happen where the benchmark says so
    }
    if crash_writer:
        values["checkpoint_on_close"] = False
    return values


def pool(size: int, body_size: int) -> list[Event]:
    """``size`` distinct events (reused for every batch: building them is not what is measured)."""
    return [Event((b"%016d" % i * (body_size // 16 + 1))[:body_size]) for i in range(size)]


def fill(ch: FileChannel, events: int, body_size: int) -> float:
    """Put ``events`` events in batches of BATCH; returns events/s."""
    batch = pool(min(BATCH, events), body_size)
    started = time.perf_counter()
    for k in range(0, events, BATCH):
        with ch.transaction() as tx:
            tx.put_many(batch[: min(BATCH, events - k)])
    return events / (time.perf_counter() - started)


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


def run_child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args], check=True, capture_output=True,
                         text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


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


# -- children ------------------------------------------------------------------------------------
def child_reopen(root: str, capacity: int, expect: int) -> int:
    """Open the channel at ``root`` in this fresh process; report the open and the first take."""
    before = rss()
    started = time.perf_counter()
    ch = FileChannel(**settings(root, capacity=capacity))
    opened = time.perf_counter() - started
    after = rss()
    started = time.perf_counter()
    with ch.transaction() as tx:
        first = tx.take(1000)
        tx.rollback()
    first_take = time.perf_counter() - started
    stats = ch.replay_stats
    report = {"seconds": opened, "queued": len(ch), "frames": stats.frames, "replay_seconds": stats.seconds,
              "problem": ch.checkpoint_problem, "first_take_ms": first_take * 1000, "took": len(first),
              "rss_growth": after - before,
              "open_checkpoint_s": ch.last_checkpoint.seconds if ch.last_checkpoint else 0.0}
    ch.close()
    if report["queued"] != expect or report["took"] != min(1000, expect):
        raise SystemExit(f"reopen found {report['queued']} events, expected {expect}")
    print(json.dumps(report), flush=True)
    return 0


def child_crash_writer(root: str, events: int, body_size: int) -> int:
    """Commit ``events`` events (nothing is ever checkpointed), report, wait to be SIGKILLed."""
    ch = FileChannel(**settings(root, capacity=events, crash_writer=True))
    rate = fill(ch, events, body_size)
    print(json.dumps({"committed": len(ch), "put_rate": rate}), flush=True)
    sys.stdin.read()  # the parent kills us here, so the newest segment stays unsealed
    return 0


# -- 1. clean restart ----------------------------------------------------------------------------
def build(root: str, events: int, body_size: int) -> dict[str, Any]:
    ch = FileChannel(**settings(root, capacity=events, durability="page_cache"))
    rate = fill(ch, events, body_size)
    started = time.perf_counter()
    ch.close()  # seals the segment and writes the checkpoint
    return {"put_rate": rate, "close_s": time.perf_counter() - started, "disk_bytes": dir_bytes(root)}


def bench_clean_restart(root: str, events: int, body_size: int, repeats: int) -> dict[str, Any]:
    built = build(root, events, body_size)
    runs = [run_child(["--child-reopen", root, str(events), str(events)]) for _ in range(repeats)]
    if any(r["frames"] or r["problem"] for r in runs):
        raise SystemExit(f"a clean restart replayed frames or rejected the checkpoint: {runs}")
    return {**built, "events": events, "reopen_s": median([r["seconds"] for r in runs]),
            "reopen_all_s": [round(r["seconds"], 3) for r in runs],
            "first_take_ms": median([r["first_take_ms"] for r in runs]),
            "rss_growth": median([r["rss_growth"] for r in runs])}


# -- 2. crash restart ----------------------------------------------------------------------------
def bench_crash_restart(root: str, events: int, body_size: int, repeats: int) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child-crash-writer", root, str(events), str(body_size)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if not line:
        raise SystemExit("crash writer exited before reporting")
    wrote = json.loads(line)
    pristine = root + ".pristine"
    shutil.copytree(root, pristine)  # every reopen starts from the crashed state
    runs = []
    for i in range(repeats):
        if i:
            shutil.rmtree(root)
            shutil.copytree(pristine, root)
        runs.append(run_child(["--child-reopen", root, str(events), str(events)]))
    shutil.rmtree(pristine)
    if any(r["frames"] < events for r in runs):
        raise SystemExit(f"the reopen after the crash did not replay every event: {runs}")
    return {"events": events, "body_size": body_size, "put_rate": wrote["put_rate"],
            "reopen_s": median([r["seconds"] for r in runs]),
            "reopen_all_s": [round(r["seconds"], 3) for r in runs],
            "rate": median([events / r["seconds"] for r in runs]),
            "replay_rate": median([events / r["replay_seconds"] for r in runs]),
            "frames": runs[0]["frames"], "open_checkpoint_s": median([r["open_checkpoint_s"] for r in runs])}


# -- 3. blocking ---------------------------------------------------------------------------------
class Putter(threading.Thread):
    """Commits one-event put transactions, ``pause`` seconds apart; records each commit's span."""

    def __init__(self, ch: FileChannel, pause: float) -> None:
        super().__init__(name="putter", daemon=True)
        self.ch, self.pause = ch, pause
        self.stop = threading.Event()
        self.spans: list[tuple[float, float]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        event = Event(b"p" * 16)
        try:
            while not self.stop.is_set():
                started = time.perf_counter()
                with self.ch.transaction() as tx:
                    tx.put(event)
                self.spans.append((started, time.perf_counter()))
                if self.pause:
                    time.sleep(self.pause)
        except BaseException as err:  # reported by the caller
            self.error = err

    def finish(self) -> None:
        self.stop.set()
        self.join()
        if self.error is not None:
            raise self.error


def _max_latency(spans: list[tuple[float, float]], start: float, end: float) -> tuple[float, int]:
    """Longest commit among those overlapping [start, end]; and how many there were."""
    hits = [b - a for a, b in spans if b >= start and a <= end]
    return (max(hits) if hits else float("nan")), len(hits)


def bench_blocking(ch: FileChannel, checkpoints: int, pause: float) -> dict[str, Any]:
    """Checkpoints next to a putter committing every ``pause`` seconds (plus its commit time)."""
    putter = Putter(ch, pause)
    putter.start()
    time.sleep(0.5)  # warm up
    results, baselines = [], []
    for _ in range(checkpoints):
        quiet_start = time.perf_counter()
        time.sleep(1.0)
        quiet_end = time.perf_counter()
        started = time.perf_counter()
        result = ch.checkpoint()
        ended = time.perf_counter()
        time.sleep(0.05)  # let commits that began during the checkpoint end
        # the baseline: an equally long stretch just before, without a checkpoint
        base, _ = _max_latency(putter.spans, max(quiet_start, quiet_end - (ended - started)), quiet_end)
        worst, commits = _max_latency(putter.spans, started, ended)
        if result.backup_error:
            raise SystemExit(f"the backup copy failed: {result.backup_error}")
        results.append({"blocked_ms": result.blocked_seconds * 1000, "checkpoint_s": result.seconds,
                        "backup_s": result.backup_seconds, "max_put_ms": worst * 1000, "commits_during": commits,
                        "queue_mb": result.meta.queue_bytes / 1e6})
        baselines.append(base * 1000)
    putter.finish()
    latencies = sorted(b - a for a, b in putter.spans)
    return {
        "pause_ms": pause * 1000,
        "runs": results,
        "blocked_ms_max": max(r["blocked_ms"] for r in results),
        "blocked_ms_median": median([r["blocked_ms"] for r in results]),
        "max_put_ms": max(r["max_put_ms"] for r in results),
        "max_put_ms_median": median([r["max_put_ms"] for r in results]),
        "baseline_max_put_ms": max(baselines),
        "checkpoint_s_median": median([r["checkpoint_s"] for r in results]),
        "backup_s_median": median([r["backup_s"] for r in results]),
        "put_p50_ms": latencies[len(latencies) // 2] * 1000,
        "put_p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "puts": len(latencies),
    }


def bench_starvation(ch: FileChannel, checkpoints: int, cap: float) -> dict[str, Any]:
    """Checkpoints next to a putter committing back to back; each gets at most ``cap`` seconds
    before the putter is paused (so that a starved checkpoint can finish)."""
    runs = []
    for _ in range(checkpoints):
        putter = Putter(ch, 0.0)
        putter.start()
        time.sleep(0.3)
        box: list[Any] = []
        started = time.perf_counter()
        worker = threading.Thread(target=lambda done=box: done.append(ch.checkpoint()))
        worker.start()
        worker.join(cap)
        starved = worker.is_alive()
        putter.finish()
        worker.join()
        runs.append({"starved": starved, "seconds": time.perf_counter() - started,
                     "blocked_ms": box[0].blocked_seconds * 1000,
                     "max_put_ms": _max_latency(putter.spans, started, started + cap)[0] * 1000})
    return {"runs": runs, "cap_s": cap, "starved": sum(r["starved"] for r in runs)}


# -- main ----------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000, help="queued events, clean restart (row 1)")
    p.add_argument("--large-events", type=int, default=10_000_000,
                   help="queued events, clean restart (row 2) and the blocking measurement")
    p.add_argument("--body-size", type=int, default=16, help="body bytes of the queued events (sections 1, 3)")
    p.add_argument("--crash-events", type=int, default=1_000_000, help="events committed before the crash")
    p.add_argument("--crash-body-size", type=int, default=256, help="body bytes in the crash restart")
    p.add_argument("--repeats", type=int, default=3, help="reopens per measurement; the median is shown")
    p.add_argument("--checkpoints", type=int, default=5, help="checkpoints taken under the putter (section 3)")
    p.add_argument("--put-pause-ms", type=float, default=1.0,
                   help="pause of the putter between its commits in section 3 (0: back to back)")
    p.add_argument("--starve-runs", type=int, default=2,
                   help="checkpoints next to a back-to-back putter (0: skip that row)")
    p.add_argument("--starve-cap", type=float, default=10.0,
                   help="seconds a checkpoint next to a back-to-back putter may take before the putter pauses")
    p.add_argument("--quick", action="store_true", help="100k/1M queued, 200k crash events, one repeat")
    p.add_argument("--no-backup", action="store_true", help="skip the checkpoints with the backup copy on")
    p.add_argument("--blocking-only", action="store_true",
                   help="build the --large-events channel and measure only how checkpoints block puts")
    p.add_argument("--dir", default=None, help="parent directory for the scratch directory (default: system temp)")
    p.add_argument("--keep", action="store_true", help="do not delete the scratch directory")
    p.add_argument("--json", default=None, help="also write the results as JSON to this file")
    p.add_argument("--child-reopen", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--child-crash-writer", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.events = min(args.events, 100_000)
        args.large_events = min(args.large_events, 1_000_000)
        args.crash_events = min(args.crash_events, 200_000)
        args.repeats = 1
        args.checkpoints = min(args.checkpoints, 3)
        args.starve_runs = min(args.starve_runs, 1)
        args.starve_cap = min(args.starve_cap, 3.0)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.child_reopen:
        root, capacity, expect = args.child_reopen
        return child_reopen(root, int(capacity), int(expect))
    if args.child_crash_writer:
        root, events, body_size = args.child_crash_writer
        return child_crash_writer(root, int(events), int(body_size))
    scratch = tempfile.mkdtemp(prefix="channel-restart-", dir=args.dir)
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


def run_blocking(args: argparse.Namespace, root: str, *,
                 backup: str | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Sections 3 (``backup`` None) and 4: checkpoints of the large channel next to a putter."""
    cfg = settings(root, capacity=args.large_events + 10_000_000)
    if backup:
        cfg["backup_checkpoint_dir"] = backup  # the open copies the checkpoint there first
    ch = FileChannel(**cfg)
    if len(ch) < args.large_events:  # the putters of earlier sections add events
        raise SystemExit(f"expected {args.large_events} queued events, found {len(ch)}")
    label = "with backup" if backup else "plain"
    try:
        blocking = bench_blocking(ch, args.checkpoints, args.put_pause_ms / 1000)
        for r in blocking["runs"]:
            print(f"  checkpoint of {args.large_events:,} ({label}): blocked {r['blocked_ms']:.1f} ms, whole "
                  f"{r['checkpoint_s']:.2f} s (backup copy {r['backup_s']:.2f} s), {r['commits_during']} puts "
                  f"during it, longest {r['max_put_ms']:.1f} ms")
        starvation = None
        if not backup and args.starve_runs:
            starvation = bench_starvation(ch, args.starve_runs, args.starve_cap)
        for r in starvation["runs"] if starvation else []:
            print(f"  checkpoint next to a back-to-back putter: {'STARVED, ' if r['starved'] else ''}"
                  f"{r['seconds']:.2f} s until done, blocked_seconds {r['blocked_ms']:.0f} ms, "
                  f"longest put meanwhile {r['max_put_ms']:.1f} ms")
    finally:
        ch.close()
    print(f"  load after the {label} checkpoints {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return blocking, starvation


def run_blocking_only(args: argparse.Namespace, scratch: str) -> dict[str, Any]:
    root = os.path.join(scratch, "clean-large")
    built = build(root, args.large_events, args.body_size)
    print(f"  built {args.large_events:,} events at {built['put_rate']:,.0f}/s")
    results: dict[str, Any] = {"parameters": {k: v for k, v in vars(args).items() if not k.startswith("child")}}
    results["blocking"], results["starvation"] = run_blocking(args, root, backup=None)
    if not args.no_backup:
        results["blocking_backup"], _ = run_blocking(args, root, backup=os.path.join(scratch, "backup"))
    print_blocking(args, results)
    return results


def print_blocking(args: argparse.Namespace, results: dict[str, Any]) -> None:
    rows = []
    for key, label in (("blocking", "plain"), ("blocking_backup", "backup on")):
        b = results.get(key)
        if b is None:
            continue
        target = f"<= {TARGET_BLOCK_MS:g} ms"
        rows += [
            [f"{label}: lock held (blocked_seconds), worst / median",
             f"{b['blocked_ms_max']:.1f} / {b['blocked_ms_median']:.1f} ms", target,
             verdict(b["blocked_ms_max"] <= TARGET_BLOCK_MS)],
            [f"{label}: longest put commit during a checkpoint, worst / median",
             f"{b['max_put_ms']:.1f} / {b['max_put_ms_median']:.1f} ms", target,
             verdict(b["max_put_ms"] <= TARGET_BLOCK_MS)],
            [f"{label}: same putter, longest commit without a checkpoint", f"{b['baseline_max_put_ms']:.1f} ms",
             "", ""],
            [f"{label}: whole checkpoint / of which the backup copy (median)",
             f"{b['checkpoint_s_median']:.2f} / {b['backup_s_median']:.2f} s", "", ""],
        ]
    print_table(f"Checkpoints with {args.large_events:,} queued next to a putter (worst and median of "
                f"{args.checkpoints})", ["measurement", "result", "target", "verdict"], rows)


def run(args: argparse.Namespace, scratch: str) -> dict[str, Any]:
    if args.blocking_only:
        print("File channel checkpoint blocking benchmark")
        print(f"  load at start   {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min)")
        return run_blocking_only(args, scratch)
    wall = time.perf_counter()
    print("File channel restart / checkpoint benchmark")
    print(f"  machine         {os.cpu_count()} CPUs, {psutil.virtual_memory().total / (1 << 30):.0f} GiB RAM, "
          f"{platform.python_implementation()} {platform.python_version()}, {platform.system()}")
    print(f"  load at start   {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min)")
    print(f"  parameters      {args.events:,} and {args.large_events:,} queued x {args.body_size} B; crash "
          f"{args.crash_events:,} x {args.crash_body_size} B; median of {args.repeats} reopen(s)"
          f"{' (--quick)' if args.quick else ''}")
    results: dict[str, Any] = {"parameters": {k: v for k, v in vars(args).items() if not k.startswith("child")}}

    clean = {}
    for key, n in (("events", args.events), ("large", args.large_events)):
        root = os.path.join(scratch, f"clean-{key}")
        clean[key] = bench_clean_restart(root, n, args.body_size, args.repeats)
        print(f"  built {n:,} events at {clean[key]['put_rate']:,.0f}/s, close with checkpoint "
              f"{clean[key]['close_s']:.2f} s, {clean[key]['disk_bytes'] / 1e6:,.0f} MB on disk; reopens "
              f"{clean[key]['reopen_all_s']} s")
        if key == "events":
            shutil.rmtree(root)
    results["clean"] = clean

    crash_root = os.path.join(scratch, "crash")
    crashed = bench_crash_restart(crash_root, args.crash_events, args.crash_body_size, args.repeats)
    shutil.rmtree(crash_root, ignore_errors=True)
    print(f"  crash writer committed {crashed['events']:,} events at {crashed['put_rate']:,.0f}/s; "
          f"reopens {crashed['reopen_all_s']} s")
    results["crash"] = crashed

    blocking, starvation = run_blocking(args, os.path.join(scratch, "clean-large"), backup=None)
    results["blocking"] = blocking
    results["starvation"] = starvation
    if not args.no_backup:
        results["blocking_backup"], _ = run_blocking(args, os.path.join(scratch, "clean-large"),
                                                     backup=os.path.join(scratch, "backup"))
    ev, lg = clean["events"], clean["large"]
    rows = [
        [f"clean restart, {ev['events']:,} queued x {args.body_size} B", f"{ev['reopen_s']:.3f} s",
         f"< {TARGET_CLEAN_S['events']:g} s", verdict(ev["reopen_s"] < TARGET_CLEAN_S["events"])],
        [f"clean restart, {lg['events']:,} queued x {args.body_size} B", f"{lg['reopen_s']:.3f} s",
         f"< {TARGET_CLEAN_S['large']:g} s", verdict(lg["reopen_s"] < TARGET_CLEAN_S["large"])],
        [f"crash restart, {crashed['events']:,} x {args.crash_body_size} B since last checkpoint (whole open)",
         f"{crashed['rate']:,.0f} ev/s", f">= {TARGET_CRASH_RATE:,} ev/s",
         verdict(crashed["rate"] >= TARGET_CRASH_RATE)],
        ["  - of which replay only", f"{crashed['replay_rate']:,.0f} ev/s", "", ""],
        [f"checkpoint with {lg['events']:,} queued: lock held (max blocked_seconds)",
         f"{blocking['blocked_ms_max']:.1f} ms", f"<= {TARGET_BLOCK_MS:g} ms",
         verdict(blocking["blocked_ms_max"] <= TARGET_BLOCK_MS)],
        [f"checkpoint with {lg['events']:,} queued: longest put commit during it",
         f"{blocking['max_put_ms']:.1f} ms", f"<= {TARGET_BLOCK_MS:g} ms",
         verdict(blocking["max_put_ms"] <= TARGET_BLOCK_MS)],
        ["  - same putter, longest commit without a checkpoint", f"{blocking['baseline_max_put_ms']:.1f} ms", "", ""],
    ]
    if starvation:
        worst = max(r["seconds"] for r in starvation["runs"])
        rows.append([f"checkpoint next to a back-to-back putter: time to finish (cap {args.starve_cap:g} s)",
                     f"{'> ' if starvation['starved'] else ''}{worst:.1f} s", "(no target)",
                     f"{starvation['starved']}/{len(starvation['runs'])} starved"])
    print_table("Restart and checkpoint figures (median of reopens; blocking: worst of "
                f"{len(blocking['runs'])} checkpoints)", ["measurement", "result", "target", "verdict"], rows)
    print(f"  clean restart details: first take of 1000 events {ev['first_take_ms']:.1f} / "
          f"{lg['first_take_ms']:.1f} ms, "
          f"RSS growth of the open {ev['rss_growth'] / 1e6:.0f} / {lg['rss_growth'] / 1e6:.0f} MB")
    print(f"  crash restart details: {crashed['frames']:,} frames replayed; the open's own checkpoint "
          f"{crashed['open_checkpoint_s']:.2f} s of the {crashed['reopen_s']:.2f} s open")
    print(f"  blocking details: median blocked {blocking['blocked_ms_median']:.1f} ms, median longest put "
          f"{blocking['max_put_ms_median']:.1f} ms, whole checkpoint {blocking['checkpoint_s_median']:.2f} s "
          f"(queue file {blocking['runs'][0]['queue_mb']:.0f} MB); putter p50 {blocking['put_p50_ms']:.2f} ms, "
          f"p99 {blocking['put_p99_ms']:.2f} ms over {blocking['puts']:,} puts")
    print_blocking(args, results)
    print(f"\ntotal wall time {time.perf_counter() - wall:.0f} s")
    return results


if __name__ == "__main__":
    sys.exit(main())
