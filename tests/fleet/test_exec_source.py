"""The exec source in a real agent: lines become events, the command restarts, and no process the
command started survives the agent - stopped (SIGTERM), SIGKILLed by pid, or SIGKILLed with its
whole process group (the supervisor lives in a session of its own and ends the command's tree)."""

from __future__ import annotations

import os
import signal
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


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(parent pid, state, start time) of a process, None when there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[1]), fields[0], fields[19]


def _below(root: int) -> dict[int, str]:
    """Every live process below ``root`` in the tree: pid -> start time (a reused pid is another)."""
    parents = {int(p.name): stat for p in Path("/proc").iterdir() if p.name.isdigit()
               and (stat := _stat(int(p.name))) is not None and stat[1] != "Z"}
    found: dict[int, str] = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (parent, _state, _start) in parents.items() if parent in frontier}
        found.update({pid: parents[pid][2] for pid in frontier})
    return found


def _wait_idle(agent: AgentProcess) -> None:
    """Until the channel stops growing: every line written went through. (A line still in the pipe
    when the agent dies would end grep with SIGPIPE by itself, and tail after it, hiding an orphan.)"""
    last = -1
    while (now := _queued(agent)) != last:
        last = now
        time.sleep(0.3)


def _running(pid: int, started: str) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z" and stat[2] == started


def _mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                stat = _stat(int(entry.name))
                if stat is not None and stat[1] != "Z":
                    out.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in out if pid != os.getpid()]


@pytest.mark.parametrize("kill", ["SIGKILL of the agent's pid", "SIGKILL of the agent's process group",
                                  "SIGTERM of the agent"])
def test_no_process_of_a_shell_pipeline_outlives_the_agent(tmp_path: Path, kill: str) -> None:
    # collectors.md's own example: tail and grep block on their input and output, so nothing but
    # the supervisor can end them once the agent is gone; no line is written after the kill
    log = tmp_path / "app.log"
    log.write_text("")
    setup = FleetSetup(tmp_path / "agent", extra=(
        '[sources.cmd]\ntype = "exec"\nchannels = ["events"]\nshell = true\n'
        f'command = "tail -F -n 0 {log} | grep --line-buffered -v DEBUG"\nlinger = 0.05\nstop_grace = 1.0\n'))
    agent = AgentProcess(setup, process_group=True).wait_ready()
    pipeline: dict[int, str] = {}
    try:
        def lines_flow() -> bool:
            with log.open("a") as f:
                f.write("INFO one\nDEBUG two\n")
            return _queued(agent) > 0

        wait_for(lines_flow, what="a line through tail and grep")
        _wait_idle(agent)
        pipeline = wait_for(lambda: tree if len(tree := _below(agent.proc.pid)) >= 4 else None,
                            what="the supervisor, sh, tail and grep")
        assert len(_mentioning(str(log))) >= 2  # sh -c ..., tail -F ...
        if kill == "SIGTERM of the agent":
            assert agent.terminate() == 0
        elif kill == "SIGKILL of the agent's pid":
            agent.kill()
        else:
            os.killpg(agent.proc.pid, signal.SIGKILL)  # kill -9 -- -<pgid>: every process of the agent's group
            agent.wait()
        wait_for(lambda: not any(_running(pid, started) for pid, started in pipeline.items()), timeout=5,
                 what=f"every process of the command to end after a {kill}: {pipeline}")
        assert _mentioning(str(log)) == []
    finally:
        for pid, started in pipeline.items():  # never leave them to the next test
            if _running(pid, started):
                os.kill(pid, signal.SIGKILL)
    events = drain(setup.channel_settings())
    assert {e.body for e in events} == {b"INFO one"}


def test_a_daemonized_grandchild_is_ended_with_the_command(tmp_path: Path) -> None:
    """A process that leaves the command's session (setsid) and loses its parent is adopted by the
    supervisor (a child subreaper) and ended with the rest when the lifeline closes."""
    import subprocess
    import sys

    pidfile = tmp_path / "daemon.pid"
    script = f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 600' & wait"
    proc = subprocess.Popen([sys.executable, "-m", "ingest_toolkit.collect.sources.exec_supervisor", "0.5", "--",
                             "/bin/sh", "-c", script], stdin=subprocess.PIPE)
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the daemon")
    daemon = int(pidfile.read_text())
    try:
        assert _alive(daemon)
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(10) == 143
        wait_for(lambda: not _alive(daemon), timeout=5, what="the setsid'ed process to end")
    finally:
        if _alive(daemon):
            os.kill(daemon, signal.SIGKILL)
