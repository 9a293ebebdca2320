"""The wire path against the channel and two peers used as queues, in one run.

Run from the repository root with the project's virtualenv::

    python bench/peers.py              # 200,000 events of 256 B, medians of 3 (a few minutes)
    python bench/peers.py --quick      # 20,000 events, 1 round
    python bench/peers.py --only channel,grpc

Every path stores ``--events`` events of ``--event-size`` bytes in batches of ``--batch``, one
durable commit per batch, then takes them all back in batches of ``--batch``, one durable commit
per take; once without headers and once with 2 headers per event. Figures: events/s and CPU
microseconds per event of the client (this process) and of the server (the agent process, the
PostgreSQL or Redis server processes), each the median of ``--repeats`` rounds.

Paths:

* ``channel``: a FileChannel in this process, ``tx.put_columns`` / ``tx.take_columns``
  (``durability="fsync"``); there is no server, all CPU is the client's.
* ``grpc``: an agent gRPC server in a child process (``AgentService`` with the channel put
  handler, the same FileChannel settings), one client: ``AgentClient.put_columns`` (one
  round trip per batch), ``AgentClient.put_stream`` (the ordered put stream, 4 batches in
  flight), ``AgentClient.put`` with Event objects (the older API); takes with
  ``AgentClient.take_pipeline`` (``--take-window`` batches in flight, 4 by default; the rows
  ``grpc take`` and ``grpc take(stream)``) and with ``open_take`` + ``commit_and_take`` (one
  batch in flight; the row ``grpc take(1 in flight)``, after the ``put`` with Events).
* ``postgres``: its own ``initdb`` cluster on 127.0.0.1 in a temporary directory, ``fsync=on``,
  ``synchronous_commit=on``; put = one binary ``COPY`` per transaction, take =
  ``DELETE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING`` per transaction
  (``VACUUM ANALYZE`` between the load and the takes, untimed, as autovacuum would).
  Needs ``initdb``/``postgres`` on PATH (or under /usr/lib/postgresql) and ``psycopg``.
* ``redis``: ``redis-server`` in a temporary directory, ``appendonly yes``, ``appendfsync
  always``; put = ``MULTI`` + ``XADD`` per event + ``EXEC``, take = ``XREADGROUP`` + ``XACK`` (in
  one pipeline). Needs ``redis-server`` on PATH and the ``redis`` package.

A peer whose binaries or Python client are missing is skipped with one line.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest_grpc import channel_settings  # noqa: E402  (bench/ is this script's directory)
from ingest_grpc import serve as serve_channel  # noqa: E402

from ingest_toolkit.channel import Event, EventColumns, FileChannel  # noqa: E402
from ingest_toolkit.rpc import AgentClient  # noqa: E402

HEADERS = {"host": "web-01.example", "source": "app"}


# -- the agent (child process): bench/ingest_grpc.py's, with the agent process's GC settings --
def serve(root: Path) -> None:
    serve_channel(root, tune_gc=True)


# -- work -------------------------------------------------------------------------------
class Work:
    """The same events three ways: columns per batch, Event lists per batch, (body, keys, values)."""

    def __init__(self, n: int, size: int, batch: int, headers: bool) -> None:
        body = os.urandom(size)
        self.n, self.batch, self.headers = n, batch, headers
        sizes = [min(batch, n - i) for i in range(0, n, batch)]
        keys, values = list(HEADERS), list(HEADERS.values())
        self.columns = [EventColumns([body] * k, [0] * k, [len(keys) if headers else 0] * k,
                                     keys * k if headers else [], values * k if headers else [])
                        for k in sizes]
        self.events = [[Event(body, dict(HEADERS) if headers else {}) for _ in range(k)] for k in sizes]


class Meter:
    """Wall time and CPU time of this process and of the server processes."""

    def __init__(self, servers: Callable[[], list[psutil.Process]] = lambda: []) -> None:
        self._servers = servers

    def _cpu(self) -> tuple[float, float]:
        me = psutil.Process().cpu_times()
        server = 0.0
        for p in self._servers():
            try:
                t = p.cpu_times()
                server += t.user + t.system
            except psutil.Error:
                pass
        return me.user + me.system, server

    @contextmanager
    def measure(self, n: int, into: dict[str, float], key: str) -> Iterator[None]:
        c0, s0 = self._cpu()
        t0 = time.perf_counter()
        yield
        wall = time.perf_counter() - t0
        c1, s1 = self._cpu()
        into[key] = n / wall
        into[key + ":client_us"] = (c1 - c0) / n * 1e6
        into[key + ":server_us"] = (s1 - s0) / n * 1e6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- paths ------------------------------------------------------------------------------
def round_channel(root: Path, w: Work, out: dict[str, float], tag: str) -> None:
    ch = FileChannel(**channel_settings(root))
    m = Meter()
    with m.measure(w.n, out, f"channel put{tag}"):
        for cols in w.columns:
            with ch.transaction() as tx:
                tx.put_columns(cols)
    with m.measure(w.n, out, f"channel take{tag}"):
        got = 0
        while True:
            with ch.transaction() as tx:
                k = len(tx.take_columns(w.batch))
            if not k:
                break
            got += k
    assert got == w.n, got
    ch.close()


class Agent:
    def __init__(self, root: Path) -> None:
        self.child = subprocess.Popen([sys.executable, __file__, "--child-serve", str(root)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.child.stdout is not None
        self.port = int(self.child.stdout.readline())
        self.proc = psutil.Process(self.child.pid)

    def close(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(30)


def round_grpc(agent: Agent, w: Work, out: dict[str, float], tag: str, window: int = 4) -> None:
    client = AgentClient(f"127.0.0.1:{agent.port}")
    m = Meter(lambda: [agent.proc])

    def take_all() -> None:
        if getattr(client, "take_pipeline", None) is None:  # a client before the take window
            _grpc_take(client, w)
        else:
            _grpc_take_pipelined(client, w, window)

    put_columns = getattr(client, "put_columns", None)  # None: a client before the columnar put
    if put_columns is not None:
        with m.measure(w.n, out, f"grpc put{tag}"):
            for cols in w.columns:
                put_columns(cols, channel="bench")
        with m.measure(w.n, out, f"grpc take{tag}"):
            take_all()
    put_stream = getattr(client, "put_stream", None)  # None: a client before the ordered put stream
    if put_stream is not None:
        with m.measure(w.n, out, f"grpc put_stream{tag}"):
            for _ack in put_stream(((cols, None) for cols in w.columns), channel="bench", window=4):
                pass
        with m.measure(w.n, out, f"grpc take(stream){tag}"):
            take_all()
    with m.measure(w.n, out, f"grpc put(Event){tag}"):
        for events in w.events:
            client.put(events, channel="bench")
    with m.measure(w.n, out, f"grpc take(1 in flight){tag}"):
        _grpc_take(client, w)
    client.close()


def _grpc_take_pipelined(client: AgentClient, w: Work, window: int) -> None:
    got = 0
    with client.take_pipeline("bench", w.batch, window=window) as batches:
        for batch in batches:
            k = len(batch.columns)
            if not k:
                break  # the channel is empty: closing rolls back the (empty) batches in flight
            got += k
            batch.commit()
    assert got == w.n, got


def _grpc_take(client: AgentClient, w: Work) -> None:
    got = 0
    take = client.open_take("bench", w.batch)
    if getattr(take, "commit_and_take", None) is not None:  # one stream, one round trip per batch
        while len(take.columns):
            got += len(take.columns)
            take = getattr(take, "commit_and_take")(w.batch)  # noqa: B009
        take.commit()
    else:
        while True:
            with take:
                k = len(take.columns)
            if not k:
                break
            got += k
            take = client.open_take("bench", w.batch)
    assert got == w.n, got


# PostgreSQL
def pg_binaries() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    return Path(dirs[-1]) if dirs else None


class Postgres:
    def __init__(self, root: Path) -> None:
        import psycopg
        bindir = pg_binaries()
        assert bindir is not None
        self.data, self.port = root / "pg", free_port()
        env = {**os.environ, "LC_ALL": "C"}
        # PostgreSQL refuses to run as root: as root, run it as the postgres (or nobody) user
        user: str | None = None
        if os.geteuid() == 0:
            import pwd
            for name in ("postgres", "nobody"):
                try:
                    user = pwd.getpwnam(name).pw_name
                    break
                except KeyError:
                    continue
            assert user is not None, "no postgres or nobody user to run PostgreSQL as"
            self.data.mkdir()
            shutil.chown(self.data, user)
            shutil.chown(root, user)
        subprocess.run([str(bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "bench", "-E", "UTF8"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, user=user)
        self.server = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(root),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "synchronous_commit=on",
             "-c", "full_page_writes=on", "-c", "shared_buffers=128MB"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, user=user)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.conn = psycopg.connect(host="127.0.0.1", port=self.port, user="bench", dbname="postgres")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with self.conn.cursor() as cur:
            cur.execute("CREATE TABLE events (id bigserial PRIMARY KEY, body bytea NOT NULL, "
                        "header_keys text[], header_values text[])")
        self.conn.commit()
        self.proc = psutil.Process(self.server.pid)

    def processes(self) -> list[psutil.Process]:
        return [self.proc, *self.proc.children(recursive=True)]

    def close(self) -> None:
        self.conn.close()
        self.server.terminate()
        self.server.wait(30)


def round_postgres(pg: Postgres, w: Work, out: dict[str, float], tag: str) -> None:
    m, conn = Meter(pg.processes), pg.conn
    keys, values = list(HEADERS), list(HEADERS.values())
    cols = "(body, header_keys, header_values)" if w.headers else "(body)"
    types = ["bytea", "text[]", "text[]"] if w.headers else ["bytea"]
    with m.measure(w.n, out, f"postgres put{tag}"):
        for batch in w.columns:
            with conn.cursor() as cur:
                with cur.copy(f"COPY events {cols} FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(types)
                    if w.headers:
                        for body in batch.bodies:
                            copy.write_row((body, keys, values))
                    else:
                        for body in batch.bodies:
                            copy.write_row((body,))
            conn.commit()
    # What autovacuum does between loads, outside the timing: without statistics the planner
    # sorts the whole table (dead rows included) for every take
    conn.autocommit = True
    conn.execute("VACUUM ANALYZE events")
    conn.autocommit = False
    sql = ("DELETE FROM events WHERE id IN (SELECT id FROM events ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) "
           "RETURNING id, body, header_keys, header_values")
    with m.measure(w.n, out, f"postgres take{tag}"):
        got = 0
        while True:
            with conn.cursor() as cur:
                cur.execute(sql, (w.batch,))
                k = len(cur.fetchall())
            conn.commit()
            if not k:
                break
            got += k
    assert got == w.n, got
    conn.autocommit = True
    conn.execute("VACUUM events")
    conn.autocommit = False


# Redis
class Redis:
    def __init__(self, root: Path) -> None:
        import redis
        self.dir, self.port = root / "redis", free_port()
        self.dir.mkdir()
        self.server = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.r = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.r.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.proc = psutil.Process(self.server.pid)
        self.rounds = 0

    def processes(self) -> list[psutil.Process]:
        return [self.proc]

    def close(self) -> None:
        self.r.close()
        self.server.terminate()
        self.server.wait(30)


def round_redis(rd: Redis, w: Work, out: dict[str, float], tag: str) -> None:
    rd.rounds += 1
    r: Any = rd.r
    stream, group = f"events{rd.rounds}", "landing"
    r.xgroup_create(stream, group, id="0", mkstream=True)
    m = Meter(rd.processes)
    with m.measure(w.n, out, f"redis put{tag}"):
        for batch in w.columns:
            pipe = r.pipeline(transaction=True)
            for body in batch.bodies:
                pipe.xadd(stream, {"b": body, **HEADERS} if w.headers else {"b": body})
            pipe.execute()
    with m.measure(w.n, out, f"redis take{tag}"):
        got = 0
        while True:
            answer = r.xreadgroup(group, "c1", {stream: ">"}, count=w.batch)
            entries = answer[0][1] if answer else []
            if not entries:
                break
            r.xack(stream, group, *[e[0] for e in entries])
            got += len(entries)
    assert got == w.n, got
    r.delete(stream)


# -- main -------------------------------------------------------------------------------
def report(rounds: list[dict[str, float]]) -> None:
    keys = [k for k in rounds[0] if ":" not in k]
    print(f"\n{'path':34s} {'events/s':>10s} {'client µs/ev':>13s} {'server µs/ev':>13s}   rounds (events/s)")
    for k in keys:
        vals = [r[k] for r in rounds if k in r]
        c = statistics.median(r[k + ":client_us"] for r in rounds if k in r)
        s = statistics.median(r[k + ":server_us"] for r in rounds if k in r)
        print(f"{k:34s} {statistics.median(vals):>10,.0f} {c:>13.2f} {s:>13.2f}   "
              + ", ".join(f"{v:,.0f}" for v in vals))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="channel,grpc,postgres,redis")
    parser.add_argument("--take-window", type=int, default=4, help="batches in flight of the gRPC take pipeline")
    parser.add_argument("--quick", action="store_true", help="20k events, 1 round")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temporary directory")
    parser.add_argument("--child-serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_serve:
        serve(args.child_serve)
        return 0
    if args.quick:
        args.events, args.repeats = 20_000, 1
    only = set(args.only.split(","))
    print(f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f}")
    root = Path(tempfile.mkdtemp(prefix="bench-peers-", dir=args.dir))
    servers: list[Any] = []
    paths: list[tuple[str, Callable[[Work, dict[str, float], str, int], None]]] = []
    try:
        if "channel" in only:
            paths.append(("channel", lambda w, out, tag, i: round_channel(root / f"local{i}{tag}", w, out, tag)))
        if "grpc" in only:
            agent = Agent(root / "agent")
            servers.append(agent)
            paths.append(("grpc", lambda w, out, tag, i: round_grpc(agent, w, out, tag, args.take_window)))
        if "postgres" in only:
            try:
                import psycopg  # noqa: F401
                if pg_binaries() is None:
                    raise ImportError("initdb not found")
                pg = Postgres(root)
                servers.append(pg)
                paths.append(("postgres", lambda w, out, tag, i: round_postgres(pg, w, out, tag)))
            except ImportError as err:
                print(f"skipping postgres: {err} (install the postgresql package and psycopg)")
        if "redis" in only:
            try:
                import redis  # noqa: F401
                if shutil.which("redis-server") is None:
                    raise ImportError("redis-server not found")
                rd = Redis(root)
                servers.append(rd)
                paths.append(("redis", lambda w, out, tag, i: round_redis(rd, w, out, tag)))
            except ImportError as err:
                print(f"skipping redis: {err} (install the redis-server package and redis)")
        rounds = []
        for i in range(args.repeats):
            out: dict[str, float] = {}
            for headers in (False, True):
                w = Work(args.events, args.event_size, args.batch, headers)
                tag = " 2h" if headers else ""
                for _name, run in paths:
                    run(w, out, tag, i)
            rounds.append(out)
            print(f"round {i + 1}: " + ", ".join(f"{k} {v:,.0f}" for k, v in out.items() if ":" not in k),
                  flush=True)
        print(f"\n{args.events} events of {args.event_size} B, batches of {args.batch}, one durable commit per "
              f"batch, median of {len(rounds)} rounds")
        report(rounds)
    finally:
        for s in servers:
            s.close()
        shutil.rmtree(root, ignore_errors=True)
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
