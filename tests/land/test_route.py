"""Where a landing takes from (``ingest_toolkit.land.route``): in-process when no process owns the
channel, else the owning agent's endpoint, only when its ports file holds up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.channel.lock import lock_holder
from ingest_toolkit.errors import ConfigError
from ingest_toolkit.land.config import LandingConfig
from ingest_toolkit.land.route import ports_file_address, resolve_route

REPO = Path(__file__).resolve().parents[2]
_HOLD = ("import sys, time\nfrom ingest_toolkit.channel.lock import DirectoryLock\n"
         "lock = DirectoryLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(120)\n")


def _agent_toml(root: Path, *, host: str = "127.0.0.1", security: str = "") -> Path:
    conf = root / "agent.toml"
    conf.write_text(f'[agent]\nname = "edge"\nstate_dir = "{root / "state"}"\n'
                    f'[agent.grpc]\nhost = "{host}"\nport = 0\n[agent.security]\n{security}\n'
                    f'[channels.events]\ncheckpoint_dir = "{root / "cp"}"\ndata_dirs = ["{root / "data"}"]\n'
                    "min_free_bytes = 0\n")
    return conf


@pytest.fixture
def channel_root(tmp_path: Path) -> Path:
    FileChannel(checkpoint_dir=str(tmp_path / "cp"), data_dirs=[str(tmp_path / "data")], min_free_bytes=0).close()
    return tmp_path


@pytest.fixture
def owner(channel_root: Path) -> Iterator[int]:
    """Another live process holding the channel's checkpoint directory, as an agent does."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(channel_root / "cp")], stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def _ports(root: Path, pid: int, grpc: int = 40123, mode: int = 0o644) -> Path:
    path = root / "state" / "ports.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "agent": "edge", "grpc": grpc, "admin": None, "sources": {}}))
    path.chmod(mode)
    return path


def _config(root: Path, agent_conf: Path | None, **values: object) -> LandingConfig:
    return LandingConfig.build(root=str(root / "landing"), agent_conf=str(agent_conf) if agent_conf else None,
                               **values)


def test_a_channel_no_process_owns_is_landed_in_process(channel_root: Path) -> None:
    route = resolve_route(_config(channel_root, _agent_toml(channel_root)), "events")
    assert not route.remote and route.notice is None
    assert route.settings is not None and route.settings["checkpoint_dir"] == str(channel_root / "cp")
    assert route.description.startswith("in-process") and "[channels.events]" in route.description


def test_an_owned_channel_is_landed_through_its_agent_with_a_notice(channel_root: Path, owner: int) -> None:
    assert lock_holder(str(channel_root / "cp")) == owner
    conf = _agent_toml(channel_root, host="0.0.0.0")
    ports = _ports(channel_root, owner, grpc=40123)
    route = resolve_route(_config(channel_root, conf), "events")
    assert route.remote and route.config.agent == "127.0.0.1:40123"  # a wildcard bind is reached on loopback
    assert route.notice is not None
    assert f"pid {owner}" in route.notice and "127.0.0.1:40123" in route.notice and str(ports) in route.notice
    assert "'edge'" in route.notice


@pytest.mark.parametrize("case", ["other pid", "writable by others", "missing", "no grpc"])
def test_an_untrustworthy_ports_file_is_refused_naming_the_fix(channel_root: Path, owner: int, case: str) -> None:
    conf = _agent_toml(channel_root)
    if case == "other pid":
        _ports(channel_root, owner + 100_000)
    elif case == "writable by others":
        _ports(channel_root, owner, mode=0o666)
    elif case == "no grpc":
        _ports(channel_root, owner).write_text(json.dumps({"pid": owner, "grpc": None}))
    with pytest.raises(ConfigError) as err:
        resolve_route(_config(channel_root, conf), "events")
    message = str(err.value)
    assert f"owned by process {owner}" in message and "--agent" in message and "--ports-file" in message
    assert {"other pid": f"names pid {owner + 100_000}", "writable by others": "writable by other users",
            "missing": "does not exist", "no grpc": "no gRPC port"}[case] in message


def test_an_owner_that_the_agent_configuration_does_not_describe_is_refused(channel_root: Path, owner: int,
                                                                           tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    elsewhere = _agent_toml(other)  # its [channels.events] lives in other directories
    settings = channel_root / "channel.toml"
    settings.write_text(f'[channel]\ncheckpoint_dir = "{channel_root / "cp"}"\n'
                        f'data_dirs = ["{channel_root / "data"}"]\nmin_free_bytes = 0\n')
    with pytest.raises(ConfigError, match="does not describe"):
        resolve_route(_config(channel_root, elsewhere, channel_conf=str(settings)), "events")
    with pytest.raises(ConfigError, match="no agent configuration names it"):
        resolve_route(_config(channel_root, None, channel_conf=str(settings)), "events")


def test_the_agents_tls_and_token_settings_apply_to_a_discovered_endpoint(channel_root: Path, owner: int) -> None:
    security = ('token_env = "EDGE_TOKEN"\n'
                f'tls = {{ cert_file = "{channel_root / "agent.pem"}", key_file = "{channel_root / "agent.key"}" }}')
    conf = _agent_toml(channel_root, host="agent.example", security=security)
    _ports(channel_root, owner, grpc=7431)
    route = resolve_route(_config(channel_root, conf), "events")
    assert route.config.agent == "agent.example:7431"  # the host of the configuration, never of the file
    assert route.config.agent_token_env == "EDGE_TOKEN"
    assert route.config.agent_tls_ca == str(channel_root / "agent.pem")
    assert route.notice is not None and "over TLS" in route.notice
    mine = resolve_route(_config(channel_root, conf, agent_token_env="MY_TOKEN", agent_tls_ca="ca.pem"), "events")
    assert mine.config.agent_token_env == "MY_TOKEN" and mine.config.agent_tls_ca == "ca.pem"


def test_a_configured_agent_wins_and_ports_files_give_loopback_addresses(channel_root: Path) -> None:
    route = resolve_route(_config(channel_root, _agent_toml(channel_root), agent="10.0.0.5:7431"), "events")
    assert route.remote and route.config.agent == "10.0.0.5:7431" and route.notice is None
    assert ports_file_address(_ports(channel_root, 1, grpc=5555)) == "127.0.0.1:5555"
    with pytest.raises(ConfigError, match="--ports-file"):
        ports_file_address(channel_root / "nope.json")
