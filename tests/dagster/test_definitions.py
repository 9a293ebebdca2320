"""The definitions load from conf/, from a generated conf dir, and in a real `dg dev` whose instance
is configured from conf/dagster.yaml (pools, a real backfill through the daemon)."""

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
import pyarrow.parquet as pq
import pytest

from ingest_toolkit.channel.checkpoint import read_checkpoint_meta
from ingest_toolkit.dagster.factory import build_definitions
from ingest_toolkit.dagster.instance import ensure_pool_limits, pool_limit, write_instance_yaml
from ingest_toolkit.dagster.naming import curated_key, curated_sensor_name

from .helpers import events_at, fill, hour_ms, make_setup

REPO = Path(__file__).resolve().parents[2]


def test_repository_definitions_load() -> None:
    """``dagster_defs.definitions.defs`` over the repository's own conf/ (what `dg dev` loads): a
    component instance per channel."""
    from dagster_defs.definitions import defs as load_defs

    defs = load_defs()
    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_all_asset_keys()}
    assert {"events_channel", "events_landed", "events_curated"} <= keys
    assert {s.name for s in defs.sensors or []} >= {"landing_sensor_events", "curated_sensor_events",
                                                    "channel_observer_events"}
    # the fleet of conf/edge.toml: one instance per aggregator, landing into one table, curated once
    assert {"agg_a_events_channel", "agg_a_events_landed", "agg_a_events_curated", "agg_b_events_channel",
            "agg_b_events_landed"} <= keys and "agg_b_events_curated" not in keys
    assert {s.name for s in defs.sensors or []} >= {"landing_sensor_agg_a_events", "landing_sensor_agg_b_events"}


def test_one_set_of_definitions_per_channel(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    (setup.conf / "agent.toml").write_text((setup.conf / "agent.toml").read_text() + (
        f'\n[channels."audit.log"]\ncheckpoint_dir = "{tmp_path}/a/cp"\ndata_dirs = ["{tmp_path}/a/data"]\n'))
    from ingest_toolkit.orchestrate.settings import load_channel_specs

    defs = build_definitions(setup.settings, load_channel_specs(setup.conf / "agent.toml"))
    dg.Definitions.validate_loadable(defs)
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"land_events", "land_audit_log", "curate_audit_log",
                                                             "check_audit_log"}
    landed = defs.resolve_assets_def(dg.AssetKey(["audit_log_landed"]))
    assert landed.op.pool == "landing-audit.log"
    curated = defs.resolve_assets_def(dg.AssetKey(["audit_log_curated"]))
    assert curated.op.pool == "curated-audit.log"
    assert curated.backfill_policy == dg.BackfillPolicy.single_run()  # a backfill is one run, one Spark session
    checks = defs.resolve_asset_graph().asset_check_keys
    assert len(checks) == 32  # 16 per channel: 7 on the channel, 4 on the landed table, 5 on the curated one


def test_instance_configured_from_conf_limits_every_pool_to_one_run(tmp_path: Path) -> None:
    """conf/dagster.yaml, copied into DAGSTER_HOME, is what limits the pools; without it there is no limit."""
    write_instance_yaml(tmp_path, REPO / "conf")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        assert config.pool_config.pool_granularity is not None
        assert config.pool_config.pool_granularity.value == "run"
        assert pool_limit(instance, "landing-events") == 1 and pool_limit(instance, "curated-events") == 1
        assert config.run_queue_config is not None
        assert {(t["key"], t["limit"]) for t in config.run_queue_config.tag_concurrency_limits} == {
            ("ingest/landing", 1), ("ingest/curated", 1)}
        ensure_pool_limits(instance, ["events"])
        assert instance.event_log_storage.get_concurrency_info("landing-events").slot_count == 1
    with dg.instance_for_test() as plain:  # what `dg dev` gets without it
        assert pool_limit(plain, "landing-events") is None


def test_the_repository_root_has_no_instance_configuration() -> None:
    """The instance configuration lives in conf/; a dagster.yaml at the root would be read only by a
    `dg dev` without DAGSTER_HOME, and differ silently from the checked-in one."""
    assert (REPO / "conf" / "dagster.yaml").is_file() and not (REPO / "dagster.yaml").exists()


def _sigint_default() -> None:
    """In the child: SIGINT back to its default. A process started from a non-interactive shell's
    background job inherits SIGINT *ignored*, and `dg dev` would then never see our SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _graphql(port: int, query: str, variables: dict[str, object] | None = None) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", headers={"Content-Type": "application/json"},
        data=json.dumps({"query": query, "variables": variables or {}}).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    assert "errors" not in answer, answer
    return answer["data"]  # type: ignore[no-any-return]


HOURS = ["2026-11-20-08:00", "2026-11-20-09:00", "2026-11-20-10:00"]


@pytest.mark.slow
@pytest.mark.integration
def test_dg_dev_serves_assets_runs_one_landing_at_a_time_and_backfills_curated_hours(tmp_path: Path) -> None:
    """A real `dg dev` (webserver + daemon) on an instance configured from conf/dagster.yaml:
    assets and checks over GraphQL; two landing runs launched at once run one after the other;
    a backfill of three curated hours (one run, single-run policy) completes through the daemon."""
    setup = make_setup(tmp_path)
    (setup.conf / "dagster.toml").write_text(f'[dagster]\ncurated_root = "{tmp_path}/curated"\n')
    channel = setup.open()
    fill(channel, events_at(200, hour_ms("2026-11-20T08:00:00+00:00")))
    fill(channel, events_at(100, hour_ms("2026-11-20T10:05:00+00:00"), step_ms=30_000))
    channel.close()
    home = tmp_path / "dagster"
    write_instance_yaml(home, REPO / "conf")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        ensure_pool_limits(instance, ["events"])
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "INGEST_CONF_DIR": str(setup.conf)}
    dg_bin = Path(sys.executable).with_name("dg")
    started = time.monotonic()
    with (tmp_path / "dg.log").open("wb") as log:
        server = subprocess.Popen([str(dg_bin), "dev", "-p", str(port), "-h", "127.0.0.1"], cwd=REPO, env=env,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=_sigint_default)
    try:
        _wait_up(server, port, tmp_path / "dg.log")
        nodes = _graphql(port, "{ assetNodes { assetKey { path } assetChecksOrError { ... on AssetChecks "
                               "{ checks { name } } } } }")["assetNodes"]
        found = {"/".join(n["assetKey"]["path"]): sorted(c["name"] for c in n["assetChecksOrError"]["checks"])
                 for n in nodes}  # type: ignore[attr-defined]
        expected = {
            "events_channel": ["backlog_below_capacity", "checkpoint_fresh", "drained_logs_deleted",
                               "forward_sinks_reachable", "recovery_losses_acknowledged", "refcounts_match_recount",
                               "referenced_logs_intact"],
            "events_landed": ["landed_files_per_partition", "landed_fully_replicated", "landed_no_duplicate_event_ids",
                              "landed_reconciles"],
            "events_curated": ["curated_covers_landed", "curated_no_duplicate_event_ids",
                               "curated_rescued_below_threshold", "curated_rows_discarded", "curated_schema_drift"]}
        # the repository's fleet instances beside it: agg_a curates the shared table, agg_b only lands
        fleet = {f"{node}_{kind}": expected[f"events_{kind}"] for node, kinds in
                 (("agg_a_events", ("channel", "landed", "curated")), ("agg_b_events", ("channel", "landed")))
                 for kind in kinds}
        assert found == {**expected, **fleet}
        _stop_sensor(port, curated_sensor_name("events"))  # the backfill below is the curation under test
        run_ids = [_launch(port, "land_events"), _launch(port, "land_events")]
        overlapped = _watch_runs(port, run_ids, timeout=240)
        landed_at = time.monotonic()
        first_keys = _reload_and_partition_keys(port)  # partitions_start = auto: now the first landed hour
        backfill = _launch_backfill(port, ["events_curated"], HOURS)
        status = _wait_backfill(port, backfill, timeout=180)
        observed = _wait_observation(port, timeout=120)  # the channel observer sensor, through the daemon
        print(f"landing runs {landed_at - started:.0f} s after start, backfill {time.monotonic() - landed_at:.0f} s")
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
    assert first_keys[:3] == HOURS and len(first_keys) < 24 * 30, first_keys[:5]  # not 2026-01-01 onwards
    assert {"committed_backlog", "checkpoint_id", "bytes_on_disk"} <= set(observed), observed
    info = read_checkpoint_meta(setup.spec.checkpoint_dir)
    assert info is not None and info.takes_committed == 300 and info.queue_size == 0
    assert status == "COMPLETED_SUCCESS"
    day = tmp_path / "curated" / "events" / "event_date=2026-11-20"
    assert [pq.read_table(day / f"event_hour={h}").num_rows for h in ("08", "09", "10")] == [200, 0, 100]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_materialized_partitions(curated_key("events")) == set(HOURS)
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill}))
        assert len(runs) == 1  # single-run backfill policy: the three hours in one run


def _stop_sensor(port: int, name: str) -> None:
    selector = {"repositoryLocationName": "ingest_toolkit", "repositoryName": "__repository__", "sensorName": name}
    sensor = _graphql(port, "query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename "
                            "... on Sensor { id sensorState { id } } } }", {"s": selector})["sensorOrError"]
    stopped = _graphql(port, "mutation($id: String) { stopSensor(id: $id) { __typename ... on StopSensorMutationResult "
                             "{ instigationState { status } } ... on PythonError { message } } }",
                       {"id": sensor["sensorState"]["id"]})["stopSensor"]  # type: ignore[index]
    assert stopped["instigationState"]["status"] == "STOPPED", stopped  # type: ignore[index]


def _reload_and_partition_keys(port: int, timeout: float = 120) -> list[str]:
    """Reload the code location (the curated partitions' auto start follows the landed data) and
    return the curated asset's partition keys once it is loaded again."""
    _graphql(port, 'mutation { reloadRepositoryLocation(repositoryLocationName: "ingest_toolkit") { __typename } }')
    deadline = time.monotonic() + timeout
    while True:
        try:
            node = _graphql(port, '{ assetNodeOrError(assetKey: {path: ["events_curated"]}) { __typename '
                                  "... on AssetNode { partitionKeys } } }")["assetNodeOrError"]
            if node.get("__typename") == "AssetNode":  # type: ignore[union-attr]
                return list(node["partitionKeys"])  # type: ignore[index]
        except (AssertionError, OSError):
            pass  # the location is still loading
        assert time.monotonic() < deadline, "the code location did not come back after its reload"
        time.sleep(1.0)


def _wait_observation(port: int, timeout: float) -> list[str]:
    """The metadata labels of the channel asset's latest observation (recorded by its sensor)."""
    query = ('{ assetNodeOrError(assetKey: {path: ["events_channel"]}) { ... on AssetNode { isObservable } } '
             'assetOrError(assetKey: {path: ["events_channel"]}) { ... on Asset { assetObservations(limit: 1) '
             "{ metadataEntries { label } } } } }")
    deadline = time.monotonic() + timeout
    while True:
        answer = _graphql(port, query)
        assert answer["assetNodeOrError"]["isObservable"] is True  # type: ignore[index]
        observations = answer["assetOrError"]["assetObservations"]  # type: ignore[index]
        if observations:
            return [entry["label"] for entry in observations[0]["metadataEntries"]]
        assert time.monotonic() < deadline, "no observation of the channel was recorded"
        time.sleep(2.0)


_BACKFILL = """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""


def _launch_backfill(port: int, asset: list[str], partitions: list[str]) -> str:
    params = {"assetSelection": [{"path": asset}], "partitionNames": partitions, "fromFailure": False}
    launched = _graphql(port, _BACKFILL, {"p": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched  # type: ignore[index]
    return str(launched["backfillId"])  # type: ignore[index]


def _wait_backfill(port: int, backfill_id: str, timeout: float) -> str:
    """Poll until the daemon finished the backfill; its final status."""
    deadline = time.monotonic() + timeout
    while True:
        status = _graphql(port, "query($id: String!) { partitionBackfillOrError(backfillId: $id) { "
                                "... on PartitionBackfill { status } } }", {"id": backfill_id})
        value = str(status["partitionBackfillOrError"]["status"])  # type: ignore[index]
        if value not in ("REQUESTED", "CANCELING", "FAILING"):
            return value
        assert time.monotonic() < deadline, f"backfill {backfill_id} still {value} after {timeout:.0f} s"
        time.sleep(1.0)


_LAUNCH = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""


def _launch(port: int, job: str) -> str:
    params = {"selector": {"repositoryLocationName": "ingest_toolkit", "repositoryName": "__repository__",
                           "jobName": job}, "runConfigData": {}}
    launched = _graphql(port, _LAUNCH, {"p": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched  # type: ignore[index]
    return str(launched["run"]["runId"])  # type: ignore[index]


def _watch_runs(port: int, run_ids: list[str], timeout: float) -> bool:
    """Poll until every run ended (each must succeed); True if two were ever in progress at once."""
    overlapped = False
    deadline = time.monotonic() + timeout
    while True:
        runs = _graphql(port, "{ runsOrError { ... on Runs { results { runId status } } } }")
        status = {r["runId"]: r["status"] for r in runs["runsOrError"]["results"]  # type: ignore[index]
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
