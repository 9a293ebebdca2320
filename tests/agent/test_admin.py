"""The agent in-process (real sockets, real channels): health, metrics, status, admin auth."""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.collect.agent import Agent
from ingest_toolkit.collect.config import load_agent_config
from ingest_toolkit.collect.metrics import Histogram, Sample, render
from ingest_toolkit.errors import DiskSpaceError
from ingest_toolkit.rpc.client import AgentClient
from ingest_toolkit.security import warn_if_exposed
from tests.certs import self_signed

from .harness import AgentSetup, http_get, http_post, metric

TOKEN_ENV = "TEST_AGENT_ADMIN_TOKEN"


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Agent]:
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    (tmp_path / "spool").mkdir()
    setup = AgentSetup(tmp_path, admin=f'security = {{ token_env = "{TOKEN_ENV}" }}\n', sources=f"""
[sources.web]
type = "http"
channels = ["events"]
[sources.spool]
type = "spool_dir"
dir = "{tmp_path / 'spool'}"
channels = ["events"]
poll_interval = 0.05
""")
    running = Agent(load_agent_config(setup.conf))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _url(agent: Agent, path: str) -> str:
    assert agent.admin is not None
    return f"http://127.0.0.1:{agent.admin.port}{path}"


def test_healthz_is_open_and_ok_while_everything_runs(agent: Agent) -> None:
    assert http_get(_url(agent, "/healthz")) == (200, '{"status": "ok"}\n')
    ports = json.loads(agent.config.agent.ports_path.read_text())
    assert ports["pid"] == os.getpid() and ports["grpc"] == agent.ports()["grpc"] > 0
    assert ports["sources"] == {"web": agent.ports()["sources"]["web"]}


def test_healthz_is_503_with_reasons_when_a_channel_is_unusable(agent: Agent) -> None:
    agent.channels["events"].close()
    status, body = http_get(_url(agent, "/healthz"))
    assert status == 503
    assert json.loads(body) == {"status": "unhealthy", "reasons": [
        "channel events: ChannelClosedError: channel is closed; open a new FileChannel on the same directories"]}


def test_metrics_and_status_need_the_admin_token(agent: Agent, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ingest_toolkit.collect.admin"):
        assert http_get(_url(agent, "/metrics"))[0] == 401
        assert http_get(_url(agent, "/metrics"), token="wrong")[0] == 401
        assert http_get(_url(agent, "/status"))[0] == 401
        assert http_get(_url(agent, "/nope"))[0] == 401  # the token first: no list of paths for strangers
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "admin endpoint: refused GET '/metrics' from 127.0.0.1: no bearer token",
        "admin endpoint: refused GET '/metrics' from 127.0.0.1: a wrong bearer token",
        "admin endpoint: refused GET '/status' from 127.0.0.1: no bearer token",
        "admin endpoint: refused GET '/nope' from 127.0.0.1: no bearer token"]
    assert http_get(_url(agent, "/nope"), token="s3cret")[0] == 404
    status, body = http_get(_url(agent, "/status"), token="s3cret")
    assert status == 200 and json.loads(body)["channels"]["events"]["queue_size"] == 0


def test_metrics_count_events_per_source_and_channel_activity(agent: Agent) -> None:
    port = agent.ports()["sources"]["web"]
    assert http_post(f"http://127.0.0.1:{port}/events", b"a\nb\nc\n") == (200, {"accepted": 3, "duplicate": False})
    assert http_post(f"http://127.0.0.1:{port}/events", b"a\n", batch_id="b-1")[0] == 200
    assert http_post(f"http://127.0.0.1:{port}/events", b"a\n", batch_id="b-1")[1]["duplicate"] is True
    with AgentClient(f"127.0.0.1:{agent.ports()['grpc']}") as client:
        client.put([Event(b"x", {})] * 5, channel="events")
    agent.channels["events"].checkpoint()
    status, text = http_get(_url(agent, "/metrics"), token="s3cret")
    assert status == 200
    assert metric(text, "ingest_agent_up") == 1
    assert metric(text, "ingest_pipeline_events_total", pipeline="web") == 4
    assert metric(text, "ingest_pipeline_events_total", pipeline="grpc") == 5
    assert metric(text, "ingest_pipeline_duplicate_batches_total", pipeline="web") == 1
    assert metric(text, "ingest_pipeline_put_seconds_count", pipeline="web") == 3
    assert metric(text, "ingest_pipeline_put_seconds_bucket", pipeline="grpc", le="+Inf") == 1
    assert metric(text, "ingest_channel_queue_depth", channel="events") == 9
    assert metric(text, "ingest_channel_puts_total", channel="events") == 9
    assert metric(text, "ingest_channel_fsyncs_total", channel="events") >= 3  # type: ignore[operator]
    age = metric(text, "ingest_channel_checkpoint_age_seconds", channel="events")
    assert age is not None and 0 <= age < 5
    remembered = metric(text, "ingest_channel_batch_ids_remembered_seconds", channel="events")
    assert remembered is not None and abs(remembered - 86_400) < 60  # the retention: the window has room
    assert metric(text, "ingest_source_up", source="spool") == 1
    assert metric(text, "ingest_source_stat", source="web", stat="requests") == 3
    for line in text.splitlines():  # every sample line is "<name>{labels} <number>"
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


def test_a_duplicate_grpc_put_is_acked_with_its_event_count(agent: Agent) -> None:
    """What docs/rpc.md promises and what channel_put_handler (the tests' handler) mirrors."""
    with AgentClient(f"127.0.0.1:{agent.ports()['grpc']}") as client:
        first = client.put([Event(b"x", {})] * 5, channel="events", batch_id="dup-1")
        retry = client.put([Event(b"x", {})] * 5, channel="events", batch_id="dup-1")
    assert (first.accepted, first.duplicate, first.channels) == (5, False, ("events",))
    assert (retry.accepted, retry.duplicate, retry.channels) == (5, True, ())
    assert len(agent.channels["events"]) == 5


def test_stop_closes_channels_and_removes_the_ports_file(agent: Agent) -> None:
    agent.stop()
    assert not agent.config.agent.ports_path.exists() and agent.channels == {}
    agent.stop()  # idempotent


def test_exposition_format_escapes_and_histograms() -> None:
    histogram = Histogram(buckets=(0.1, 1.0))
    for value in (0.05, 0.5, 5.0):
        histogram.observe(value)
    text = render([("m", "histogram", "help \\ text", histogram.samples("m", {"p": 'a"b\n'}))])
    assert '# HELP m help \\\\ text' in text
    assert 'm_bucket{p="a\\"b\\n",le="0.1"} 1' in text and 'm_bucket{p="a\\"b\\n",le="+Inf"} 3' in text
    assert 'm_sum{p="a\\"b\\n"} 5.55' in text
    assert render([("g", "gauge", "h", [Sample("g", {}, 2.0)])]).endswith("g 2\n")


def test_admin_tls_handshake_of_a_stalled_client_does_not_block_others(tmp_path: Path) -> None:
    """A client that connects and never starts its TLS handshake must not stall ``accept``: the
    handshake runs in the connection's thread, under a timeout."""
    cert, key = self_signed(tmp_path / "tls")
    setup = AgentSetup(tmp_path, admin=f'security = {{ tls = {{ cert_file = "{cert}", key_file = "{key}" }} }}\n')
    running = Agent(load_agent_config(setup.conf))
    running.start()
    try:
        assert running.admin is not None
        context = ssl.create_default_context(cafile=str(cert))
        with socket.create_connection(("127.0.0.1", running.admin.port)) as stalled:
            stalled.settimeout(10)
            url = f"https://127.0.0.1:{running.admin.port}/healthz"
            with urllib.request.urlopen(url, context=context, timeout=5) as response:
                assert response.status == 200 and json.loads(response.read()) == {"status": "ok"}
    finally:
        running.stop()


def test_every_endpoint_warns_when_it_listens_beyond_loopback_without_tls_and_token(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    setup = AgentSetup(tmp_path, grpc='host = "0.0.0.0"\n', admin='host = "0.0.0.0"\n',
                       sources='[sources.web]\ntype = "http"\nhost = "0.0.0.0"\nchannels = ["events"]\n')
    running = Agent(load_agent_config(setup.conf))
    with caplog.at_level(logging.WARNING):
        running.start()
    running.stop()
    warnings = sorted(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert [w.split(" listens on 0.0.0.0 without TLS and a bearer token: ")[0] for w in warnings] == [
        "HTTP source web", "admin endpoint", "agent gRPC endpoint"]


CLEAR, OPEN = "traffic crosses the network in clear", "anyone who can reach it can call it"


@pytest.mark.parametrize(("host", "tls", "token", "warning"), [
    ("127.0.0.1", False, False, None), ("localhost", False, False, None), ("::1", False, False, None),
    ("0.0.0.0", True, True, None),
    ("0.0.0.0", False, True, f"endpoint listens on 0.0.0.0 without TLS: {CLEAR}"),
    ("10.1.2.3", True, False, f"endpoint listens on 10.1.2.3 without a bearer token: {OPEN}"),
    ("::", False, False, f"endpoint listens on :: without TLS and a bearer token: {CLEAR}; {OPEN}"),
])
def test_the_exposure_warning(caplog: pytest.LogCaptureFixture, host: str, tls: bool, token: bool,
                              warning: str | None) -> None:
    log = logging.getLogger("test.exposure")
    with caplog.at_level(logging.WARNING, logger="test.exposure"):
        assert warn_if_exposed(log, "endpoint", host, tls=tls, token=token) == (warning is not None)
    assert [r.getMessage() for r in caplog.records] == ([warning] if warning else [])


def test_channel_counters_all_count_since_the_channel_opened(tmp_path: Path) -> None:
    """puts_total used to continue the channel's lifetime count after a restart (restored by
    recovery) while commits_total and fsyncs_total started again at zero: one scrape mixed the
    two meanings. Every ``ingest_channel_*_total`` now counts since the agent opened the channel;
    the lifetime counts stay in /status (``puts_committed``, ``takes_committed``)."""
    setup = AgentSetup(tmp_path)
    for puts in (5, 3):  # the second agent reopens the channel with 5 events committed before
        running = Agent(load_agent_config(setup.conf))
        running.start()
        try:
            with AgentClient(f"127.0.0.1:{running.ports()['grpc']}") as client:
                client.put([Event(b"x", {})] * puts, channel="events")
            with running.channels["events"].transaction() as tx:
                tx.take(2)
            assert running.admin is not None
            text = http_get(f"http://127.0.0.1:{running.admin.port}/metrics")[1]
            status = json.loads(http_get(f"http://127.0.0.1:{running.admin.port}/status")[1])
        finally:
            running.stop()
        assert metric(text, "ingest_channel_puts_total", channel="events") == puts
        assert metric(text, "ingest_channel_takes_total", channel="events") == 2
        assert metric(text, "ingest_channel_commits_total", channel="events") == 2
    live = status["channels"]["events"]
    assert (live["puts_committed"], live["takes_committed"]) == (8, 4)
    assert (live["puts_since_open"], live["takes_since_open"]) == (3, 2)


class _FullVolume:
    """Fault injection: the channel's file system reports ``free`` bytes left, as a full disk would."""

    def __init__(self, real: Any, free: int) -> None:
        self.real, self.free = real, free

    def free_bytes(self, path: str) -> int:
        return self.free

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
def guarded_agent(tmp_path: Path) -> Iterator[Agent]:
    """An agent whose channel keeps 1 MiB free (min_free_bytes), as every real one does."""
    setup = AgentSetup(tmp_path)
    running = Agent(load_agent_config(setup.conf, environ={"INGEST_CHANNELS__EVENTS__MIN_FREE_BYTES": "1048576"}))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_a_full_disk_warns_degrades_health_and_clears_when_puts_succeed_again(
        guarded_agent: Agent, caplog: pytest.LogCaptureFixture) -> None:
    """The agent refused every put for lack of disk space, logged nothing, /healthz stayed "ok" and
    ingest_agent_up 1; the refusal told the client to drain an empty channel."""
    agent = guarded_agent
    channel = agent.channels["events"]
    real = channel._fs
    channel._fs = _FullVolume(real, free=0)  # type: ignore[assignment]
    agent.writability.free = lambda _directory: 10 << 30  # the idle probe sees space: only refusals count here
    refusals = []
    with caplog.at_level(logging.INFO, logger="ingest_toolkit.collect.agent"), \
            AgentClient(f"127.0.0.1:{agent.ports()['grpc']}") as client:
        for _ in range(3):
            with pytest.raises(DiskSpaceError) as info:
                client.put([Event(b"x", {})], channel="events")
            refusals.append(str(info.value))
        status, body = http_get(_url(agent, "/healthz"))
        text = http_get(_url(agent, "/metrics"))[1]
        channel._fs = real  # space is back
        client.put([Event(b"y", {})], channel="events")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "refuses puts" in r.getMessage()]
    assert len(warnings) == 1 and getattr(warnings[0], "channel", None) == "events"  # once per minute, not per put
    assert status == 503
    health = json.loads(body)
    assert health["status"] == "degraded" and health["reasons"][0].startswith(
        "channel events: not writable: 3 puts refused for lack of disk space"), health
    assert metric(text, "ingest_agent_up") == 0 and metric(text, "ingest_channel_writable", channel="events") == 0
    assert "drain the channel" not in refusals[0]
    assert "The channel is empty, so draining it frees nothing" in refusals[0]
    assert http_get(_url(agent, "/healthz")) == (200, '{"status": "ok"}\n')
    assert any("accepts puts again after 3 refused" in r.getMessage() for r in caplog.records)
    after = http_get(_url(agent, "/metrics"))[1]
    assert metric(after, "ingest_channel_writable", channel="events") == 1


def test_an_idle_channel_on_a_full_volume_is_reported_without_a_put(guarded_agent: Agent) -> None:
    agent = guarded_agent
    minimum = agent.channels["events"].config.min_free_bytes
    agent.writability.free = lambda _directory: minimum  # nothing above the minimum: every put would fail
    status, body = http_get(_url(agent, "/healthz"))
    assert status == 503 and json.loads(body)["status"] == "degraded"
    assert "bytes free in" in json.loads(body)["reasons"][0] and "draining frees nothing" in body
    text = http_get(_url(agent, "/metrics"))[1]
    assert metric(text, "ingest_channel_writable", channel="events") == 0
    assert metric(text, "ingest_channel_free_bytes", channel="events") == minimum


def test_a_started_agent_has_written_checkpoint_meta_before_its_first_interval(tmp_path: Path) -> None:
    """With the shipped 30 s checkpoint interval, checkpoint_fresh failed ("no checkpoint.meta
    although a process owns the channel") and the sensors saw nothing for the first 30 s of every
    agent start. The agent checkpoints each channel right after opening it."""
    from ingest_toolkit.channel.checkpoint import read_checkpoint_meta

    setup = AgentSetup(tmp_path, channels=("events", "audit"))
    setup.conf.write_text(setup.conf.read_text().replace("checkpoint_interval = 2.0", "checkpoint_interval = 30.0"))
    running = Agent(load_agent_config(setup.conf))
    running.start()
    try:
        for name in setup.channels:
            info = read_checkpoint_meta(str(setup.checkpoint_dir(name)))
            assert info is not None and info.checkpoint_interval_s == 30.0, name
    finally:
        running.stop()
