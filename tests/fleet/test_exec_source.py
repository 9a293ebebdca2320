"""The exec source in a real agent: lines become events, the command restarts, and no process of
the command's group survives the agent - stopped, or SIGKILLed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ingest_toolkit.collect.config import load_agent_config
from ingest_toolkit.errors import ConfigError
from ingest_toolkit.rpc.client import AgentClient

from ..agent.harness import AgentProcess, drain, http_get
from .harness import FleetSetup, wait_for

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone: it runs no code)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _setup(root: Path) -> FleetSetup:
    script = (f'sleep 600 & echo $! > {root}/grandchild.pid; echo $$ > {root}/child.pid; i=0; '
              'while true; do i=$((i+1)); echo "tick $i"; sleep 0.01; done')
    return FleetSetup(root, extra=(f'[sources.cmd]\ntype = "exec"\nchannels = ["events"]\nshell = true\n'
                                   f'command = """{script}"""\nbatch_size = 20\nlinger = 0.05\nstop_grace = 1.0\n'
                                   'min_backoff = 0.2\nmax_backoff = 1.0\n'))


def _start(setup: FleetSetup) -> AgentProcess:
    for name in ("child.pid", "grandchild.pid"):
        (setup.root / name).unlink(missing_ok=True)
    return AgentProcess(setup).wait_ready()


def _wait_for_ticks(agent: AgentProcess) -> None:
    before = _queued(agent)
    wait_for(lambda: _queued(agent) > before + 50, what="events from the command")


def _wait_gone(pids: list[int], what: str) -> None:
    wait_for(lambda: not any(_alive(p) for p in pids), timeout=10, what=what)


def _queued(agent: AgentProcess) -> int:
    with AgentClient(agent.grpc_address) as client:
        return int(client.status("events")["queue_size"])


def _pids(root: Path, agent: AgentProcess) -> list[int]:
    wait_for(lambda: (root / "grandchild.pid").exists() and (root / "child.pid").exists(), what="the pid files")
    _code, body = http_get(agent.admin_url("/status"))
    import json

    supervisor = json.loads(body)["sources"]["cmd"]["command_pid"]
    pids = [supervisor, int((root / "child.pid").read_text()), int((root / "grandchild.pid").read_text())]
    assert all(_alive(p) for p in pids), pids
    return pids


@pytest.mark.slow
def test_sigkill_of_the_agent_leaves_no_process_of_the_command_and_a_restart_resumes(tmp_path: Path) -> None:
    setup = _setup(tmp_path)
    for _round in range(2):
        agent = _start(setup)
        _wait_for_ticks(agent)
        pids = _pids(tmp_path, agent)
        agent.kill()  # SIGKILL: no shutdown code runs in the agent
        _wait_gone(pids, f"the supervisor, the shell and its background sleep ({pids}) to end")
    agent = _start(setup)
    pids = _pids(tmp_path, agent)
    assert agent.terminate() == 0
    wait_for(lambda: not any(_alive(p) for p in pids), timeout=10, what="the command's group after a stop")
    events = drain(setup.channel_settings())
    ticks = [e.body.decode() for e in events]
    assert len(ticks) > 100 and all(t.startswith("tick ") for t in ticks)
    assert ticks.count("tick 1") == 3  # each agent start ran the command anew


def test_a_command_that_exits_is_restarted_with_backoff(tmp_path: Path) -> None:
    setup = FleetSetup(tmp_path, extra=('[sources.cmd]\ntype = "exec"\nchannels = ["events"]\n'
                                        'command = ["printf", "a\\\\nb\\\\nno newline"]\nlinger = 0\n'
                                        'min_backoff = 0.1\nmax_backoff = 0.4\n'))
    agent = AgentProcess(setup).wait_ready()
    wait_for(lambda: _queued(agent) >= 9, what="three runs of the command")
    assert agent.terminate() == 0
    bodies = [e.body for e in drain(setup.channel_settings())]
    assert bodies[:6] == [b"a", b"b", b"no newline"] * 2


@pytest.mark.parametrize(("table", "message"), [
    ('command = "tail -F x"\n', "argument list"),
    ('command = ["tail", "-F", "x"]\nshell = true\n', "one string"),
    ('command = []\n', "argument list"),
])
def test_command_settings_are_checked(tmp_path: Path, table: str, message: str) -> None:
    setup = FleetSetup(tmp_path, extra=f'[sources.cmd]\ntype = "exec"\nchannels = ["events"]\n{table}')
    with pytest.raises(ConfigError, match=message) as err:
        load_agent_config(setup.conf)
    assert "sources.cmd" in str(err.value)


def test_the_supervisor_ends_the_group_when_its_lifeline_closes(tmp_path: Path) -> None:
    import subprocess
    import sys

    pidfile = tmp_path / "sleep.pid"
    proc = subprocess.Popen([sys.executable, "-m", "ingest_toolkit.collect.sources.exec_supervisor", "0.5", "--",
                             "/bin/sh", "-c", f"sleep 600 & echo $! > {pidfile}; wait"], stdin=subprocess.PIPE)
    wait_for(pidfile.exists, what="the background sleep")
    time.sleep(0.1)
    sleeper = int(pidfile.read_text())
    assert _alive(sleeper)
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(10) == 143
    wait_for(lambda: not _alive(sleeper), timeout=5, what="the sleep to end")
    assert os.path.exists(pidfile)
