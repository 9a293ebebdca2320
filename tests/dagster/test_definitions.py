"""The definitions load from conf/, from a generated conf dir, and in a real `dg dev`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

from dagster_defs.demo_steps import write_dagster_yaml
from dagster_defs.factory import build_definitions
from dagster_defs.naming import ensure_pool_limits
from ingest_toolkit.channel.checkpoint import read_checkpoint_meta

from .helpers import events_at, fill, hour_ms, make_setup

REPO = Path(__file__).resolve().parents[2]


def test_repository_definitions_load() -> None:
    """``dagster_defs.definitions.defs`` over the repository's own conf/ (what `dg dev` loads)."""
    from dagster_defs.definitions import defs

    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_all_asset_keys()}
    assert {"channel/events", "landed/events", "curated/events"} <= keys


def test_one_set_of_definitions_per_channel(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    (setup.conf / "agent.toml").write_text((setup.conf / "agent.toml").read_text() + (
        f'\n[channels."audit.log"]\ncheckpoint_dir = "{tmp_path}/a/cp"\ndata_dirs = ["{tmp_path}/a/data"]\n'))
    from dagster_defs.channels import load_channel_specs

    defs = build_definitions(setup.settings, load_channel_specs(setup.conf / "agent.toml"))
    dg.Definitions.validate_loadable(defs)
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"land_events", "land_audit_log", "curate_audit_log",
                                                             "check_audit_log"}
    landed = defs.resolve_assets_def(dg.AssetKey(["landed", "audit_log"]))
    assert landed.op.pool == "landing-audit.log"
    checks = defs.resolve_asset_graph().asset_check_keys
    assert len(checks) == 14


def _sigint_default() -> None:
    """In the child: SIGINT back to its default. A process started from a non-interactive shell's
    background job inherits SIGINT *ignored*, and `dg dev` would then never see our SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _graphql(port: int, query: str) -> dict[str, object]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.integration
def test_dg_dev_serves_assets_and_checks_and_runs_one_landing_at_a_time(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(200, hour_ms("2026-11-20T08:00:00+00:00")))
    channel.close()
    home = tmp_path / "dagster"
    write_dagster_yaml(home)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        ensure_pool_limits(instance, ["events"])
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "INGEST_CONF_DIR": str(setup.conf)}
    dg_bin = Path(sys.executable).with_name("dg")
    with (tmp_path / "dg.log").open("wb") as log:
        server = subprocess.Popen([str(dg_bin), "dev", "-p", str(port), "-h", "127.0.0.1"], cwd=REPO, env=env,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=_sigint_default)
    try:
        _wait_up(server, port, tmp_path / "dg.log")
        nodes = _graphql(port, "{ assetNodes { assetKey { path } assetChecksOrError { ... on AssetChecks "
                               "{ checks { name } } } } }")["data"]["assetNodes"]  # type: ignore[index]
        found = {"/".join(n["assetKey"]["path"]): sorted(c["name"] for c in n["assetChecksOrError"]["checks"])
                 for n in nodes}
        assert found == {
            "channel/events": ["backlog_below_capacity", "checkpoint_fresh", "drained_logs_deleted",
                               "refcounts_match_recount"],
            "landed/events": ["landed_no_duplicate_event_ids", "landed_reconciles"],
            "curated/events": ["curated_no_duplicate_event_ids"]}
        run_ids = [_launch(port, "land_events"), _launch(port, "land_events")]
        overlapped = _watch_runs(port, run_ids, timeout=240)
    finally:
        stopping = time.monotonic()
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(30)
            print(f"dg dev stopped {time.monotonic() - stopping:.1f} s after SIGINT")
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert not overlapped, "two landing runs of one channel were in progress at the same time"
    info = read_checkpoint_meta(setup.spec.checkpoint_dir)
    assert info is not None and info.takes_committed == 200 and info.queue_size == 0


_LAUNCH = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""


def _launch(port: int, job: str) -> str:
    params = {"selector": {"repositoryLocationName": "ingest_toolkit", "repositoryName": "__repository__",
                           "jobName": job}, "runConfigData": {}}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", headers={"Content-Type": "application/json"},
        data=json.dumps({"query": _LAUNCH, "variables": {"p": params}}).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        launched = json.loads(response.read())["data"]["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return str(launched["run"]["runId"])


def _watch_runs(port: int, run_ids: list[str], timeout: float) -> bool:
    """Poll until every run ended (each must succeed); True if two were ever in progress at once."""
    overlapped = False
    deadline = time.monotonic() + timeout
    while True:
        runs = _graphql(port, "{ runsOrError { ... on Runs { results { runId status } } } }")
        status = {r["runId"]: r["status"] for r in runs["data"]["runsOrError"]["results"]  # type: ignore[index]
                  if r["runId"] in run_ids}
        overlapped |= sum(s in ("STARTING", "STARTED") for s in status.values()) > 1
        if all(s in ("SUCCESS", "FAILURE", "CANCELED") for s in status.values()) and len(status) == len(run_ids):
            assert set(status.values()) == {"SUCCESS"}, status
            return overlapped
        assert time.monotonic() < deadline, f"runs did not finish in {timeout:.0f} s: {status}"
        time.sleep(0.3)


def _wait_up(server: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"dg dev exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"dg dev did not answer in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def test_demo_instance_limits_every_landing_pool_to_one_run(tmp_path: Path) -> None:
    write_dagster_yaml(tmp_path)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        assert config.pool_config.pool_granularity is not None
        assert config.pool_config.pool_granularity.value == "run"
        assert instance.event_log_storage.get_concurrency_info("landing-events").limit == 1
