"""The README's "A fleet on one machine" commands, run as written, on the shipped conf/ files.

The bash block of that section is extracted from README.md and run by bash (``set -e`` first),
in a deployment root holding a copy of the repository's ``conf/`` and ``.venv`` (a link to the
virtualenv running the tests): three real agents (conf/aggregator-a.toml, conf/aggregator-b.toml,
conf/edge.toml), ``send``, a SIGTERM of aggregator a and its restart, the edge forwarding through
its failover group, and two Spark landings. Nothing in the commands or the files is changed.
At the end ``var/landing/events`` must hold the 20,000 events sent, once each, from both
aggregators' channels.

The files use fixed ports (7441/7442, 7451/7452, 7461/7462: forward targets need fixed
addresses), so runs on one machine take turns (a lock file), and a port taken by something else
fails the test naming it.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_toolkit.collect.preflight import bind_problem

from ..land.helpers import read_landed
from .session import clean_env

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
PORTS = (7441, 7442, 7451, 7452, 7461, 7462)
SECTION = "## A fleet on one machine: an edge and two aggregators"


def readme_block() -> str:
    """The first bash block of the README's fleet section, as printed."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(SECTION):]
    match = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert match is not None, "the fleet section has no bash block"
    return match.group(1)


@pytest.fixture
def fixed_ports() -> Iterator[None]:
    """One run at a time on this machine; the README's ports free."""
    with open(Path(tempfile.gettempdir()) / "ingest-toolkit-readme-fleet.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        taken = [problem for port in PORTS if (problem := bind_problem("127.0.0.1", port))]
        if taken:
            pytest.fail(f"the README's fleet needs its fixed ports: {'; '.join(taken)}")
        yield


def _deployment(root: Path) -> Path:
    shutil.copytree(REPO / "conf", root / "conf")
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    assert (root / ".venv" / "bin" / "ingest-toolkit").exists(), "the tests run from a virtualenv with the toolkit"
    return root


def test_the_readme_fleet_lands_every_event_once_from_both_aggregators(tmp_path: Path, fixed_ports: None) -> None:
    root = _deployment(tmp_path / "deploy")
    script = "set -e\n" + readme_block()
    shell = subprocess.Popen(["bash", "-c", script], cwd=root, env=clean_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = shell.communicate(timeout=600)
    finally:
        if shell.poll() is None or shell.returncode != 0:
            os.killpg(shell.pid, signal.SIGKILL)  # bash and the agents it started in the background
            shell.wait()
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((root / "var").glob("*.log")))
    assert shell.returncode == 0, output + logs
    table = read_landed(root / "var" / "landing", "events")
    bodies = Counter(table.column("body").to_pylist())
    assert len(bodies) == 20_000 and max(bodies.values()) == 1, output
    assert set(bodies) == {str(n).encode() for n in range(1, 20_001)}
    ids = table.column("event_id").to_pylist()
    assert len(set(ids)) == 20_000
    assert len({event_id.split("-")[0] for event_id in ids}) == 2, "both aggregators' channels landed events"
    assert output.count("sent 10,000 events") == 2, output
