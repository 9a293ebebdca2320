"""How a client command finds its agent (``ingest_toolkit.collect.locate``), without starting one:
the agent's state directory is held by a plain child process, as a running agent holds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.channel.tools.common import read_channel_id
from ingest_toolkit.collect.errors import WrongAgentError
from ingest_toolkit.collect.locate import check_identity, find_agent, read_ports_file
from ingest_toolkit.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
_HOLD = ("import sys, time\nfrom ingest_toolkit.channel.lock import DirectoryLock\n"
         "lock = DirectoryLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(120)\n")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current directory of the command: a deployment root with conf/agent.toml."""
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("INGEST_")]:
        monkeypatch.delenv(name)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "agent.toml").write_text(
        '[agent]\nname = "edge"\nstate_dir = "var/agent"\n[agent.grpc]\nport = 0\n[agent.admin]\nhost = "0.0.0.0"\n'
        'port = 0\n[agent.security]\ntoken_env = "EDGE_TOKEN"\n'
        '[channels.events]\ncheckpoint_dir = "var/cp"\ndata_dirs = ["var/data"]\nmin_free_bytes = 0\n')
    FileChannel(checkpoint_dir="var/cp", data_dirs=["var/data"], min_free_bytes=0).close()  # writes channel.id
    return tmp_path


@pytest.fixture
def agent_pid(here: Path) -> Iterator[int]:
    """A live process holding var/agent, as the running agent of conf/agent.toml does."""
    (here / "var" / "agent").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(here / "var" / "agent")], stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def _ports(here: Path, pid: int, mode: int = 0o644) -> Path:
    path = here / "var" / "agent" / "ports.json"
    path.write_text(json.dumps({"pid": pid, "agent": "edge", "grpc": 40111, "admin": 40112, "sources": {}}))
    path.chmod(mode)
    return path


def test_the_configurations_agent_is_found_through_its_ports_file(here: Path, agent_pid: int) -> None:
    _ports(here, agent_pid)
    target = find_agent()
    assert (target.grpc, target.admin, target.name, target.pid) == ("127.0.0.1:40111", "127.0.0.1:40112", "edge",
                                                                    agent_pid)
    assert target.describe() == f"agent 'edge' (pid {agent_pid}) at 127.0.0.1:40111 (port from var/agent/ports.json)"
    assert target.config is not None and target.token_env == "EDGE_TOKEN" and target.flag is None


def test_a_configuration_whose_agent_is_not_running_is_an_error(here: Path) -> None:
    with pytest.raises(ConfigError, match=r"the agent of conf/agent.toml is not running \(no process holds its "
                                          r"state directory var/agent\): start it"):
        find_agent()


@pytest.mark.parametrize("case", ["other pid", "writable by others"])
def test_an_untrustworthy_ports_file_is_refused(here: Path, agent_pid: int, case: str) -> None:
    if case == "other pid":
        _ports(here, agent_pid + 100_000)
    else:
        _ports(here, agent_pid, mode=0o666)
    with pytest.raises(ConfigError) as err:
        find_agent()
    assert f"runs as process {agent_pid}" in str(err.value) and "--agent host:port" in str(err.value)


def test_without_a_configuration_the_default_address_is_used_and_said(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    target = find_agent()
    assert target.grpc == "127.0.0.1:7431" and target.config is None
    assert "the default address: there is no conf/agent.toml here" in target.describe()


def test_an_option_names_the_agent_and_checks_only_with_conf(here: Path) -> None:
    named = find_agent(grpc="10.0.0.5:7431")
    assert named.grpc == "10.0.0.5:7431" and named.config is None and named.flag == "--agent"
    checked = find_agent(Path("conf/agent.toml"), grpc="10.0.0.5:7431")
    assert checked.config is not None and checked.token_env == "EDGE_TOKEN"
    from_env = find_agent(grpc="10.0.0.5:7431", grpc_flag="INGEST_AGENT_ADDRESS")
    assert from_env.describe() == "the agent at 10.0.0.5:7431 (given by INGEST_AGENT_ADDRESS)"


def test_the_identity_check_compares_channel_ids(here: Path) -> None:
    target = find_agent(Path("conf/agent.toml"), grpc="10.0.0.5:7431")
    ours = read_channel_id("var/cp")[0]
    assert ours is not None
    check_identity(target, lambda name: ours.replace("-", ""))  # the hex form of the same id
    other = "6f1e2d3c-0000-4000-8000-000000000000"
    with pytest.raises(WrongAgentError) as err:
        check_identity(target, lambda name: other)
    message = str(err.value)
    assert f"serves channel 'events' as {other}, but [channels.events] there is channel {ours}" in message
    assert "(var/cp/channel.id)" in message and "leave out --agent" in message
    assert err.value.channel == "events" and err.value.expected == ours and err.value.served == other
    with pytest.raises(WrongAgentError, match="serves no channel 'events'"):
        check_identity(target, lambda name: None)
    check_identity(target, lambda name: None, names=["other"])  # not a channel of the configuration


def test_a_ports_file_given_by_option_must_be_readable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--ports-file .*: cannot read the agent's ports"):
        read_ports_file(tmp_path / "nope.json")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ConfigError, match="is not an agent's ports file"):
        read_ports_file(tmp_path / "list.json")
