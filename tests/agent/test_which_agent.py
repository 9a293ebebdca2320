"""Every client command finds the agent the same way and names it (issue 31, item 1).

Two deployments made with ``ingest-toolkit init``, each with its agent on ephemeral ports: ``ours``
and ``theirs``. Run from ``ours`` without options, ``send``, ``land``, ``status`` and ``channel
inspect`` reach our agent through our ports file and say so; pointed at their agent while our
configuration takes part, they refuse (the channel ids differ) and nothing reaches theirs. A
configuration whose agent is not running is an error, never a fall back to a default address.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .deployment import Deployment

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    deployment = Deployment(tmp_path_factory.mktemp("ours") / "ingest").start()
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    deployment = Deployment(tmp_path_factory.mktemp("theirs") / "ingest").start()
    try:
        yield deployment
    finally:
        deployment.stop()


def _lines(n: int, start: int = 1) -> str:
    return "".join(f"{i}\n" for i in range(start, start + n))


def test_send_finds_the_configurations_agent_on_its_ephemeral_port(ours: Deployment, theirs: Deployment) -> None:
    before, theirs_before = ours.puts(), theirs.puts()
    result = ours.run("send", "--channel", "events", stdin=_lines(7))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (f"sending to agent 'local' (pid {ours.pid}) at {ours.grpc} "
                                             "(port from var/agent/ports.json)")
    assert "sent 7 events in 1 batch: 7 accepted" in result.stdout
    assert ours.puts() == before + 7 and theirs.puts() == theirs_before


@pytest.mark.parametrize("how", ["--ports-file", "--agent"])
def test_send_refuses_an_agent_that_is_not_the_configurations(ours: Deployment, theirs: Deployment,
                                                              how: str) -> None:
    theirs_before = theirs.puts()
    where = str(theirs.ports_file) if how == "--ports-file" else theirs.grpc
    result = ours.run("send", "--conf", "conf/agent.toml", how, where, "--channel", "events", stdin=_lines(3))
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    ours_id = (ours.root / "var/channels/events/checkpoint/channel.id").read_text().strip()
    theirs_id = (theirs.root / "var/channels/events/checkpoint/channel.id").read_text().strip()
    assert error.startswith("Error: WrongAgentError: ") and "is not the agent of conf/agent.toml" in error
    assert ours_id in error and theirs_id in error and f"leave out {how}" in error
    assert theirs.puts() == theirs_before  # nothing reached the other deployment


def test_an_option_alone_names_the_agent_and_the_command_says_so(ours: Deployment, theirs: Deployment) -> None:
    """``--ports-file`` without ``--conf``: the user named that agent; it is used and named."""
    theirs_before = theirs.puts()
    result = ours.run("send", "--ports-file", str(theirs.ports_file), "--channel", "events", stdin=_lines(2))
    assert result.returncode == 0, result.stderr
    assert f"sending to agent 'local' (pid {theirs.pid}) at {theirs.grpc} (ports from --ports-file" in result.stderr
    assert theirs.puts() == theirs_before + 2


def test_a_configuration_whose_agent_is_not_running_is_an_error_not_the_default_address(tmp_path: Path) -> None:
    stopped = Deployment(tmp_path / "stopped")
    for command in (["send", "--channel", "events"], ["status", "--once"]):
        result = stopped.run(*command, stdin=_lines(1))
        assert result.returncode == 1, result.stdout
        assert result.stderr.count("\n") == 1, result.stderr  # one line
        assert "the agent of conf/agent.toml is not running" in result.stderr
        assert "ingest-toolkit agent --conf conf/agent.toml" in result.stderr and "7431" not in result.stderr


def test_land_takes_through_the_configurations_agent_and_refuses_another(ours: Deployment,
                                                                        theirs: Deployment) -> None:
    """Delta tables are written without Spark: the landing runs in seconds. One line per batch."""
    assert theirs.run("send", "--channel", "events", stdin=_lines(50)).returncode == 0
    theirs_backlog = theirs.backlog()
    refused = ours.run("land", "--channel", "events", "--format", "delta", "--ports-file", str(theirs.ports_file))
    assert refused.returncode == 1
    assert "WrongAgentError" in refused.stderr and "nothing was taken" in refused.stderr
    assert theirs.backlog() == theirs_backlog

    assert ours.run("send", "--channel", "events", stdin=_lines(2500)).returncode == 0
    backlog = ours.backlog()
    landed = ours.run("land", "--channel", "events", "--format", "delta", "--max-events", "1000", "--drain")
    assert landed.returncode == 0, landed.stderr
    assert landed.stderr.splitlines()[0] == (f"channel 'events' is owned by agent 'local' (pid {ours.pid}): landing "
                                             f"through its gRPC endpoint {ours.grpc} (port from var/agent/ports.json)")
    lines = landed.stdout.splitlines()  # one per batch, printed as each completes
    assert all(line.startswith("landed ") for line in lines) and len(lines) >= -(-backlog // 1000)
    assert sum(_landed(line) for line in lines) == backlog and ours.backlog() == 0


def test_status_shows_the_configurations_agent_and_refuses_another(ours: Deployment, theirs: Deployment) -> None:
    assert ours.run("send", "--channel", "events", stdin=_lines(1000)).returncode == 0
    backlog = ours.backlog()
    screen = ours.run("status", "--once", "--interval", "0.5")
    assert screen.returncode == 0, screen.stderr
    assert screen.stdout.startswith(f"agent 'local' (pid {ours.pid}) at 127.0.0.1:{ours.ports['admin']} (port from "
                                    "var/agent/ports.json)")
    row = next(line for line in screen.stdout.splitlines() if "events" in line and "spool" not in line)
    assert f"{backlog:,}" in row

    document = json.loads(ours.run("status", "--json", "--interval", "0.5").stdout)
    channel = document["channels"][0]
    assert document["agent"]["pid"] == ours.pid and channel["channel"] == "events" and channel["backlog"] == backlog
    assert channel["oldest_event_age_seconds"] is not None and channel["free_bytes"] > 0 and channel["log_bytes"] > 0
    assert channel["put_per_second"] is not None and channel["open_takes"] == 0
    assert [s["source"] for s in document["sources"]] == ["spool"] and document["sources"][0]["state"] == "running"

    refused = ours.run("status", "--conf", "conf/agent.toml", "--ports-file", str(theirs.ports_file), "--once")
    assert refused.returncode == 1 and "WrongAgentError" in refused.stderr


def test_channel_inspect_of_a_live_channel_says_how_old_its_figures_are(ours: Deployment) -> None:
    result = ours.run("channel", "inspect", "--channel", "events")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"live channel: agent 'local' (pid {ours.pid}) owns it; the figures below are checkpoint #")
    assert re.search(r"written \d+ s ago \(every 30 s\), not the current state", first)
    assert first.endswith("Live figures: ingest-toolkit status --conf conf/agent.toml")
    live = json.loads(ours.run("channel", "inspect", "--channel", "events", "--json").stdout)["live"]
    assert live["pid"] == ours.pid and live["agent"] == "local" and live["checkpoint_interval_seconds"] == 30


def _landed(line: str) -> int:
    match = re.match(r"landed ([\d,]+) events", line)
    assert match is not None, line
    return int(match[1].replace(",", ""))
