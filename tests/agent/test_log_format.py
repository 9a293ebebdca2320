"""The agent's log as its reader gets it (issue 31, item 6): lines for a person when it runs in a
terminal, JSON lines when its stderr is a pipe or a file (a service manager, a log collector), and
JSON on a terminal too when ``--log-format json`` asks. The agent runs as a user starts it, in a
directory made by ``ingest-toolkit init`` (ports 0), in a real pseudo-terminal (pexpect) or with
its stderr in a file."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pexpect
import pytest

from .deployment import CLEAN_ENV, CLI, Deployment

pytestmark = pytest.mark.integration

WAIT = 60
CONSOLE_LINE = r"\d\d:\d\d:\d\d INFO +agent ready  ports_file="


def _agent_in_terminal(root: Path, *args: str) -> str:
    """``ingest-toolkit agent ARGS`` in a terminal until it is ready, then Ctrl-C: what it showed."""
    child = pexpect.spawn(CLI[0], [*CLI[1:], "agent", *args], cwd=str(root), env={**CLEAN_ENV, "TERM": "xterm"},
                          dimensions=(40, 200), encoding="utf-8", timeout=WAIT)
    child.logfile_read = shown = io.StringIO()
    child.expect("agent ready")
    child.expect("\n")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, shown.getvalue()
    return shown.getvalue()


def test_on_a_terminal_the_agent_logs_lines_for_a_person(tmp_path: Path) -> None:
    root = Deployment(tmp_path / "ingest").root
    shown = _agent_in_terminal(root)
    assert re.search(CONSOLE_LINE, shown), shown
    assert "agent stopped" in shown
    lines = [line for line in shown.splitlines() if line.strip()]
    assert not [line for line in lines if line.lstrip("^C").startswith("{")], shown  # no JSON object


def test_on_a_terminal_json_when_asked(tmp_path: Path) -> None:
    root = Deployment(tmp_path / "ingest").root
    shown = _agent_in_terminal(root, "--log-format", "json")
    ready = next(line for line in shown.splitlines() if "agent ready" in line)
    assert json.loads(ready[ready.index("{"):])["msg"] == "agent ready"


def test_into_a_file_or_a_pipe_the_agent_logs_json_lines(tmp_path: Path) -> None:
    deployment = Deployment(tmp_path / "ingest").start()  # stderr into agent.log
    deployment.stop()
    records = [json.loads(line) for line in deployment.log().splitlines() if line.strip()]
    assert {"agent ready", "agent stopped"} <= {r["msg"] for r in records}
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
