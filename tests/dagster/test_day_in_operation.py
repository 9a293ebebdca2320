"""A day of operation, end to end, on the SHIPPED configuration (conf/ as it is in the repository).

The agent runs as a service would, from ``conf/agent.toml``, with its directories and ports moved
by ``INGEST_*`` environment overrides (temporary directories, ephemeral ports): the way an
operator adapts the shipped files without editing them. Beside it, the way a team uses it:

* producers send with ``ingest-toolkit send --ports-file`` and drop a file into the spool;
* ``ingest-toolkit land --conf conf/landing.toml --channel events`` finds the agent that owns
  the channel and takes through it;
* the Dagster landing asset (what the UI's Materialize runs), a curated partition and every
  check, through the Definitions built from conf/;
* someone runs the demo (the README's main command) at the same time: it works in its own tree
  and leaves the live agent and its data alone;
* ``channel inspect`` while the agent runs; then the agent is stopped and ``channel verify`` is
  clean, and every event sent is in the landed table exactly once.

Cost: about 60-90 s on an idle 2-core machine (the demo runs concurrently with the rest; two
Spark sessions start at the same time, the demo's and the test process's shared one, which
``land`` and the Dagster runs reuse).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ingest_toolkit.channel.lock import lock_holder
from ingest_toolkit.cli import main
from ingest_toolkit.orchestrate.verdict import CHECKS

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


def _overrides(live: Path) -> dict[str, str]:
    """The service's directories and ports, moved off the shipped values by environment only."""
    return {
        "INGEST_AGENT__GRPC__PORT": "0", "INGEST_AGENT__ADMIN__PORT": "0",
        "INGEST_AGENT__STATE_DIR": str(live / "agent"), "INGEST_AGENT__PORTS_FILE": str(live / "agent" / "ports.json"),
        "INGEST_AGENT__LOG_FORMAT": "kv",
        "INGEST_CHANNELS__EVENTS__CHECKPOINT_DIR": str(live / "channels" / "events" / "checkpoint"),
        "INGEST_CHANNELS__EVENTS__DATA_DIRS": str(live / "channels" / "events" / "data"),
        "INGEST_SOURCES__SPOOL__DIR": str(live / "spool"),
        "INGEST_LANDING__ROOT": str(live / "landing"),
        "INGEST_DAGSTER__CURATED_ROOT": str(live / "curated"),
    }


def _cli(args: list[str], root: Path, env: dict[str, str], stdin: str | None = None,
         timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", *args], cwd=root, env=env, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def _wait(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _ports(path: Path, agent: subprocess.Popen[bytes]) -> dict[str, Any] | None:
    assert agent.poll() is None, f"the agent exited with {agent.returncode}"
    try:
        ports = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return ports if ports.get("pid") == agent.pid else None


def _status(address: str) -> dict[str, Any]:
    from ingest_toolkit.rpc.client import AgentClient

    with AgentClient(address) as client:
        return client.status("events")


def test_a_day_in_operation_on_the_shipped_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        request: pytest.FixtureRequest) -> None:
    root, live = tmp_path / "deploy", tmp_path / "live"
    shutil.copytree(REPO / "conf", root / "conf")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INGEST_", "DAGSTER_HOME"))}
    env.update(_overrides(live), PYTHONPATH=str(REPO))
    for name in [n for n in os.environ if n.startswith("INGEST_")]:
        monkeypatch.delenv(name)
    for name, value in _overrides(live).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(root)

    agent = subprocess.Popen([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf", "conf/agent.toml"],
                             cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    demo: subprocess.Popen[str] | None = None
    try:
        ports_file = live / "agent" / "ports.json"
        ports = _wait(lambda: _ports(ports_file, agent), "the agent's ports file")
        address = f"127.0.0.1:{ports['grpc']}"

        # Morning: producers send, a file lands in the spool.
        sent = _cli(["send", "--ports-file", str(ports_file), "--channel", "events"], root, env,
                    stdin="".join(f'{{"n": {n}}}\n' for n in range(2000)))
        assert sent.returncode == 0 and "2,000 accepted" in sent.stdout, sent.stdout + sent.stderr
        (live / "spool" / ".batch-1.tmp").write_text("".join(f'{{"spooled": {n}}}\n' for n in range(500)))
        os.rename(live / "spool" / ".batch-1.tmp", live / "spool" / "batch-1.jsonl")
        _wait(lambda: _status(address)["live"]["puts_committed"] == 2500, "the spool file to be committed")

        # Someone runs the README's main command beside the service.
        identity = (live / "channels" / "events" / "checkpoint" / "channel.id").read_text()
        demo = subprocess.Popen([sys.executable, "-m", "dagster_defs.demo", "--files", "1", "--lines", "300"],
                                cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        # The operator lands from the command line while the agent runs. In this process, so that
        # it shares the session-wide Spark session (started now, while the demo starts its own).
        request.getfixturevalue("spark")
        landed = CliRunner().invoke(main, ["land", "--conf", "conf/landing.toml", "--channel", "events", "--json"])
        assert landed.exit_code == 0, landed.output[-3000:]
        assert f"owned by agent 'local' (pid {agent.pid})" in landed.stderr and address in landed.stderr
        assert json.loads(landed.stdout)["totals"]["events"] == 2500

        # Afternoon: more events; the UI's Materialize of the landing asset, a curated hour, every check.
        assert _cli(["send", "--ports-file", str(ports_file), "--channel", "events"], root, env,
                    stdin="".join(f'{{"late": {n}}}\n' for n in range(700))).returncode == 0
        _dagster_day(address, agent.pid, live)

        inspected = _cli(["channel", "inspect", "--conf", "conf/agent.toml", "--channel", "events", "--json"],
                         root, env)
        assert inspected.returncode == 0, inspected.stdout + inspected.stderr
        owner = json.loads(inspected.stdout)["owner"]
        assert owner["locked"] is True and owner["holder"] == f"pid {agent.pid}"

        output, _ = demo.communicate(timeout=300)
        assert demo.returncode == 0, output[-4000:]
        assert f"{len(CHECKS)} of {len(CHECKS)} checks passed" in output and f"{root / 'var' / 'demo'}" in output
        assert agent.poll() is None and _status(address)["live"]["puts_committed"] == 3200
        checkpoint = live / "channels" / "events" / "checkpoint"
        assert (checkpoint / "channel.id").read_text() == identity  # the same channel, never recreated
        assert lock_holder(str(checkpoint)) == agent.pid
        assert sorted(p.name for p in (root / "var").iterdir()) == ["demo"]  # the demo wrote only its tree
    finally:
        if demo is not None and demo.poll() is None:
            demo.kill()
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(60) == 0

    # Evening: the agent is stopped; the channel verifies clean and nothing was lost or doubled.
    verified = _cli(["channel", "verify", "--conf", "conf/agent.toml", "--channel", "events", "--json"], root, env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["ok"] and report["queue_size"] == 0 and report["findings"] == []
    table = pq.read_table(live / "landing" / "events")
    assert table.num_rows == 3200 and len(set(table.column("event_id").to_pylist())) == 3200


def _dagster_day(address: str, agent_pid: int, live: Path) -> None:
    """The landing asset, the curated partitions it fed and every check, through the code location
    (its component instance over conf/; the environment overrides apply as they do under ``dg dev``)."""
    from dagster_defs.definitions import defs as load_defs
    from dagster_defs.demo_pipeline import landed_partition_keys
    from ingest_toolkit.dagster.naming import checks_job_name, curated_job_name, landed_key, landing_op_name
    from ingest_toolkit.orchestrate.settings import load_orchestration_settings
    from ingest_toolkit.orchestrate.verdict import CHECKS

    defs = load_defs()
    with dg.instance_for_test() as instance:
        result = dg.materialize([defs.get_assets_def(landed_key("events"))], instance=instance,
                                resources=defs.resources)
        assert result.success
        (materialization,) = result.asset_materializations_for_node(landing_op_name("events"))
        assert materialization.metadata["events"].value == 700
        assert str(materialization.metadata["source"].value).startswith(f"agent {address} (pid {agent_pid}")
        curate = defs.resolve_job_def(curated_job_name("events"))
        for key in landed_partition_keys(live / "landing" / "events", load_orchestration_settings()):
            assert curate.execute_in_process(instance=instance, partition_key=key).success
        checks = defs.resolve_job_def(checks_job_name("events")).execute_in_process(
            instance=instance, raise_on_error=False).get_asset_check_evaluations()
        failed = [(c.check_name, c.description) for c in checks if not c.passed]
        assert len(checks) == len(CHECKS) and not failed, failed
