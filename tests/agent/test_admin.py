"""The agent in-process (real sockets, real channels): health, metrics, status, admin auth."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.collect.agent import Agent
from ingest_toolkit.collect.config import load_agent_config
from ingest_toolkit.collect.metrics import Histogram, Sample, render
from ingest_toolkit.rpc.client import AgentClient

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


def test_metrics_and_status_need_the_admin_token(agent: Agent) -> None:
    assert http_get(_url(agent, "/metrics"))[0] == 401
    assert http_get(_url(agent, "/metrics"), token="wrong")[0] == 401
    assert http_get(_url(agent, "/status"))[0] == 401
    assert http_get(_url(agent, "/nope"))[0] == 404
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
    assert metric(text, "ingest_source_up", source="spool") == 1
    assert metric(text, "ingest_source_stat", source="web", stat="requests") == 3
    for line in text.splitlines():  # every sample line is "<name>{labels} <number>"
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


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
