"""``land --check`` and the checks before the first take (issue 31, item 4).

An unwritable landing root used to fail after Spark had started and taken the batch (19.5 s),
naming a Hadoop ``_temporary`` path. Now ``land --check`` says so in seconds, one line per check,
and a normal ``land`` refuses before it takes anything. The commands run as a user runs them (a
child process), against a real channel, a real Java and a real agent process. The root is made
unwritable by a regular file where its parent directory should be: the tests may run as root,
whom permission bits do not stop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_toolkit.channel import FileChannel
from tests.agent.harness import AgentProcess, AgentSetup
from tests.fleet.harness import free_port

from .helpers import channel_settings, make_events, put_events

REPO = Path(__file__).resolve().parents[2]


def _land(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "land", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    return done, time.monotonic() - started


def _in_process(tmp_path: Path, root: Path | str, events: int = 50, **landing: str) -> Path:
    """A channel holding ``events`` events, landed in-process into ``root``."""
    settings = channel_settings(tmp_path)
    with FileChannel(**settings) as channel:
        put_events(channel, make_events(events))
    (tmp_path / "channel.toml").write_text("[channel]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                                                    for k, v in settings.items()))
    extra = "".join(f'{key} = "{value}"\n' for key, value in landing.items())
    conf = tmp_path / "landing.toml"
    conf.write_text(f'[landing]\nroot = "{root}"\nchannel_conf = "{tmp_path / "channel.toml"}"\n{extra}'
                    '[spark]\nmaster = "local[1]"\n')
    return conf


def _checks(stdout: str) -> dict[str, tuple[str, str]]:
    """``{check: (status, detail)}`` of ``land --check``'s lines."""
    found = {}
    for line in stdout.splitlines()[:-1]:
        status, name, detail = line[:4].strip(), line[6:18].strip(), line[20:]
        found[name] = (status, detail)
    return found


def test_an_unwritable_root_fails_the_check_in_seconds_and_the_landing_takes_nothing(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where the landing root's parent should be\n")
    root = tmp_path / "blocker" / "landing"
    conf = _in_process(tmp_path, root)

    done, seconds = _land("--conf", str(conf), "--channel", "events", "--check", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    checks = _checks(done.stdout + "\n")
    assert list(checks) == ["landing root", "java", "spark", "agent", "channel"], done.stdout
    status, detail = checks["landing root"]
    assert status == "FAIL" and f"{root}/events cannot be created" in detail and "[landing] root" in detail
    assert checks["java"][0] == checks["spark"][0] == checks["channel"][0] == "ok", done.stdout
    assert checks["agent"][0] == "skip"
    assert done.stderr.splitlines()[-1] == "Error: landing check failed: landing root (1 of 5 checks failed)"
    assert seconds < 20, seconds  # no Spark session: a few seconds on a loaded 2-core machine

    done, seconds = _land("--conf", str(conf), "--channel", "events", cwd=tmp_path)
    assert done.returncode == 1
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert error.startswith(f"Error: PreflightError: landing root: {root}/events cannot be created"), error
    assert error.endswith("nothing was taken") and "Spark" not in done.stderr, done.stderr
    assert seconds < 20, seconds
    with FileChannel(**channel_settings(tmp_path)) as channel:
        assert len(channel) == 50  # nothing was taken


def test_the_check_says_what_it_could_not_check_and_what_a_format_does_not_need(tmp_path: Path) -> None:
    conf = _in_process(tmp_path, "s3a://bucket/landing", format="delta")
    done, _ = _land("--conf", str(conf), "--channel", "events", "--check", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    checks = _checks(done.stdout)
    assert checks["landing root"][0] == "skip" and "s3a:// roots are not checked" in checks["landing root"][1]
    assert checks["java"] == ("skip", "not needed: a delta table is written without Spark")
    assert checks["channel"][0] == "ok" and "its directories are writable" in checks["channel"][1]
    assert done.stdout.splitlines()[-1] == ("landing check passed: 1 checks ok, 4 not checked "
                                            "(landing root, java, spark, agent)")

    dead = free_port()  # an HDFS name node that does not answer: found without a JVM
    conf.write_text(conf.read_text().replace("s3a://bucket/landing", f"hdfs://127.0.0.1:{dead}/landing"))
    done, _ = _land("--conf", str(conf), "--channel", "events", "--check", "--json", cwd=tmp_path)
    assert done.returncode == 1
    document = json.loads(done.stdout)
    assert document["passed"] is False
    (root,) = [c for c in document["checks"] if c["name"] == "landing root"]
    assert root["status"] == "FAIL" and f"the name node 127.0.0.1:{dead} does not answer" in root["detail"]


@pytest.fixture
def live_agent(tmp_path: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(AgentSetup(tmp_path / "agent")).wait_ready()
    try:
        yield agent
    finally:
        if agent.proc.poll() is None:
            agent.terminate()


@pytest.mark.integration
def test_the_check_reaches_the_agent_the_landing_would_take_through(tmp_path: Path,
                                                                    live_agent: AgentProcess) -> None:
    from ingest_toolkit.channel import Event
    from ingest_toolkit.rpc.client import AgentClient

    with AgentClient(live_agent.grpc_address) as client:
        client.put([Event(f"e{i}".encode(), {}) for i in range(300)], channel="events")
    conf = tmp_path / "landing.toml"
    conf.write_text(f'[landing]\nroot = "{tmp_path / "landing"}"\nagent_conf = "{live_agent.setup.conf}"\n')
    done, _ = _land("--conf", str(conf), "--channel", "events", "--check", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    checks = _checks(done.stdout)
    assert checks["agent"][0] == "ok" and live_agent.grpc_address in checks["agent"][1], done.stdout
    assert checks["channel"] == ("ok", "'events': 300 committed events to land")
    assert done.stdout.splitlines()[-1] == "landing check passed: 5 checks ok"

    address = live_agent.grpc_address
    live_agent.terminate()
    done, seconds = _land("--conf", str(conf), "--channel", "events", "--check", "--agent", address,
                          cwd=tmp_path)
    assert done.returncode == 1
    status, detail = _checks(done.stdout)["agent"]
    assert status == "FAIL" and detail.startswith(f"{address}: "), detail
    assert "Traceback" not in done.stderr and seconds < 20
