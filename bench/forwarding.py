"""Edge-to-aggregator forwarding against direct gRPC ingest into the aggregator, real agent processes.

Run from the repository root with the project's virtualenv::

    python bench/forwarding.py            # defaults: about 1 min on 2 CPUs
    python bench/forwarding.py --quick    # smoke run
    python bench/forwarding.py --help

Two agent processes (``ingest-toolkit agent``): an aggregator, and an edge whose forward sink
puts into the aggregator's channel (``batch_size`` ``--sink-batch``, ``linger`` 5 ms). Both
channels fsync every commit (``durability = "fsync"``, the default). Events are ``--event-size``
bytes. Per repeat, in this order (disk-speed drift hits both):

1. **direct**: ``--clients`` threads put ``--events`` events in batches of ``--batch`` straight
   into the aggregator (``AgentClient.put_columns`` with batch ids). Events/s = events acked /
   wall time.
2. **through the edge**: the same threads put the same number of events into the edge, which
   forwards them at the same time. Events/s = events / wall time from the first put until the
   aggregator's channel holds them all (committed there; polled with the status call). Three
   processes (producers, edge, aggregator) share the machine's cores here.
3. **forwarding alone**: the edge is filled while its aggregator is down (the sink backs off),
   then the aggregator starts; events/s = events / time from the aggregator being ready until it
   holds them all. This is the forwarding stage's own rate (producers idle).

The ratios to direct ingest are the figures the benchmark target is about (>= 0.5).

4. **one of two aggregators killed mid-put** (``--no-pair`` skips it): an edge with a failover
   group of two sinks (``a`` priority 10, ``b`` priority 5; the default penalties, 0.5 s doubling
   to 30 s) is filled while both aggregators are down, then restarted with both up (no penalty
   or reconnect backoff left from the fill). *Healthy*: events/s into ``a`` (the group's choice)
   from its first event until the edge has forwarded everything: the single-aggregator rate of
   this edge. *One killed*, on a fresh pair: once ``a`` holds a tenth of the events it is frozen
   (SIGSTOP) while the edge has puts in flight to it, then SIGKILLed, so those batches are in
   doubt; events/s = what ``b`` received from the kill until the edge has nothing left but the
   batches in doubt, divided by that time. The ratio of the two is the target of issue 32
   (>= 0.8). Then ``a`` is restarted on its directories and port: the edge asks it about the
   batches in doubt (it re-puts them with their ids), and ``a`` plus ``b`` must hold every event
   once (checked, printed). The ratio to (3), whose timing includes the edge reconnecting to an
   aggregator it could not reach while it was filled, is printed too.

Then **latency** at ``--rate`` events/s: one thread puts batches of ``--latency-batch`` into the
edge on a fixed schedule for ``--seconds``; a reader takes from the aggregator in a loop (leased
remote takes, ``commit_and_take``). Per batch: from the edge's ack of the put to the moment the
reader received its first event from the aggregator - an upper bound of "ack at the edge to
commit at the aggregator" that includes the reader's take round trip. p50 / p99 / max.

Each measurement uses fresh agents in a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest_toolkit.channel import EventColumns  # noqa: E402
from ingest_toolkit.rpc.client import AgentClient  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AgentProc:
    def __init__(self, root: Path, name: str, extra: str = "", port: int | None = None, admin: bool = False) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.admin = free_port() if admin else None
        self.ports_file = root / "ports.json"
        admin_table = f"port = {self.admin}" if admin else "enabled = false"
        conf = root / "agent.toml"
        conf.write_text(
            f'[agent]\nname = "{name}"\nstate_dir = "{root / "state"}"\nports_file = "{self.ports_file}"\n'
            f'log_level = "WARNING"\n[agent.grpc]\nport = {self.port}\n[agent.admin]\n{admin_table}\n'
            f'[channels.events]\ncheckpoint_dir = "{root / "cp"}"\ndata_dirs = ["{root / "data"}"]\n'
            'capacity = 5000000\ntransaction_capacity = 100000\nmin_free_bytes = 0\n' + extra)
        self.log = (root / "agent.log").open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf", str(conf)],
                                     cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if json.loads(self.ports_file.read_text()).get("pid") == self.proc.pid:
                    return
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"agent {name} exited: see {root / 'agent.log'}")
            time.sleep(0.05)
        raise SystemExit(f"agent {name} not ready")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(60)
        self.log.close()

    def unforwarded(self, group: str) -> int:
        """The group's ``ingest_sink_group_unforwarded_events`` (a metrics scrape: much cheaper for
        the edge than its /status, which recounts the channel's checkpoint)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(f'ingest_sink_group_unforwarded_events{{group="{group}"}} '):
                    return int(float(line.rsplit(" ", 1)[1]))
        raise RuntimeError("no ingest_sink_group_unforwarded_events in the edge's metrics")

    def group_status(self, group: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/status", timeout=10) as response:
            return dict(json.loads(response.read())["sinks"][group])


def columns(n: int, size: int, tag: str) -> EventColumns:
    pad = os.urandom(size // 2).hex()[: max(0, size - len(tag) - 12)]
    return EventColumns([f"{tag}-{i:08d}-{pad}".encode()[:size] for i in range(n)])


def put_all(address: str, total: int, batch: int, clients: int, size: int, prefix: str) -> None:
    per = total // clients

    def worker(c: int) -> None:
        with AgentClient(address) as client:
            for b in range(0, per, batch):
                client.put_columns(columns(min(batch, per - b), size, f"{prefix}{c}"), channel="events",
                                   batch_id=f"{prefix}-{c}-{b}")

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def queued(address: str) -> int:
    with AgentClient(address) as client:
        return int(client.status("events")["queue_size"])


PARALLEL = 1
PIPELINE = 2


def sink_conf(address: str, batch: int) -> str:
    return (f'[sinks.up]\ntype = "forward"\nchannel = "events"\naddress = "{address}"\n'
            f'downstream_channel = "events"\nbatch_size = {batch}\nlinger = 0.005\nparallel_puts = {PARALLEL}\n'
            f'pipeline = {PIPELINE}\n'
            '[sink_groups.g]\nsinks = ["up"]\nmin_penalty = 0.02\nmax_penalty = 0.05\n')


def wait_queued(address: str, count: int) -> None:
    while queued(address) < count:
        time.sleep(0.01)


def throughput(root: Path, args: argparse.Namespace, repeat: int) -> tuple[float, float, float]:
    agg = AgentProc(root / f"direct-{repeat}", "agg")
    try:
        started = time.perf_counter()
        put_all(agg.address, args.events, args.batch, args.clients, args.event_size, "d")
        direct = args.events / (time.perf_counter() - started)
    finally:
        agg.stop()
    agg = AgentProc(root / f"agg-{repeat}", "agg")
    edge = AgentProc(root / f"edge-{repeat}", "edge", extra=sink_conf(agg.address, args.sink_batch))
    try:
        started = time.perf_counter()
        put_all(edge.address, args.events, args.batch, args.clients, args.event_size, "f")
        wait_queued(agg.address, args.events)
        forwarded = args.events / (time.perf_counter() - started)
    finally:
        edge.stop()
        agg.stop()
    port = free_port()  # the edge is filled while its aggregator is down, then drains into it
    edge = AgentProc(root / f"fill-edge-{repeat}", "edge", extra=sink_conf(f"127.0.0.1:{port}", args.sink_batch))
    try:
        put_all(edge.address, args.events, args.batch, args.clients, args.event_size, "s")
        agg = AgentProc(root / f"drain-agg-{repeat}", "agg", port=port)
        try:
            started = time.perf_counter()
            wait_queued(agg.address, args.events)
            drained = args.events / (time.perf_counter() - started)
        finally:
            agg.stop()
    finally:
        edge.stop()
    return direct, forwarded, drained


def pair_conf(port_a: int, port_b: int, batch: int) -> str:
    """Two sinks in a failover group with the documented default penalties."""
    sinks = "".join(
        f'[sinks.{name}]\ntype = "forward"\nchannel = "events"\naddress = "127.0.0.1:{port}"\n'
        f'downstream_channel = "events"\nbatch_size = {batch}\nlinger = 0.005\nparallel_puts = {PARALLEL}\n'
        f'pipeline = {PIPELINE}\n' for name, port in (("a", port_a), ("b", port_b)))
    return sinks + '[sink_groups.g]\nsinks = ["a", "b"]\nprocessor = "failover"\npriorities = { a = 10, b = 5 }\n'


class Pair:
    """Case 4's agents: an edge filled with ``--events`` while both aggregators were down, then
    restarted with both up (a fresh start: no penalty or reconnect backoff left from the fill)."""

    def __init__(self, root: Path, args: argparse.Namespace, name: str) -> None:
        self.root, self.args, self.name = root, args, name
        self.ports = free_port(), free_port()
        conf = pair_conf(*self.ports, args.sink_batch)
        edge = AgentProc(root / f"{name}-edge", "edge", extra=conf, admin=True)
        try:
            put_all(edge.address, args.events, args.batch, args.clients, args.event_size, "k")
        finally:
            edge.stop()
        self.a = self.start_a()
        self.b = AgentProc(root / f"{name}-b", "b", port=self.ports[1])
        self.edge = AgentProc(root / f"{name}-edge", "edge", extra=conf, admin=True)

    def start_a(self) -> AgentProc:
        return AgentProc(self.root / f"{self.name}-a", "a", port=self.ports[0])

    def forwarded(self, pinned_to: str | None = None) -> bool:
        """Nothing left at the edge but batches pinned to ``pinned_to`` (in doubt there): first the
        cheap count (at most ``pipeline`` batches of ``--sink-batch`` may wait there), then the
        batches themselves."""
        if self.edge.unforwarded("g") > (PIPELINE * self.args.sink_batch if pinned_to else 0):
            return False
        status = self.edge.group_status("g")
        pinned = sum(r["count"] for r in status["inflight_batches"] if r["in_doubt"] == pinned_to)
        return self.edge.unforwarded("g") == pinned

    def stop(self) -> None:
        for agent in (self.edge, self.b, self.a):
            if agent.proc.poll() is None:
                agent.stop()


def rate_until(agg: AgentProc, done: Any, timeout: float) -> tuple[float, bool]:
    """Events/s into ``agg`` from now until ``done()``; and whether ``timeout`` cut it short."""
    started, before = time.perf_counter(), queued(agg.address)
    while not done() and time.perf_counter() - started < timeout:
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    return (queued(agg.address) - before) / elapsed, elapsed >= timeout


def healthy_pair(root: Path, args: argparse.Namespace, repeat: int) -> float:
    """Case 4, healthy: events/s into a (the failover group's choice while it answers) from its
    first event until the edge has forwarded everything."""
    pair = Pair(root, args, f"healthy-{repeat}")
    try:
        while queued(pair.a.address) == 0:
            time.sleep(0.005)
        rate, _late = rate_until(pair.a, pair.forwarded, args.pair_timeout)
    finally:
        pair.stop()
    return rate


def one_killed(root: Path, args: argparse.Namespace, repeat: int) -> tuple[float, str]:
    """Case 4, one killed: events/s into b from the kill of a (mid-put) until the edge has
    forwarded everything but the batches in doubt at a; then a returns and the check."""
    pair = Pair(root, args, f"killed-{repeat}")
    try:
        wait_queued(pair.a.address, args.events // 10)
        os.kill(pair.a.proc.pid, signal.SIGSTOP)  # mid-put: the puts in flight wait in a frozen process
        while not any(r["in_doubt"] == "a" for r in pair.edge.group_status("g")["inflight_batches"]):
            time.sleep(0.005)
        time.sleep(0.2)
        pair.a.kill()
        rate, late = rate_until(pair.b, lambda: pair.forwarded(pinned_to="a"), args.pair_timeout)
        in_doubt = len(pair.edge.group_status("g")["inflight_batches"])
        pair.a = pair.start_a()  # back: the batches in doubt are asked about there
        deadline = time.monotonic() + 120
        while not pair.forwarded() and time.monotonic() < deadline:
            time.sleep(0.05)
        held = queued(pair.a.address) + queued(pair.b.address)
        check = (f"{in_doubt} batches in doubt resolved at a; a + b hold {held:,} of {args.events:,} events"
                 + ("" if held == args.events else " (MISMATCH)")
                 + (f"; b had not received the rest after {args.pair_timeout:.0f} s (rate so far)" if late else ""))
    finally:
        pair.stop()
    return rate, check


def latency(root: Path, args: argparse.Namespace) -> list[float]:
    agg = AgentProc(root / "lat-agg", "agg")
    edge = AgentProc(root / "lat-edge", "edge", extra=sink_conf(agg.address, args.sink_batch))
    acked: dict[int, float] = {}
    seen: dict[int, float] = {}
    batches = int(args.rate * args.seconds / args.latency_batch)
    done = threading.Event()

    def reader() -> None:
        with AgentClient(agg.address) as client:
            take = client.open_take("events", 20_000, lease_seconds=60)
            while not done.is_set() or len(seen) < batches:
                now = time.perf_counter()
                for body in take.columns.bodies:
                    number = int(body.split(b"-", 2)[1])
                    seen.setdefault(number, now)
                take = take.commit_and_take(20_000)
                if not len(take.columns):
                    time.sleep(0.0005)
            take.commit()

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        with AgentClient(edge.address) as client:
            interval = args.latency_batch / args.rate
            start = time.perf_counter()
            for b in range(batches):
                target = start + b * interval
                delay = target - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                body = [f"l-{b:08d}-".encode().ljust(args.event_size, b"x") for _ in range(args.latency_batch)]
                client.put_columns(EventColumns(body), channel="events", batch_id=f"lat-{b}")
                acked[b] = time.perf_counter()
            late = time.perf_counter() - start - batches * interval
        deadline = time.monotonic() + 60
        while len(seen) < batches and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
        thread.join(70)
        edge.stop()
        agg.stop()
    if late > 1.0:
        print(f"  (the producer fell {late:.1f} s behind the {args.rate} events/s schedule)")
    return sorted(seen[b] - acked[b] for b in acked if b in seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1000, help="events per put of the producers")
    parser.add_argument("--sink-batch", type=int, default=8000, help="the forward sink's batch_size")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", type=int, default=10_000, help="events/s of the latency run")
    parser.add_argument("--latency-batch", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--parallel", type=int, default=2, help="the forward sink's parallel_puts")
    parser.add_argument("--pipeline", type=int, default=2, help="the forward sink's pipeline (batches in flight)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-pair", action="store_true", help="skip case 4 (one of two aggregators killed)")
    parser.add_argument("--no-latency", action="store_true", help="skip the latency run")
    parser.add_argument("--pair-timeout", type=float, default=300.0,
                        help="case 4 stops waiting for the live aggregator after this many seconds")
    args = parser.parse_args()
    global PARALLEL, PIPELINE
    PARALLEL, PIPELINE = args.parallel, args.pipeline
    if args.quick:
        args.events, args.repeats, args.seconds = 40_000, 1, 3.0
    root = Path(tempfile.mkdtemp(prefix="bench-forwarding-"))
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs; "
          f"{args.events} events of {args.event_size} B, producer batches of {args.batch}, {args.clients} clients, "
          f"sink batches of {args.sink_batch} in {args.parallel} parallel parts, {args.pipeline} in flight, fsync per "
          "commit on both agents")
    try:
        rows = []
        for repeat in range(args.repeats):
            direct, forwarded, drained = throughput(root, args, repeat)
            rows.append((direct, forwarded, drained))
            print(f"  repeat {repeat + 1}: direct {direct:,.0f} events/s; through the edge {forwarded:,.0f} "
                  f"(x{forwarded / direct:.2f}); edge draining into the aggregator {drained:,.0f} "
                  f"(x{drained / direct:.2f})")
        med = [statistics.median(r[i] for r in rows) for i in range(3)]
        ratios = [statistics.median(r[i] / r[0] for r in rows) for i in (1, 2)]
        print(f"throughput (median): direct {med[0]:,.0f} events/s; through the edge (producers and forwarding at "
              f"once) {med[1]:,.0f}, ratio {ratios[0]:.2f}; forwarding alone (a filled edge draining) "
              f"{med[2]:,.0f}, ratio {ratios[1]:.2f}")
        if not args.no_pair:
            pair = []
            for repeat in range(args.repeats):
                healthy = healthy_pair(root, args, repeat)
                killed, check = one_killed(root, args, repeat)
                pair.append((healthy, killed))
                print(f"  repeat {repeat + 1}: failover pair healthy, into a {healthy:,.0f} events/s; a killed "
                      f"mid-put, into b {killed:,.0f} events/s (x{killed / healthy:.2f}); forwarding alone into "
                      f"one aggregator {rows[repeat][2]:,.0f} (x{killed / rows[repeat][2]:.2f}); {check}")
            rates = [statistics.median(p[i] for p in pair) for i in (0, 1)]
            ratio = statistics.median(p[1] / p[0] for p in pair)
            print(f"one of two aggregators killed (median): healthy {rates[0]:,.0f} events/s into the one aggregator "
                  f"it uses, one killed {rates[1]:,.0f} events/s into the other, ratio {ratio:.2f} (target >= 0.8)")
        lat = [] if args.no_latency else latency(root, args)
        if lat:
            p = [lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 for q in (0.5, 0.99)]
            print(f"latency at {args.rate:,} events/s ({len(lat)} batches of {args.latency_batch}): edge ack -> "
                  f"visible at the aggregator p50 {p[0]:.1f} ms, p99 {p[1]:.1f} ms, max {lat[-1] * 1000:.1f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
