"""Durable ingest and remote take through the agent's gRPC API, against the in-process channel.

Run from the repository root with the project's virtualenv::

    python bench/ingest_grpc.py            # defaults: about 30 s on 2 CPUs
    python bench/ingest_grpc.py --quick    # smoke run
    python bench/ingest_grpc.py --help

What one run measures (each figure the median of ``--repeats`` rounds; every round measures the
in-process baseline and the gRPC path one after the other, so a change of disk speed hits both):

1. put: ``--events`` events of ``--event-size`` bytes in batches of ``--batch`` (one transaction
   and one fdatasync per batch, ``durability="fsync"``). In-process: ``tx.put_many`` on a
   FileChannel in this process. gRPC: ``AgentClient.put`` to an agent server running in a child
   process (its put handler does the same ``tx.put_many`` per batch), one client thread, and again
   with ``--clients`` client threads (their commits share fsyncs). Ratio gRPC / in-process.
2. take: the same events taken back in transactions of ``--batch`` and committed (one fsync each).
   In-process ``tx.take``; gRPC ``AgentClient.open_take`` + ``commit``. Ratio.

The server is a separate process, as the agent is in production, so client and server each have
a core; the loopback network is in the path, TLS and auth are off.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest_toolkit.channel import Event, FileChannel  # noqa: E402
from ingest_toolkit.rpc import AgentClient, AgentService, channel_put_handler, start_server  # noqa: E402


def channel_settings(root: Path) -> dict[str, Any]:
    return {"checkpoint_dir": str(root / "checkpoint"), "data_dirs": [str(root / "data")], "min_free_bytes": 0,
            "capacity": 10_000_000, "durability": "fsync"}


# -- the agent side (child process) --------------------------------------------------------
def serve(root: Path, *, tune_gc: bool = False) -> None:
    """Serve one channel until stdin closes; print the port first. ``tune_gc``: with the agent
    process's GC settings (``bench/peers.py`` measures the agent as it runs)."""
    channels = {"bench": FileChannel(**channel_settings(root))}
    server = start_server(AgentService(channels, channel_put_handler(channels)))
    if tune_gc:
        from ingest_toolkit.collect.cli import tune_gc_for_service

        tune_gc_for_service()
    print(server.port, flush=True)
    sys.stdin.read()
    server.stop(1)
    channels["bench"].close()


# -- measurements ---------------------------------------------------------------------------
def batches(n: int, size: int, batch: int) -> list[list[Event]]:
    body = os.urandom(size)
    return [[Event(body) for _ in range(min(batch, n - i))] for i in range(0, n, batch)]


def timed(fn: Callable[[], int]) -> float:
    start = time.perf_counter()
    count = fn()
    return count / (time.perf_counter() - start)


def local_put(ch: FileChannel, work: list[list[Event]]) -> int:
    for events in work:
        with ch.transaction() as tx:
            tx.put_many(events)
    return sum(map(len, work))


def local_take(ch: FileChannel, batch: int) -> int:
    total = 0
    while True:
        with ch.transaction() as tx:
            got = len(tx.take(batch))
        if not got:
            return total
        total += got


def remote_put(client: AgentClient, work: list[list[Event]], threads: int = 1) -> int:
    if threads == 1:
        for events in work:
            client.put(events, channel="bench")
        return sum(map(len, work))
    shares = [work[i::threads] for i in range(threads)]
    workers = [threading.Thread(target=remote_put, args=(client, share)) for share in shares]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(map(len, work))


def remote_take(client: AgentClient, batch: int) -> int:
    total = 0
    while True:
        with client.open_take("bench", batch) as take:
            got = len(take.events)
        if not got:
            return total
        total += got


def one_round(args: argparse.Namespace, ch: FileChannel, client: AgentClient) -> dict[str, float]:
    work = batches(args.events, args.event_size, args.batch)
    return {
        "put_local": timed(lambda: local_put(ch, work)),
        "take_local": timed(lambda: local_take(ch, args.batch)),
        "put_grpc": timed(lambda: remote_put(client, work)),
        "take_grpc": timed(lambda: remote_take(client, args.batch)),
        f"put_grpc_{args.clients}_clients": timed(lambda: remote_put(client, work, args.clients)),
        "take_grpc_again": timed(lambda: remote_take(client, args.batch)),
    }


def report(rounds: list[dict[str, float]], args: argparse.Namespace) -> None:
    med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(f"\n{args.events} events of {args.event_size} B, batches of {args.batch}, fsync per commit, "
          f"median of {len(rounds)} rounds (events/s)")
    many = f"put_grpc_{args.clients}_clients"
    rows = [("put, in-process (baseline)", "put_local", "put_local"),
            ("put, gRPC, 1 client", "put_grpc", "put_local"),
            (f"put, gRPC, {args.clients} client threads", many, "put_local"),
            ("take+commit, in-process (baseline)", "take_local", "take_local"),
            ("take+commit, gRPC", "take_grpc", "take_local")]
    for label, key, base in rows:
        ratios = [r[key] / r[base] for r in rounds]
        print(f"  {label:40s} {med[key]:>10,.0f}   ratio {statistics.median(ratios):.2f}x "
              f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20k events, 1 round")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temporary directory")
    parser.add_argument("--child-serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_serve:
        serve(args.child_serve)
        return 0
    if args.quick:
        args.events, args.repeats = 20_000, 1
    print(f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f}")
    root = Path(tempfile.mkdtemp(prefix="bench-grpc-", dir=args.dir))
    child = subprocess.Popen([sys.executable, __file__, "--child-serve", str(root / "served")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        client = AgentClient(f"127.0.0.1:{port}")
        ch = FileChannel(**channel_settings(root / "local"))
        rounds = []
        for i in range(args.repeats):
            rounds.append(one_round(args, ch, client))
            print(f"round {i + 1}: " + ", ".join(f"{k} {v:,.0f}" for k, v in rounds[-1].items()), flush=True)
        report(rounds, args)
        ch.close()
        client.close()
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
