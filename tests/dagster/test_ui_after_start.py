"""What a real `dg dev` shows as soon as it started (issue 31, item 7), read over its GraphQL API:
no curated partition before the first landed hour (so none of them "missing"), the channel's
first observation with the numbers it read and the size with its unit, a channel whose agent
does not answer observed without numbers (its plot does not start with zeros), and each check's
runbook link a real URL. No Spark: the landed table is its hour directories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pendulum
import pytest

from ingest_toolkit.dagster.instance import write_instance_yaml

from .helpers import events_at, fill, make_setup
from .test_definitions import REPO, _free_port, _graphql, _sigint_default, _wait_up

pytestmark = [pytest.mark.slow, pytest.mark.integration]

_CURATED = ('{ assetNodeOrError(assetKey: {path: ["events_curated"]}) { __typename ... on AssetNode { '
            "partitionKeys partitionStats { numPartitions numMaterialized } } } }")
_OBSERVED = ('{ assetOrError(assetKey: {path: ["events_channel"]}) { ... on Asset { assetObservations(limit: 5) '
             "{ metadataEntries { label __typename } } } } }")


def _until(port: int, query: str, ready: str, timeout: float = 120) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        answer = _graphql(port, query)
        if ready in str(answer):
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(1.0)


def test_dg_dev_lists_no_partition_before_the_data_and_plots_only_what_it_read(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    first = pendulum.now("UTC").start_of("hour").subtract(hours=2)
    landed = tmp_path / "landing" / "events" / f"event_date={first.format('YYYY-MM-DD')}"
    (landed / f"event_hour={first.format('HH')}").mkdir(parents=True)
    channel = setup.open()
    fill(channel, events_at(50, 0))
    channel.close()
    home = tmp_path / "dagster"
    write_instance_yaml(home, REPO / "conf")
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "INGEST_CONF_DIR": str(setup.conf)}
    with (tmp_path / "dg.log").open("wb") as log:
        server = subprocess.Popen([str(Path(sys.executable).with_name("dg")), "dev", "-p", str(port), "-h",
                                   "127.0.0.1"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True, preexec_fn=_sigint_default)
    try:
        _wait_up(server, port, tmp_path / "dg.log")
        curated = _until(port, _CURATED, "AssetNode")["assetNodeOrError"]
        observed = _until(port, _OBSERVED, "disk_use")["assetOrError"]
        fleet = _until(port, _OBSERVED.replace('"events_channel"', '"agg_a_events_channel"'),
                       "metadataEntries")["assetOrError"]
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    keys = curated["partitionKeys"]  # type: ignore[index]
    assert keys[0] == first.format("YYYY-MM-DD-HH:mm") and len(keys) in (3, 4), keys  # not 3 days before it
    assert curated["partitionStats"]["numPartitions"] == len(keys)  # type: ignore[index]
    entries = {e["label"]: e["__typename"] for e in observed["assetObservations"][0]["metadataEntries"]}  # type: ignore[index]
    assert entries["bytes_on_disk"] == "IntMetadataEntry" and entries["disk_use"] == "TextMetadataEntry"
    assert fleet["assetObservations"]  # type: ignore[index]
    for observation in fleet["assetObservations"]:  # type: ignore[index]
        numbers = [e["label"] for e in observation["metadataEntries"] if e["__typename"] != "TextMetadataEntry"]
        assert numbers == [], numbers  # the aggregator of the fleet is not running: nothing was read
