"""The main job end to end: `python -m dagster_defs.demo` in a scratch copy of conf/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest_toolkit.orchestrate.verdict import CHECKS

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.integration
def test_demo_runs_the_whole_pipeline_through_a_real_agent(tmp_path: Path) -> None:
    shutil.copytree(REPO / "conf", tmp_path / "conf")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INGEST_", "DAGSTER_HOME"))}
    env["PYTHONPATH"] = str(REPO)  # dagster_defs is the checkout's project, not installed
    done = subprocess.run([sys.executable, "-m", "dagster_defs.demo", "--files", "3", "--lines", "400"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert f"{len(CHECKS)} of {len(CHECKS)} checks passed" in output
    assert "curated table (parquet): 3 of 1200 rows, typed columns" in output  # the three rows it prints
    assert "from agent 127.0.0.1:" in output  # the landing found the demo's agent and took through it
    tree = tmp_path / "var" / "demo"
    landed = pq.read_table(tree / "landing" / "events")
    assert landed.num_rows == 1200
    assert len(set(landed.column("event_id").to_pylist())) == 1200
    schema = json.loads((tree / "curated" / "events" / "_schema.json").read_text())
    assert {c["name"]: c["type"] for c in schema["columns"]} == {
        "action": "string", "amount": "double", "file": "long", "n": "long", "user": "string"}
    curated = pq.read_table(tree / "curated" / "events")
    assert curated.num_rows == 1200 and curated.schema.field("amount").type == pa.float64()
    assert curated.column("_rescued_data").null_count == 1200
    assert (tree / "dagster" / "dagster.yaml").exists()
    assert not (tree / "agent" / "ports.json").exists()  # the agent stopped cleanly
    assert sorted(p.name for p in (tmp_path / "var").iterdir()) == ["demo"]  # nothing written outside its tree
    assert f"INGEST_CONF_DIR=var/demo/conf DAGSTER_HOME={tree / 'dagster'}" in output


def _shipped_conf_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository-like root with the shipped conf/, as the current directory, no INGEST_* overrides."""
    shutil.copytree(REPO / "conf", tmp_path / "conf")
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("INGEST_") or n == "DAGSTER_HOME"]:
        monkeypatch.delenv(name)
    return tmp_path


def _files(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_ino for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.integration
def test_the_demo_leaves_the_channel_of_a_live_agent_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent running from the shipped conf/agent.toml (as a service would) owns var/channels/events;
    the demo's preparation must not delete a file of it, nor the agent's state."""
    from dagster_defs.demo_steps import DemoPaths, clear
    from ingest_toolkit.channel import Event
    from ingest_toolkit.rpc.client import AgentClient

    root = _shipped_conf_root(tmp_path, monkeypatch)
    env = {**os.environ, "INGEST_AGENT__GRPC__PORT": "0", "INGEST_AGENT__ADMIN__PORT": "0",
           "INGEST_AGENT__LOG_FORMAT": "kv"}
    agent = subprocess.Popen([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf", "conf/agent.toml"],
                             cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ports = _wait_for_ports(root / "var" / "agent" / "ports.json", agent)
        with AgentClient(f"127.0.0.1:{ports['grpc']}") as client:
            for at in range(0, 3000, 1000):
                client.put([Event(str(n).encode()) for n in range(at, at + 1000)], channel="events")
            channel_files, state_files = _files(root / "var" / "channels"), _files(root / "var" / "agent")
            try:
                clear(DemoPaths.from_conf(root))
            except Exception:
                pass  # refusing is allowed; deleting is not
            assert _files(root / "var" / "channels") == channel_files
            assert _files(root / "var" / "agent") == state_files
            assert client.status("events")["queue_size"] == 3000
        assert agent.poll() is None
    finally:
        agent.terminate()
        assert agent.wait(30) == 0
    from ingest_toolkit.channel import FileChannel
    from ingest_toolkit.collect.config import load_agent_config

    with FileChannel(**load_agent_config("conf/agent.toml").channels["events"].model_dump()) as channel:
        assert len(channel) == 3000  # the next start finds its channel, with every event


def _wait_for_ports(path: Path, process: subprocess.Popen[bytes], timeout: float = 30.0) -> dict[str, int]:
    import json
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the agent exited with {process.returncode}"
        try:
            ports = json.loads(path.read_text())
            if ports.get("pid") == process.pid:
                return ports  # type: ignore[no-any-return]
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no ports file {path}")


def test_the_demos_dagster_instance_holds_only_the_runs_of_its_data(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo recreates its data, so it recreates the instance that records it: a UI on it never
    shows curated partitions whose files the demo deleted."""
    from dagster_defs.demo_steps import DemoPaths, clear, prepare_instance

    root = _shipped_conf_root(tmp_path, monkeypatch)
    paths = DemoPaths.from_conf(root)
    stale = paths.dagster_home / "history" / "runs-of-an-earlier-demo"
    stale.parent.mkdir(parents=True)
    stale.write_text("materializations of partitions whose files are gone")
    clear(paths)
    prepare_instance(paths)
    assert not stale.exists()
    assert (paths.dagster_home / "dagster.yaml").is_file()


_HOLD = ("import sys, time\nfrom ingest_toolkit.channel.lock import DirectoryLock\n"
         "lock = DirectoryLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(120)\n")


def test_the_demo_refuses_when_a_live_process_holds_a_lock_in_its_tree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Say an agent was started from var/demo/conf and still runs: the demo stops with one line,
    exit code 1, and deletes nothing."""
    from dagster_defs.demo import main

    root = _shipped_conf_root(tmp_path, monkeypatch)
    checkpoint = root / "var" / "demo" / "channels" / "events" / "checkpoint"
    checkpoint.mkdir(parents=True)
    kept = root / "var" / "demo" / "landing" / "events" / "part-0.parquet"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"landed earlier")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(checkpoint)], stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        assert main(["--files", "1", "--lines", "10"]) == 1
    finally:
        holder.kill()
        holder.wait()
    output = capsys.readouterr().out.strip()
    assert len(output.splitlines()) == 1, output
    assert f"pid {holder.pid}" in output and str(checkpoint) in output and "nothing was deleted" in output
    assert kept.read_bytes() == b"landed earlier" and (checkpoint / "in_use.lock").exists()


def test_the_check_table_piped_keeps_every_name_whole() -> None:
    """Piped, the demo's check table was cut at 80 columns and check names broke mid-word."""
    from dagster_defs import demo
    from dagster_defs.demo_pipeline import CheckRow, check_table

    rows = [CheckRow("curated_no_duplicate_event_ids", "events_with_a_long_channel_name_curated", True, "ERROR",
                     "curated table: 10000 rows in 3 files, every event_id once " * 3)]
    assert not demo.console.is_terminal  # pytest captures stdout: what a pipe gets
    with demo.console.capture() as captured:
        demo.console.print(check_table(rows))
    lines = captured.get().splitlines()
    body = [line for line in lines if "curated_no_duplicate_event_ids" in line]
    assert len(body) == 1 and "events_with_a_long_channel_name_curated" in body[0], lines
    assert len([line for line in lines if line.startswith("│")]) == 1, lines  # the row is one line
