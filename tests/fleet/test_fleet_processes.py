"""Tiers of real agent processes on 127.0.0.1: edges forwarding to aggregators through sink groups.

* Crash loop: two edges (a spool source, and puts over gRPC from a producer retrying with batch
  ids) forward through failover groups to two aggregators; every agent is SIGKILLed several
  times (``INGEST_SOAK`` scales the count). At the end every acknowledged event is in exactly one
  aggregator, exactly once, and ``channel verify`` is clean on every channel.
* Failover moves to the secondary while the primary is stopped and returns when it is back.
* Load balance (round robin) spreads the events over three aggregators within a stated
  tolerance, and over the two left while one is down.
* A three-hop chain keeps the headers (and counts two hops); a loop is dropped at ``max_hops``.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.tools import verify_channel
from ingest_toolkit.errors import IngestError
from ingest_toolkit.land import InProcessSource, land_once
from ingest_toolkit.rpc.client import AgentClient

from ..agent.harness import AgentProcess, drain, write_spool_file
from ..land.helpers import landing_config, read_landed
from ..soak import soak
from .harness import FleetSetup, forward_sink, free_port, wait_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAST_PENALTY = "min_penalty = 0.1\nmax_penalty = 1.0\n"


class Fleet:
    """Agent processes by name, each restartable on the same configuration (and ports)."""

    def __init__(self) -> None:
        self.setups: dict[str, FleetSetup] = {}
        self.procs: dict[str, AgentProcess] = {}

    def add(self, name: str, setup: FleetSetup) -> FleetSetup:
        self.setups[name] = setup
        return setup

    def start(self, *names: str) -> None:
        started = {name: AgentProcess(self.setups[name]) for name in names or list(self.setups)}
        for name, proc in started.items():
            self.procs[name] = proc.wait_ready(60)

    def kill(self, name: str) -> None:
        self.procs.pop(name).kill()

    def stop(self, name: str) -> None:
        assert self.procs.pop(name).terminate() == 0

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def client(self, name: str) -> AgentClient:
        return AgentClient(self.setups[name].address, timeout=5)

    def queued(self, name: str) -> int:
        with self.client(name) as client:
            return int(client.status("events")["queue_size"])

    def _group_status(self, edge: str, group: str) -> dict[str, Any]:
        import json
        import urllib.request

        with urllib.request.urlopen(self.procs[edge].admin_url("/status"), timeout=10) as response:
            return dict(json.loads(response.read())["sinks"][group])

    def sink_events(self, edge: str, group: str) -> dict[str, int]:
        return {name: int(stats["events"]) for name, stats in self._group_status(edge, group)["sinks"].items()}

    def forwarded(self, edge: str, group: str = "up") -> bool:
        """The edge's channel is empty and its group has no batch in flight (taken, not yet
        committed: with several in flight the queue empties before the last acks), so the
        sinks' counters are final."""
        return self.queued(edge) == 0 and not self._group_status(edge, group)["inflight_batches"]


@pytest.fixture
def fleet() -> Any:
    fleet = Fleet()
    yield fleet
    for proc in fleet.procs.values():
        proc.kill()


def _aggregator(fleet: Fleet, root: Path, name: str) -> FleetSetup:
    return fleet.add(name, FleetSetup(root / name, name=name, grpc_port=free_port()))


def _edge(fleet: Fleet, root: Path, name: str, sinks: str, extra: str = "") -> FleetSetup:
    return fleet.add(name, FleetSetup(root / name, name=name, grpc_port=free_port(), extra=sinks + extra))


def _failover(aggs: list[FleetSetup], *, batch_size: int = 100, parallel_puts: int = 1) -> str:
    text = "".join(forward_sink(f"to_{i}", agg.address, batch_size=batch_size,
                                extra=f"parallel_puts = {parallel_puts}\n") for i, agg in enumerate(aggs))
    names = ", ".join(f'"to_{i}"' for i in range(len(aggs)))
    priorities = ", ".join(f"to_{i} = {10 - i}" for i in range(len(aggs)))
    return text + f'[sink_groups.up]\nsinks = [{names}]\nprocessor = "failover"\npriorities = {{ {priorities} }}\n' + \
        FAST_PENALTY


def _put_until_acked(fleet: Fleet, edge: str, events: list[Event], batch_id: str, stop_at: float) -> None:
    while True:
        try:
            with fleet.client(edge) as client:
                client.put(events, channel="events", batch_id=batch_id)
            return
        except IngestError:
            if time.monotonic() > stop_at:
                raise
            time.sleep(0.2)  # the edge is down or restarting: the same batch id again


def _drained(fleet: Fleet, edges: list[str], aggs: list[str], expected: int) -> bool:
    try:
        return all(fleet.queued(e) == 0 for e in edges) and sum(fleet.queued(a) for a in aggs) >= expected
    except IngestError:
        return False


def _verify_everywhere(fleet: Fleet) -> None:
    for name, setup in fleet.setups.items():
        settings = setup.channel_settings()
        report = verify_channel(settings["checkpoint_dir"], settings["data_dirs"])
        assert report.ok, f"channel verify of {name}: {report.to_json()}"


def test_every_acknowledged_event_reaches_one_aggregator_once_through_sigkills(tmp_path: Path, fleet: Fleet,
                                                                               spark: SparkSession) -> None:
    aggs = [_aggregator(fleet, tmp_path, f"agg{i}") for i in range(2)]
    spool = tmp_path / "spool"
    spool.mkdir()
    spool_source = (f'[sources.spool]\ntype = "spool_dir"\ndir = "{spool}"\nchannels = ["events"]\n'
                    'batch_size = 100\npoll_interval = 0.1\n')
    _edge(fleet, tmp_path, "edge_spool", _failover(aggs), spool_source)
    _edge(fleet, tmp_path, "edge_grpc", _failover(aggs, batch_size=2000, parallel_puts=2))  # backlogs go in parts
    fleet.start()
    expected: list[str] = []
    deadline = time.monotonic() + 240
    stop_producing = threading.Event()
    failures: list[BaseException] = []

    def grpc_producer() -> None:
        try:
            for b in range(10_000):
                if stop_producing.is_set():
                    return
                bodies = [f"g-{b}-{i}" for i in range(50)]
                _put_until_acked(fleet, "edge_grpc", [Event(x.encode()) for x in bodies], f"producer-{b}", deadline)
                expected.extend(bodies)  # acknowledged
        except BaseException as err:
            failures.append(err)

    producer = threading.Thread(target=grpc_producer)
    producer.start()
    rng = random.Random(15)
    kills = soak(8)
    names = ["agg0", "agg1", "edge_spool", "edge_grpc"]
    for k in range(kills):
        write_spool_file(spool, f"f{k}.log", [f"s-{k}-{i}" for i in range(300)])
        expected.extend(f"s-{k}-{i}" for i in range(300))
        time.sleep(rng.uniform(0.3, 1.0))
        victim = names[k % len(names)] if k < len(names) else rng.choice(names)
        fleet.kill(victim)
        time.sleep(rng.uniform(0.1, 0.8))
        fleet.start(victim)
    stop_producing.set()
    producer.join(120)
    assert not failures, failures
    wait_for(lambda: _drained(fleet, ["edge_spool", "edge_grpc"], ["agg0", "agg1"], len(expected)), timeout=120,
             what=f"{len(expected)} events at the aggregators and empty edges")
    fleet.stop_all()
    _verify_everywhere(fleet)
    # Both aggregators' channels land into one table: each acknowledged event once, ids unique.
    root = tmp_path / "landing"
    for agg in aggs:
        with FileChannel(**agg.channel_settings()) as channel:
            while len(channel):
                land_once(InProcessSource(channel, "events"), landing_config(root), spark)
    table = read_landed(root, "events")
    landed = Counter(body.decode() for body in table.column("body").to_pylist())
    assert sum(landed.values()) == len(expected) and set(landed) == set(expected)
    assert max(landed.values()) == 1
    assert pc.count_distinct(table.column("event_id")).as_py() == table.num_rows


def test_failover_moves_to_the_secondary_and_returns_to_the_primary(tmp_path: Path, fleet: Fleet) -> None:
    aggs = [_aggregator(fleet, tmp_path, f"agg{i}") for i in range(2)]
    _edge(fleet, tmp_path, "edge", _failover(aggs, batch_size=50))
    fleet.start()
    sent: list[str] = []

    def send(phase: str, batches: int) -> None:
        for b in range(batches):
            bodies = [f"{phase}-{b}-{i}" for i in range(50)]
            _put_until_acked(fleet, "edge", [Event(x.encode()) for x in bodies], f"{phase}-{b}",
                             time.monotonic() + 30)
            sent.extend(bodies)
        wait_for(lambda: fleet.forwarded("edge"), what="the edge to forward everything")

    send("one", 10)
    assert fleet.sink_events("edge", "up") == {"to_0": 500, "to_1": 0}
    fleet.stop("agg0")
    send("two", 10)
    assert fleet.sink_events("edge", "up") == {"to_0": 500, "to_1": 500}
    fleet.start("agg0")
    time.sleep(1.5)  # longer than max_penalty: the primary is tried again
    send("three", 10)
    assert fleet.sink_events("edge", "up") == {"to_0": 1000, "to_1": 500}
    fleet.stop_all()
    held = [e.body.decode() for agg in aggs for e in drain(agg.channel_settings())]
    assert sorted(held) == sorted(sent)


def test_load_balance_spreads_within_tolerance_also_with_one_aggregator_down(tmp_path: Path, fleet: Fleet) -> None:
    """Round robin hands out batches in turn: with 50-event batches put one at a time, each of
    the three aggregators gets a third of the events within 10 percentage points; with one down,
    the other two get half each within 10 points, and the one that is down gets nothing."""
    aggs = [_aggregator(fleet, tmp_path, f"agg{i}") for i in range(3)]
    sinks = "".join(forward_sink(f"to_{i}", agg.address, batch_size=50, linger=0.0) for i, agg in enumerate(aggs))
    group = ('[sink_groups.up]\nsinks = ["to_0", "to_1", "to_2"]\nprocessor = "load_balance"\n'
             'selector = "round_robin"\n' + FAST_PENALTY)
    _edge(fleet, tmp_path, "edge", sinks + group)
    fleet.start()

    def phase(name: str, batches: int) -> dict[str, int]:
        before = fleet.sink_events("edge", "up")
        for b in range(batches):
            _put_until_acked(fleet, "edge", [Event(f"{name}-{b}-{i}".encode()) for i in range(50)], f"{name}-{b}",
                             time.monotonic() + 30)
            wait_for(lambda: fleet.forwarded("edge"), what="the batch to leave")
        after = fleet.sink_events("edge", "up")
        return {k: after[k] - before[k] for k in after}

    spread = phase("all", 30)
    assert all(abs(n / 1500 - 1 / 3) <= 0.10 for n in spread.values()), spread
    fleet.stop("agg2")
    spread = phase("two", 30)
    assert spread["to_2"] == 0 and all(abs(spread[k] / 1500 - 0.5) <= 0.10 for k in ("to_0", "to_1")), spread
    fleet.start("agg2")
    time.sleep(1.5)
    spread = phase("back", 30)
    assert all(abs(n / 1500 - 1 / 3) <= 0.10 for n in spread.values()), spread
    fleet.stop_all()
    held = Counter(e.body for agg in aggs for e in drain(agg.channel_settings()))
    assert len(held) == 4500 and max(held.values()) == 1


def test_a_three_hop_chain_keeps_headers_and_a_loop_is_dropped(tmp_path: Path, fleet: Fleet) -> None:
    top = _aggregator(fleet, tmp_path, "top")
    mid = _edge(fleet, tmp_path, "mid", forward_sink("up", top.address))
    _edge(fleet, tmp_path, "edge", forward_sink("up", mid.address))
    # a loop: a -> b -> c -> a; each hop adds one, and at max_hops = 5 the events are dropped
    ports = {name: free_port() for name in ("a", "b", "c")}
    for name, target in (("a", "b"), ("b", "c"), ("c", "a")):
        fleet.add(name, FleetSetup(tmp_path / name, name=name, grpc_port=ports[name], extra=forward_sink(
            "next", f"127.0.0.1:{ports[target]}", extra="max_hops = 5\n")))
    fleet.start()
    with fleet.client("edge") as client:
        client.put([Event(f"c{i}".encode(), {"origin": "app-1", "trace": f"t{i}"}) for i in range(100)],
                   channel="events", batch_id="chain-1")
    with fleet.client("a") as client:
        client.put([Event(f"l{i}".encode(), {"origin": "loop"}) for i in range(40)], channel="events",
                   batch_id="loop-1")
    wait_for(lambda: fleet.queued("top") == 100, what="the chain's events at the top")

    def dropped() -> int:
        import re

        total = 0
        for name in ("a", "b", "c"):
            from ..agent.harness import http_get

            _code, text = http_get(fleet.procs[name].admin_url("/metrics"))
            match = re.search(r'^ingest_sink_group_dropped_looping_total\{group="next"\} (\d+)', text, re.M)
            total += int(match.group(1)) if match else 0
        return total

    wait_for(lambda: dropped() == 40 and all(fleet.queued(n) == 0 for n in "abc"), what="the loop to be dropped")
    fleet.stop_all()
    events = drain(top.channel_settings())
    assert sorted(e.body.decode() for e in events) == sorted(f"c{i}" for i in range(100))
    assert all(e.headers == {"origin": "app-1", "trace": f"t{e.body.decode()[1:]}", "ingest.hops": "2"}
               for e in events)
    _verify_everywhere(fleet)
