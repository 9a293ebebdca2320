"""The agent as a real child process: every source feeds the channel; signals; refusals."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_toolkit.channel import Event, TxnState
from ingest_toolkit.channel.checkpoint import read_checkpoint_meta
from ingest_toolkit.rpc.client import AgentClient
from ingest_toolkit.rpc.errors import AgentUnavailableError, AuthenticationError, UnknownChannelError
from tests.certs import self_signed

from .harness import (
    REPO,
    AgentProcess,
    AgentSetup,
    drain,
    http_get,
    http_post,
    metric,
    write_spool_file,
)

pytestmark = pytest.mark.integration

TOKEN_ENV = "TEST_AGENT_TOKEN"


def _all_sources(root: Path) -> AgentSetup:
    (root / "spool").mkdir()
    (root / "logs").mkdir()
    return AgentSetup(root, sources=f"""
[sources.spool]
type = "spool_dir"
dir = "{root / 'spool'}"
channels = ["events"]
poll_interval = 0.05
interceptors = [{{ type = "timestamp" }}, {{ type = "host" }}]
[sources.tail]
type = "tail"
paths = ["{root / 'logs'}/*.log"]
channels = ["events"]
poll_interval = 0.05
[sources.web]
type = "http"
channels = ["events"]
""")


def _send(agent: AgentProcess, data: bytes, *args: str,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ingest_toolkit.cli", "send", "--ports-file", str(agent.setup.ports_file), *args],
        input=data.decode(), capture_output=True, text=True, cwd=REPO, env={**os.environ, **(env or {})},
        timeout=60)


def _wait_for(predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_spool_tail_http_and_grpc_feed_the_channel_then_sigterm_checkpoints(tmp_path: Path) -> None:
    setup = _all_sources(tmp_path)
    agent = AgentProcess(setup).wait_ready()
    write_spool_file(tmp_path / "spool", "a.txt", (f"spool-{i}" for i in range(100)))
    with (tmp_path / "logs" / "app.log").open("w") as log:
        log.write("".join(f"tail-{i}\n" for i in range(50)))
    assert http_post(agent.source_url("web"), "".join(f"http-{i}\n" for i in range(30)).encode()) == (
        200, {"accepted": 30, "duplicate": False})
    sent = _send(agent, "".join(f"grpc-{i}\n" for i in range(40)).encode(), "--batch-size", "15",
                 "--batch-id", "job-1")
    assert sent.returncode == 0, sent.stderr
    assert "40 accepted" in sent.stdout and "3 batches" in sent.stdout
    again = _send(agent, "".join(f"grpc-{i}\n" for i in range(40)).encode(), "--batch-size", "15",
                  "--batch-id", "job-1", "--json")
    assert '"duplicate_batches": 3' in again.stdout and '"accepted": 0' in again.stdout

    with AgentClient(agent.grpc_address) as client:
        _wait_for(lambda: client.status("events")["queue_size"] == 220)
    _, text = http_get(agent.admin_url("/metrics"))
    for pipeline, events in (("spool", 100), ("tail", 50), ("web", 30), ("grpc", 40)):
        assert metric(text, "ingest_pipeline_events_total", pipeline=pipeline) == events
    assert http_get(agent.admin_url("/healthz"))[0] == 200

    before = time.time_ns()
    assert agent.terminate() == 0, agent.log()
    assert "signal received, stopping" in agent.log() and "agent stopped" in agent.log()
    assert not setup.ports_file.exists()
    info = read_checkpoint_meta(str(setup.checkpoint_dir()))
    assert info is not None and info.written_unix_ns >= before and info.queue_size == 220
    taken = drain(setup.channel_settings())
    bodies = sorted(e.body.decode() for e in taken)
    expected = [f"{kind}-{i}" for kind, n in (("spool", 100), ("tail", 50), ("http", 30), ("grpc", 40))
                for i in range(n)]
    assert bodies == sorted(expected)
    spooled = [e for e in taken if e.body.startswith(b"spool-")]
    assert all("timestamp" in e.headers and "host" in e.headers for e in spooled)
    assert (tmp_path / "spool" / "a.txt.COMPLETED").exists()


def test_second_agent_on_the_same_channel_is_refused(tmp_path: Path) -> None:
    setup = AgentSetup(tmp_path / "one")
    first = AgentProcess(setup).wait_ready()
    try:
        # Same channel directories, its own state directory and ports file.
        text = setup.conf.read_text().replace(str(tmp_path / "one" / "state"), str(tmp_path / "two"))
        text = text.replace(str(setup.ports_file), str(tmp_path / "two.json"))
        (tmp_path / "two.toml").write_text(text)
        second = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf",
                                 str(tmp_path / "two.toml")], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert second.returncode == 1
        assert "ChannelLockedError" in second.stderr and "locked by another process" in second.stderr
        assert f"pid {first.proc.pid}" in second.stderr
        assert not (tmp_path / "two.json").exists()
        assert http_get(first.admin_url("/healthz"))[0] == 200
    finally:
        assert first.terminate() == 0


def test_source_errors_and_remote_take_latency_show_in_the_agent_metrics(tmp_path: Path) -> None:
    """A full channel makes the spool source's puts fail (ChannelFullError, retried) and a file
    that is not UTF-8 fails; both are counted per source in /metrics. Draining over gRPC records
    the remote take and commit latencies. Nothing is lost."""
    (tmp_path / "spool").mkdir()
    setup = AgentSetup(tmp_path, sources=f"""
[sources.spool]
type = "spool_dir"
dir = "{tmp_path / 'spool'}"
channels = ["events"]
batch_size = 5
poll_interval = 0.05
max_backoff = 0.2
""")
    env = {"INGEST_CHANNELS__EVENTS__CAPACITY": "10", "INGEST_CHANNELS__EVENTS__TRANSACTION_CAPACITY": "5"}
    agent = AgentProcess(setup, env=env).wait_ready()
    try:
        (tmp_path / "spool" / ".bad.log.tmp").write_bytes(b"not \xff utf-8\n")
        os.rename(tmp_path / "spool" / ".bad.log.tmp", tmp_path / "spool" / "bad.log")
        write_spool_file(tmp_path / "spool", "a.log", [f"line-{i}" for i in range(30)])

        def scrape() -> str:
            status, text = http_get(agent.admin_url("/metrics"))
            assert status == 200
            return text

        _wait_for(lambda: (metric(scrape(), "ingest_pipeline_errors_total", pipeline="spool",
                                  error="ChannelFullError") or 0) >= 1
                  and metric(scrape(), "ingest_source_errors_total", source="spool") == 1)
        taken: list[bytes] = []
        commits = 0
        with AgentClient(agent.grpc_address) as client:
            while len(taken) < 30:
                with client.open_take("events", 5) as take:
                    taken += [e.body for e in take.events]
                commits += 1
        text = scrape()
        assert sorted(taken) == sorted(f"line-{i}".encode() for i in range(30))
        assert metric(text, "ingest_source_stat", source="spool", stat="files_failed") == 1
        assert metric(text, "ingest_remote_take_seconds_count", channel="events") == commits
        assert metric(text, "ingest_remote_commit_seconds_count", channel="events") == commits
        assert (metric(text, "ingest_remote_commit_seconds_sum", channel="events") or 0) > 0
    finally:
        assert agent.terminate() == 0


def test_wrong_token_and_unknown_channel_are_refused(tmp_path: Path) -> None:
    env = {TOKEN_ENV: "tok-123"}
    setup = AgentSetup(tmp_path, security=f'token_env = "{TOKEN_ENV}"\n', sources=f"""
[sources.web]
type = "http"
channels = ["events"]
security = {{ token_env = "{TOKEN_ENV}" }}
""")
    agent = AgentProcess(setup, env=env).wait_ready()
    try:
        with AgentClient(agent.grpc_address, token="wrong") as client, pytest.raises(AuthenticationError):
            client.put([], channel="events")
        with AgentClient(agent.grpc_address, token="tok-123") as client:
            with pytest.raises(UnknownChannelError, match="unknown channel 'nope'"):
                client.put([], channel="nope")
        assert http_post(agent.source_url("web"), b"x\n", token="wrong")[0] == 401
        status, doc = http_post(agent.source_url("web", "/events/nope"), b"x\n", token="guessed-token")
        assert status == 401 and "events" not in json.dumps(doc)  # no 404 listing the channels
        assert http_post(agent.source_url("web", "/events/nope"), b"x\n", token="tok-123")[0] == 404
        assert http_post(agent.source_url("web"), b"x\n", token="tok-123")[0] == 200
        refused = _send(agent, b"x\n", "--token-env", TOKEN_ENV, env={TOKEN_ENV: "bad"})
        assert refused.returncode == 1 and "AuthenticationError" in refused.stderr
        ok = _send(agent, b"y\n", "--token-env", TOKEN_ENV, "--channel", "events", env=env)
        assert ok.returncode == 0 and "1 accepted" in ok.stdout
        log = agent.log()
        assert "source web: refused POST '/events/nope' from 127.0.0.1: a wrong bearer token" in log, log
        assert "guessed-token" not in log and "tok-123" not in log
    finally:
        assert agent.terminate() == 0
    assert sorted(e.body for e in drain(setup.channel_settings())) == [b"x", b"y"]


def test_send_to_an_unreachable_agent_fails_clearly() -> None:
    result = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "send", "--agent", "127.0.0.1:1",
                             "--retries", "0"], input="x\n", capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 1
    assert "cannot reach the agent at 127.0.0.1:1" in result.stderr


@pytest.mark.parametrize("where", ["grpc", "http"])
def test_missing_token_variable_exits_1_before_opening_channels(tmp_path: Path, where: str) -> None:
    unset = 'token_env = "TEST_AGENT_UNSET_TOKEN"'
    setup = AgentSetup(tmp_path, security=f"{unset}\n" if where == "grpc" else "", sources=(
        f'[sources.web]\ntype = "http"\nchannels = ["events"]\nsecurity = {{ {unset} }}\n' if where == "http" else ""))
    env = {k: v for k, v in os.environ.items() if k != "TEST_AGENT_UNSET_TOKEN"}
    result = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf", str(setup.conf)],
                            capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert result.returncode == 1
    key = "agent.security.token_env" if where == "grpc" else "sources.web.security.token_env"
    assert key in result.stderr and "TEST_AGENT_UNSET_TOKEN" in result.stderr, result.stderr
    assert not setup.checkpoint_dir().exists() and not (tmp_path / "state").exists()


def test_sigterm_rolls_back_an_open_remote_take(tmp_path: Path) -> None:
    setup = AgentSetup(tmp_path, shutdown_timeout=1.0)
    agent = AgentProcess(setup).wait_ready()
    with AgentClient(agent.grpc_address) as client:
        client.put([Event(f"e{i}".encode(), {}) for i in range(20)], channel="events")
        take = client.open_take("events", 10, lease_seconds=300)
        assert [e.body for e in take.events] == [f"e{i}".encode() for i in range(10)]
        started = time.monotonic()
        agent.proc.send_signal(signal.SIGINT)
        assert agent.wait() == 0, agent.log()
        assert time.monotonic() - started < 10
    assert [e.body for e in drain(setup.channel_settings())] == [f"e{i}".encode() for i in range(20)]


def _wait_stopped(pid: int) -> None:
    """Until the kernel reports ``pid`` stopped (state T in /proc/<pid>/stat)."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "SIGSTOP did not stop the agent"
        time.sleep(0.01)


def test_a_frozen_agent_times_the_taker_out_and_ends_its_take(tmp_path: Path) -> None:
    """SIGSTOP freezes the agent (HTTP/2 pings go unanswered too, but only after 30 s): the
    client's per-answer timeout ends the wait; once the agent runs again it ends the take, by
    the commit it had been sent or by the cancel, and nothing is left open."""
    setup = AgentSetup(tmp_path)
    agent = AgentProcess(setup).wait_ready()
    with AgentClient(agent.grpc_address) as client, AgentClient(agent.grpc_address, timeout=3.0) as impatient:
        client.put([Event(f"e{i}".encode(), {}) for i in range(20)], channel="events")
        take = impatient.open_take("events", 10, lease_seconds=300)
        agent.proc.send_signal(signal.SIGSTOP)
        try:
            _wait_stopped(agent.proc.pid)  # else the commit may reach the agent first and really commit
            started = time.monotonic()
            with pytest.raises(AgentUnavailableError, match="no answer from the agent within 3 s"):
                take.commit()
            assert 2.9 < time.monotonic() - started < 20
            assert take.state is TxnState.UNKNOWN  # a commit without an answer may or may not have happened
        finally:
            agent.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 20
        while client.status("events")["remote_transactions"]["open"]:
            assert time.monotonic() < deadline, "the frozen take was never ended"
            time.sleep(0.05)
    assert agent.terminate() == 0
    # The commit was sent before the timeout: the agent may have read it before the cancel (the
    # take is gone) or not (rolled back, back at the head). Never half of it, never twice.
    remaining = [e.body for e in drain(setup.channel_settings())]
    assert remaining in ([f"e{i}".encode() for i in range(20)], [f"e{i}".encode() for i in range(10, 20)])


def test_grpc_over_tls(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    setup = AgentSetup(tmp_path, security=f'tls = {{ cert_file = "{cert}", key_file = "{key}" }}\n')
    agent = AgentProcess(setup).wait_ready()
    try:
        sent = _send(agent, b"secret\n", "--tls-ca", str(cert), "--channel", "events")
        assert sent.returncode == 0 and "1 accepted" in sent.stdout, sent.stderr
        with AgentClient(agent.grpc_address, timeout=5) as plain, pytest.raises(AgentUnavailableError):
            plain.put([Event(b"x", {})], channel="events")
    finally:
        assert agent.terminate() == 0
    assert [e.body for e in drain(setup.channel_settings())] == [b"secret"]


def test_a_port_in_use_is_a_clear_error_and_nothing_stays_locked(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        setup = AgentSetup(tmp_path)
        text = setup.conf.read_text().replace("[agent.admin]\nport = 0\n",
                                              f"[agent.admin]\nport = {busy.getsockname()[1]}\n")
        setup.conf.write_text(text)
        result = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf", str(setup.conf)],
                                capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 1
    assert "agent.admin.port" in result.stderr and "in use" in result.stderr, result.stderr
    agent = AgentProcess(setup).wait_ready()  # the failed start released every lock
    assert agent.terminate() == 0


@contextlib.contextmanager
def _read_only(directory: Path) -> Iterator[None]:
    """``directory`` refuses new files: permission bits for a normal user; the immutable flag for
    root, whom permission bits do not stop (skips when the file system has no such flag)."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        directory.chmod(0o555)
        undo = ["chmod", "755", str(directory)]
    else:
        if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode != 0:
            pytest.skip("cannot make a directory read-only for root here (chattr +i)")
        undo = ["chattr", "-i", str(directory)]
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


@pytest.mark.parametrize("which", ["data_dirs", "state_dir"])
def test_a_read_only_directory_fails_the_check_and_the_start_in_one_line(tmp_path: Path, which: str) -> None:
    """``agent --check`` said "configuration OK" and the start died with a raw OSError traceback
    (after the other directories were created and locked). Both now name the setting and the
    directory in one line, and the start opens nothing."""
    setup = AgentSetup(tmp_path)
    directory = tmp_path / "channels" / "events" / "data" if which == "data_dirs" else tmp_path / "state"
    key = "channels.events.data_dirs" if which == "data_dirs" else "agent.state_dir"
    with _read_only(directory):
        for args in (["--check"], []):
            done = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf", str(setup.conf),
                                   *args], capture_output=True, text=True, cwd=REPO, timeout=60)
            assert done.returncode == 1, (args, done.stdout, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
            assert f"{key}: {directory} is not writable" in lines[0] and "configuration OK" not in done.stdout, lines
        assert not setup.checkpoint_dir().exists()  # nothing opened, nothing locked
        assert not (tmp_path / "ports.json").exists()
