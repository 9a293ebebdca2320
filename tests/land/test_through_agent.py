"""``ingest-toolkit land`` beside a live agent: it finds the agent that owns the channel and takes
through its leased gRPC takes; an empty channel never starts Spark; ``--drain`` keeps going until
the backlog is gone, whatever two takes in flight see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.cli import main
from ingest_toolkit.land import InProcessSource, land_until_empty
from ingest_toolkit.land.source import TakeBatch
from ingest_toolkit.rpc.client import AgentClient
from tests.agent.harness import AgentProcess, AgentSetup

from .helpers import assert_landed_exactly_once, channel_settings, landing_config, make_events, put_events, read_landed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def live_agent(tmp_path: Path) -> Iterator[AgentProcess]:
    """A real agent process owning channel ``events`` (ephemeral ports, its ports file in the tree)."""
    agent = AgentProcess(AgentSetup(tmp_path / "agent")).wait_ready()
    try:
        yield agent
    finally:
        if agent.proc.poll() is None:
            agent.terminate()


def _landing_toml(tmp_path: Path, agent_conf: Path | None, **keys: object) -> Path:
    path = tmp_path / "landing.toml"
    lines = [f'root = "{tmp_path / "landing"}"', "max_events = 100000"]
    if agent_conf is not None:
        lines.append(f'agent_conf = "{agent_conf}"')
    lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    path.write_text("[landing]\n" + "\n".join(lines) + '\n[spark]\nmaster = "local[2]"\n')
    return path


def _put(agent: AgentProcess, count: int) -> None:
    with AgentClient(agent.grpc_address) as client:
        for at in range(0, count, 500):
            client.put([Event(f"e{i}".encode(), {"timestamp": "1763798400000"})
                        for i in range(at, min(count, at + 500))], channel="events")


@pytest.mark.slow
def test_land_finds_the_agent_that_owns_the_channel_and_takes_through_it(
        tmp_path: Path, live_agent: AgentProcess, spark: SparkSession) -> None:
    _put(live_agent, 1200)
    landing = _landing_toml(tmp_path, live_agent.setup.conf)
    result = CliRunner().invoke(main, ["land", "--conf", str(landing), "--channel", "events", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["totals"]["events"] == 1200 and document["totals"]["backlog_after"] == 0
    assert f"pid {live_agent.proc.pid}" in result.stderr and live_agent.grpc_address in result.stderr
    assert document["source"].startswith(f"agent {live_agent.grpc_address}")
    with AgentClient(live_agent.grpc_address) as client:  # the agent kept the channel and took it empty
        assert client.status("events")["queue_size"] == 0
    assert live_agent.proc.poll() is None

    _put(live_agent, 300)  # --ports-file, like send's: the gRPC port from the agent's ports file
    result = CliRunner().invoke(main, ["land", "--conf", str(_landing_toml(tmp_path, None)), "--channel", "events",
                                       "--ports-file", str(live_agent.setup.ports_file), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["totals"]["events"] == 300
    landed = read_landed(tmp_path / "landing", "events")
    assert landed.num_rows == 1500 and len(set(landed.column("event_id").to_pylist())) == 1500


def _fake_spark_home(tmp_path: Path) -> tuple[Path, Path]:
    """A SPARK_HOME whose spark-submit only records that it was started (and fails)."""
    home, marker = tmp_path / "no-spark", tmp_path / "spark-started"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "spark-submit"
    script.write_text(f'#!/bin/sh\ntouch "{marker}"\nexit 1\n')
    script.chmod(0o755)
    return home, marker


def _land_process(args: list[str], spark_home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INGEST_")}
    env.update(SPARK_HOME=str(spark_home), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "land", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_landing_an_empty_channel_does_not_start_spark(tmp_path: Path) -> None:
    settings = channel_settings(tmp_path)
    FileChannel(**settings).close()
    channel_toml = tmp_path / "channel.toml"
    channel_toml.write_text("[channel]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    spark_home, marker = _fake_spark_home(tmp_path)
    done = _land_process(["--conf", str(_landing_toml(tmp_path, None)), "--channel", "events",
                          "--channel-conf", str(channel_toml), "--drain"], spark_home, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not marker.exists(), "Spark was started for an empty channel"
    assert "nothing to land" in done.stdout


def test_landing_an_empty_channel_through_an_agent_does_not_start_spark(tmp_path: Path,
                                                                          live_agent: AgentProcess) -> None:
    spark_home, marker = _fake_spark_home(tmp_path)
    done = _land_process(["--conf", str(_landing_toml(tmp_path, None)), "--channel", "events",
                          "--agent", live_agent.grpc_address, "--json"], spark_home, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not marker.exists(), "Spark was started for an empty channel"
    assert json.loads(done.stdout)["totals"]["events"] == 0


class _RefilledWhenEmpty:
    """The channel seen by a drain while producers keep putting: the first take that finds the
    queue empty (the other take in flight holds every event) is followed at once by new commits,
    as an agent receiving sends would make them."""

    def __init__(self, channel: FileChannel, refill: int) -> None:
        self._inner, self._channel, self._refill = InProcessSource(channel, "events"), channel, refill
        self.name = "events"
        self._lock = threading.Lock()

    def open_take(self, max_events: int) -> TakeBatch:
        take = self._inner.open_take(max_events)
        with self._lock:
            if not len(take.columns) and self._refill:  # a producer's commit (its own thread: one
                producer = threading.Thread(  # transaction per thread, and this one holds the take)
                    target=put_events, args=(self._channel, make_events(self._refill, start=5000)))
                producer.start()
                producer.join()
                self._refill = 0
        return take

    def backlog(self) -> int:
        return self._inner.backlog()


@pytest.mark.slow
def test_drain_does_not_stop_when_one_of_two_takes_in_flight_comes_back_empty(
        tmp_path: Path, spark: SparkSession) -> None:
    channel = FileChannel(**channel_settings(tmp_path, transaction_capacity=100_000))
    try:
        expected = put_events(channel, make_events(1000))
        source = _RefilledWhenEmpty(channel, refill=700)
        root = tmp_path / "landing"
        results = land_until_empty(source, landing_config(root, max_events=100_000), spark)
        assert any(r.taken == 0 for r in results)  # the situation of the bug happened
        assert len(channel) == 0, f"the drain stopped with {len(channel)} events committed and not landed"
        assert sum(r.events for r in results) == 1700
        landed = read_landed(root, "events")
        assert landed.num_rows == 1700
        assert_landed_exactly_once(landed.filter(landed.column("seq").to_numpy() <= max(expected)), expected,
                                   channel.channel_id)
    finally:
        channel.close()


class _SteadyProducer(_RefilledWhenEmpty):
    """A producer that commits ``refill`` events after every take, for ever."""

    def open_take(self, max_events: int) -> TakeBatch:
        take = self._inner.open_take(max_events)
        producer = threading.Thread(target=put_events, args=(self._channel, make_events(self._refill, start=9000)))
        producer.start()
        producer.join()
        return take


@pytest.mark.slow
def test_drain_ends_while_producers_keep_committing(tmp_path: Path, spark: SparkSession) -> None:
    channel = FileChannel(**channel_settings(tmp_path, transaction_capacity=100_000))
    try:
        put_events(channel, make_events(1000))
        results = land_until_empty(_SteadyProducer(channel, refill=50), landing_config(tmp_path / "landing"), spark)
        assert 3 <= len(results) <= 8  # it caught up, then stopped once it no longer gained
        assert sum(r.taken for r in results) >= 1000 and len(channel) <= 100
    finally:
        channel.close()
