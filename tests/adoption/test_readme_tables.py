"""The README's "Into a Delta Lake or Apache Iceberg table" block, run as a new user types it: the
lines of the block, in order, in an empty directory, through bash. Only what a shell session
cannot show a script is adapted: the install line (this virtualenv already has the ``[tables]``
extra: its ``bin`` goes first on the PATH), a wait for the agent's ports file after the line that
starts it in the background (a user waits as long), the agent's ports made ephemeral through the
environment (another agent on this machine may hold the shipped ones), and the agent stopped at
the end. The block's own last line must print what the README says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .session import EPHEMERAL_PORTS, clean_env

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MARKER = "**Into a Delta Lake or Apache Iceberg table**"


def readme_block() -> list[str]:
    """The lines of the first bash block after the marker, and what the README says it prints."""
    text = (REPO / "README.md").read_text()
    after = text[text.index(MARKER):]
    block = re.search(r"```bash\n(.*?)```", after, re.S)
    assert block is not None, "no bash block after the marker"
    return [line for line in block.group(1).splitlines() if line.strip()]


def run_readme(tmp_path: Path, *after: str) -> subprocess.CompletedProcess[str]:
    """The README block in ``tmp_path`` through bash (module docstring), then ``after``."""
    install, *session = readme_block()
    assert "pip install 'ingest-toolkit[tables]'" in install and "source .venv/bin/activate" in install
    background = [i for i, line in enumerate(session) if line.split("#", 1)[0].rstrip().endswith("&")]
    assert len(background) == 1, "one command (the agent) runs in the background"
    wait = "for _ in $(seq 300); do [ -s var/agent/ports.json ] && break; sleep 0.1; done"
    script = ["set -e", *session[:background[0] + 1], wait, *session[background[0] + 1:], "kill %1", "wait", *after]
    env = {**clean_env(), **EPHEMERAL_PORTS, "PATH": f"{Path(sys.executable).parent}:{clean_env()['PATH']}"}
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
    return done


def test_the_readme_lands_into_a_delta_table_in_one_command(tmp_path: Path) -> None:
    done = run_readme(tmp_path)
    assert done.stdout.strip().splitlines()[-1] == "1 1000", done.stdout
    assert "landed 1,000 events" in done.stdout and "into delta version 1" in done.stdout, done.stdout
    promised = (REPO / "README.md").read_text().split(MARKER, 1)[1]
    assert "The last line prints `1 1000`" in promised
    assert (tmp_path / "lakehouse" / "var" / "landing" / "events" / "_delta_log").is_dir()


def test_time_travel_to_a_batch_as_docs_landing_shows_it(tmp_path: Path) -> None:
    """The README block, then docs/landing.md's time-travel example in the same directory."""
    text = (REPO / "docs" / "landing.md").read_text()
    example = re.search(r"### Time travel to a batch's version.*?```bash\n(.*?)```", text, re.S)
    assert example is not None
    done = run_readme(tmp_path, example.group(1))
    *_, commit, travelled = done.stdout.strip().splitlines()
    version, _batch_id, number, events = commit.split()
    assert (version, number, events) == ("1", "1", "1000") and travelled == "True 1000", done.stdout
