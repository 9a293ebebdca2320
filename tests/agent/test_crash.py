"""SIGKILL the agent mid-ingest, restart it: every input line is in the channel exactly once."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ingest_toolkit.channel import EventColumns, FileChannel
from ingest_toolkit.errors import IngestError
from ingest_toolkit.rpc.client import AgentClient

from .harness import LIVE, REPO, AgentProcess, AgentSetup, drain, http_post, write_spool_file

pytestmark = pytest.mark.integration

FILES, LINES = 200, 500


def _completed(spool: Path) -> int:
    return sum(1 for p in spool.iterdir() if p.name.endswith(".COMPLETED"))


def _wait(predicate: object, timeout: float, agent: AgentProcess) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise AssertionError(f"condition not met in {timeout}s:\n{agent.log()[-3000:]}")


def test_sigkill_during_spool_ingest_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    for f in range(FILES):
        write_spool_file(spool, f"f{f:03d}.log", (f"f{f:03d}-l{i:03d}" for i in range(LINES)))
    setup = AgentSetup(tmp_path, sources=f"""
[sources.spool]
type = "spool_dir"
dir = "{spool}"
channels = ["events"]
batch_size = 200
poll_interval = 0.05
""")
    kills = 0
    for threshold in (20, 90):  # files completed before each SIGKILL
        agent = AgentProcess(setup).wait_ready()
        _wait(lambda t=threshold: _completed(spool) >= t, 60, agent)
        if _completed(spool) < FILES:
            kills += 1
        agent.kill()
    agent = AgentProcess(setup).wait_ready()
    with AgentClient(agent.grpc_address) as client:
        _wait(lambda: _completed(spool) == FILES and client.status("events")["queue_size"] == FILES * LINES,
              90, agent)
    assert agent.terminate() == 0, agent.log()
    assert kills >= 1, "every SIGKILL came after the ingest had finished: the test proved nothing"
    counts = Counter(e.body for e in drain(setup.channel_settings()))
    assert len(counts) == FILES * LINES and set(counts.values()) == {1}
    assert sorted(counts) == sorted(f"f{f:03d}-l{i:03d}".encode() for f in range(FILES) for i in range(LINES))


class _Client(threading.Thread):
    """Posts its batches in order; any failure (refused, reset, 503) is retried with the same batch id
    against whatever port the ports file names now."""

    def __init__(self, index: int, ports_file: Path, batches: int, size: int) -> None:
        super().__init__(daemon=True)
        self.index, self.ports_file, self.batches, self.size = index, ports_file, batches, size
        self.acked = 0
        self.retries = 0
        self.error: BaseException | None = None

    def lines(self, batch: int) -> bytes:
        return "".join(f"c{self.index}-b{batch:03d}-{i:03d}\n" for i in range(self.size)).encode()

    def post(self, batch: int) -> dict[str, object]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                port = json.loads(self.ports_file.read_text())["sources"]["web"]
                status, doc = http_post(f"http://127.0.0.1:{port}/events", self.lines(batch),
                                        batch_id=f"c{self.index}-b{batch}", timeout=5)
                if status == 200:
                    return doc
            except (OSError, ValueError, KeyError, http.client.HTTPException):  # e.g. killed mid-answer
                pass
            self.retries += 1
            time.sleep(0.05)
        raise AssertionError(f"client {self.index} batch {batch} never acknowledged")

    def run(self) -> None:
        try:
            for batch in range(self.batches):
                self.post(batch)
                self.acked += 1
        except BaseException as err:  # reported by the test
            self.error = err


def test_http_clients_retrying_with_batch_ids_across_sigkill_store_each_batch_once(tmp_path: Path) -> None:
    setup = AgentSetup(tmp_path, sources='[sources.web]\ntype = "http"\nchannels = ["events"]\n')
    agent = AgentProcess(setup).wait_ready()
    clients = [_Client(i, setup.ports_file, batches=60, size=100) for i in range(3)]
    for client in clients:
        client.start()
    _wait(lambda: sum(c.acked for c in clients) >= 40, 60, agent)
    agent.kill()
    agent = AgentProcess(setup).wait_ready()
    for client in clients:
        client.join(120)
        assert client.error is None and client.acked == 60, client.error
    assert sum(c.retries for c in clients) > 0  # the kill was noticed by the clients
    assert clients[0].post(0) == {"accepted": 100, "duplicate": True}  # a late retry of an old batch
    assert agent.terminate() == 0, agent.log()
    counts = Counter(e.body for e in drain(setup.channel_settings()))
    assert set(counts.values()) == {1}
    assert sorted(counts) == sorted(line for c in clients for b in range(60) for line in c.lines(b).splitlines())


def test_send_with_a_batch_id_rides_through_an_agent_sigkill(tmp_path: Path) -> None:
    setup = AgentSetup(tmp_path)
    agent = AgentProcess(setup).wait_ready()
    lines = [f"line-{i:05d}" for i in range(40_000)]
    (tmp_path / "input.txt").write_text("".join(f"{line}\n" for line in lines))
    sender = subprocess.Popen(
        [sys.executable, "-m", "ingest_toolkit.cli", "send", str(tmp_path / "input.txt"), "--ports-file",
         str(setup.ports_file), "--batch-size", "200", "--batch-id", "job-7", "--retries", "8", "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    LIVE.append(sender)  # type: ignore[arg-type]
    with AgentClient(agent.grpc_address) as client:
        _wait(lambda: client.status("events")["queue_size"] >= 4000, 60, agent)
    agent.kill()
    agent = AgentProcess(setup).wait_ready()
    out, err = sender.communicate(timeout=120)
    assert sender.returncode == 0, err
    assert "retrying" in err  # it did notice the agent going away
    assert json.loads(out)["events"] == 40_000
    assert agent.terminate() == 0
    assert [e.body.decode() for e in drain(setup.channel_settings())] == lines  # once each, in order


class _Streamer(threading.Thread):
    """Puts its batches on one ordered put stream (``AgentClient.put_stream``) with batch ids;
    when the stream breaks it reconnects to whatever port the ports file names now and goes on
    from the first batch it has no ack for, with the same ids."""

    def __init__(self, ports_file: Path, batches: list[tuple[EventColumns, str]]) -> None:
        super().__init__(daemon=True)
        self.ports_file, self.batches = ports_file, batches
        self.acked: list[str] = []
        self.duplicates = self.breaks = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + 120
        try:
            while len(self.acked) < len(self.batches):
                if time.monotonic() > deadline:
                    raise AssertionError(f"only {len(self.acked)} batches acknowledged in 120 s")
                try:
                    port = json.loads(self.ports_file.read_text())["grpc"]
                    with AgentClient(f"127.0.0.1:{port}") as client:
                        for ack in client.put_stream(self.batches[len(self.acked):], channel="events", window=4):
                            self.duplicates += ack.duplicate
                            self.acked.append(self.batches[len(self.acked)][1])
                except (IngestError, OSError, ValueError, KeyError):  # the agent went away, or is starting
                    self.breaks += 1
                    time.sleep(0.05)
        except BaseException as err:  # reported by the test
            self.error = err


def test_every_batch_the_put_stream_acknowledged_survives_sigkills_and_retries_store_it_once(
        tmp_path: Path) -> None:
    """The agent reads the next batches of a put stream while it commits one (rpc/ordered.py): a
    SIGKILL at any point must still find every acknowledged batch committed, and a client going
    on with the same batch ids must store each batch once, in the order of the stream."""
    setup = AgentSetup(tmp_path)
    bodies = [f"b{b:03d}-{i:03d}".encode() for b in range(300) for i in range(100)]
    batches = [(EventColumns(bodies[b * 100:(b + 1) * 100], [0] * 100, [0] * 100), f"stream-{b}")
               for b in range(300)]
    agent = AgentProcess(setup).wait_ready()
    streamer = _Streamer(setup.ports_file, batches)
    streamer.start()
    for threshold in (40, 130, 220):  # batches acknowledged before each SIGKILL
        _wait(lambda t=threshold: len(streamer.acked) >= t or streamer.error is not None, 60, agent)
        agent.kill()
        acked = list(streamer.acked)
        with FileChannel(**setup.channel_settings()) as channel:  # the dead agent's directories
            missing = [batch_id for batch_id in acked if channel.find_tag(batch_id) is None]
        assert not missing, f"{len(missing)} acknowledged batches not committed after SIGKILL: {missing[:5]}"
        agent = AgentProcess(setup).wait_ready()
    streamer.join(120)
    assert streamer.error is None, streamer.error
    assert streamer.breaks >= 3 and len(streamer.acked) == 300
    assert agent.terminate() == 0, agent.log()
    assert [e.body for e in drain(setup.channel_settings())] == bodies  # once each, in stream order
