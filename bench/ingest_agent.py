"""End-to-end durable ingest through a real agent process: gRPC puts and HTTP posts.

Run from the repository root with the project's virtualenv::

    python bench/ingest_agent.py            # defaults: 400,000 events per measurement, 5 repeats (~1 min)
    python bench/ingest_agent.py --quick    # smoke run
    python bench/ingest_agent.py --help

Per repeat, in this order (so that disk-speed drift hits every row alike):

1. **in-process baseline**: ``--clients`` threads put batches of ``--batch-size`` events of
   ``--event-size`` bytes into a ``FileChannel`` in this process (fsync per commit, group commit
   across the threads), with a batch id as commit tag like the remote paths;
2. **gRPC**: an agent child process (``ingest-toolkit agent``, ephemeral ports from its ports
   file); ``--clients`` threads, each with its own ``AgentClient``, ``put`` the same batches with
   batch ids; each call returns after the agent's durable commit;
3. **HTTP**: the same agent's HTTP source; ``--clients`` threads, each with a keep-alive
   connection, POST ``text/plain`` bodies (one event per line) with an ``X-Batch-Id`` header.

Events/s is events acknowledged / wall time of the phase. The ratios divide by the in-process
rate of the same repeat; each printed figure is the median over repeats. Each phase also prints
the CPU it used, in cores (CPU seconds / wall seconds): of this process (the in-process channel,
or the clients), and of the agent (``/proc/<pid>/stat``). An agent near 1.0 core is bound by the
GIL of its one Python process. Channel settings are the
defaults (``durability="fsync"``) except for sizes and ``min_free_bytes``. Everything lives in a
temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import http.client
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ingest_toolkit.channel import Event, FileChannel  # noqa: E402
from ingest_toolkit.rpc.client import AgentClient  # noqa: E402

CHANNEL: dict[str, Any] = {"capacity": 5_000_000, "transaction_capacity": 10_000, "min_free_bytes": 0,
           "max_file_size": 256 << 20, "checkpoint_interval": 30.0}


def main() -> None:
    args = _parse()
    root = Path(tempfile.mkdtemp(prefix="bench-agent-", dir=args.dir))
    print(f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}; "
          f"load avg {os.getloadavg()[0]:.2f}")
    print(f"{args.events:,} events/measurement, {args.event_size} B bodies, batches of {args.batch_size}, "
          f"{args.clients} concurrent clients, {args.repeats} repeats\n")
    rows: dict[str, list[float]] = {"in-process": [], "grpc": [], "http": []}
    cores: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    try:
        for repeat in range(args.repeats):
            with _cpu(None) as used:
                rows["in-process"].append(_in_process(root / f"inproc-{repeat}", args))
            cores["in-process"].append(used())
            agent = _Agent(root / f"agent-{repeat}", args)
            try:
                with _cpu(agent.proc.pid) as used:
                    rows["grpc"].append(_run_clients(args, lambda i, a=agent: _grpc_client(a, i, args)))  # type: ignore[misc]
                cores["grpc"].append(used())
                with _cpu(agent.proc.pid) as used:
                    rows["http"].append(_run_clients(args, lambda i, a=agent: _http_client(a, i, args)))  # type: ignore[misc]
                cores["http"].append(used())
            finally:
                agent.stop()
                for leftover in root.iterdir():  # keeps disk use to one repeat's data
                    shutil.rmtree(leftover, ignore_errors=True)
            print(f"repeat {repeat + 1}: " + ", ".join(
                f"{k} {v[-1]:,.0f} ev/s (cores: this process {cores[k][-1][0]:.2f}"
                + (f", agent {cores[k][-1][1]:.2f})" if k != "in-process" else ")") for k, v in rows.items()))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _report(rows, args)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=400_000, help="events per measurement")
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (threads)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", help="parent of the temporary directory")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="40,000 events, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.events, args.repeats = 40_000, 1
    return args


@contextmanager
def _cpu(agent_pid: int | None) -> Iterator[Callable[[], tuple[float, float]]]:
    """Cores used during the block: (this process, the agent); read after the block ends."""
    figures: list[float] = []
    own, agent, wall = time.process_time(), _process_cpu(agent_pid), time.perf_counter()
    yield lambda: (figures[0], figures[1])
    seconds = time.perf_counter() - wall
    figures[:] = [(time.process_time() - own) / seconds, (_process_cpu(agent_pid) - agent) / seconds]


def _process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of ``pid`` so far; 0 without one or without /proc."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _batches_of(client: int, args: argparse.Namespace) -> range:
    per_client = args.events // args.batch_size // args.clients
    return range(client * per_client, (client + 1) * per_client)


def _events(args: argparse.Namespace) -> list[Event]:
    body = b"x" * args.event_size
    return [Event(body, {}) for _ in range(args.batch_size)]


def _run_clients(args: argparse.Namespace, client: Callable[[int], int]) -> float:
    """Events/s of ``--clients`` threads running ``client(index) -> events acknowledged``."""
    done: list[int] = []
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            done.append(client(index))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(args.clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    return sum(done) / seconds


def _in_process(directory: Path, args: argparse.Namespace) -> float:
    channel = FileChannel(checkpoint_dir=str(directory / "cp"), data_dirs=[str(directory / "data")], **CHANNEL)
    events = _events(args)

    def client(index: int) -> int:
        for batch in _batches_of(index, args):
            with channel.transaction(tag=f"inproc-{batch}") as tx:
                tx.put_many(events)
        return int(len(_batches_of(index, args)) * args.batch_size)

    try:
        return _run_clients(args, client)
    finally:
        channel.close()


def _grpc_client(agent: _Agent, index: int, args: argparse.Namespace) -> int:
    events = _events(args)
    accepted: int = 0
    with AgentClient(f"127.0.0.1:{agent.ports['grpc']}") as client:
        for batch in _batches_of(index, args):
            accepted += client.put(events, channel="events", batch_id=f"grpc-{batch}").accepted
    return accepted


def _http_client(agent: _Agent, index: int, args: argparse.Namespace) -> int:
    body = (b"y" * args.event_size + b"\n") * args.batch_size
    accepted = 0
    connection = http.client.HTTPConnection("127.0.0.1", agent.ports["sources"]["web"], timeout=60)
    connection.connect()
    # http.client sends headers and body in two writes: without TCP_NODELAY, Nagle + delayed ACK
    # stall each request by up to 40 ms.
    connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for batch in _batches_of(index, args):
            connection.request("POST", "/events/events", body=body,
                               headers={"Content-Type": "text/plain", "X-Batch-Id": f"http-{batch}"})
            response = connection.getresponse()
            doc = json.loads(response.read())
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {doc}")
            accepted += int(doc["accepted"])
    finally:
        connection.close()
    return accepted


class _Agent:
    """An ``ingest-toolkit agent`` child process on ephemeral ports."""

    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        root.mkdir(parents=True)
        ports_file = root / "ports.json"
        channel = "".join(f"{k} = {v!r}\n" for k, v in CHANNEL.items())
        (root / "agent.toml").write_text(
            f'[agent]\nstate_dir = "{root / "state"}"\nports_file = "{ports_file}"\nlog_level = "WARNING"\n'
            '[agent.grpc]\nport = 0\n[agent.admin]\nport = 0\n'
            f'[channels.events]\ncheckpoint_dir = "{root / "cp"}"\ndata_dirs = ["{root / "data"}"]\n{channel}'
            f'[sources.web]\ntype = "http"\nchannels = ["events"]\nmax_request_bytes = {64 << 20}\n')
        self._log = (root / "agent.log").open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf",
                                      str(root / "agent.toml")], cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT)
        self.ports = self._wait_ready(ports_file)

    def _wait_ready(self, ports_file: Path) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}")
            try:
                ports: dict[str, Any] = json.loads(ports_file.read_text())
                if ports.get("pid") == self.proc.pid:
                    return ports
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise RuntimeError("agent did not start within 60s")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self._log.close()


def _report(rows: dict[str, list[float]], args: argparse.Namespace) -> None:
    base = rows["in-process"]
    print(f"\n| path | events/s (median of {len(base)}) | runs | vs in-process (median of per-repeat ratios) |")
    print("|---|---|---|---|")
    figures: dict[str, Any] = {}
    for name, values in rows.items():
        ratio = statistics.median(v / b for v, b in zip(values, base, strict=True))
        runs = " / ".join(f"{v / 1000:,.0f}k" for v in values)
        print(f"| {name} | **{statistics.median(values):,.0f}** | {runs} | {ratio:.2f}x |")
        figures[name] = {"events_per_s": values, "median": statistics.median(values), "ratio": ratio}
    print(f"\ntarget gRPC >= 0.5x in-process: {'met' if figures['grpc']['ratio'] >= 0.5 else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
