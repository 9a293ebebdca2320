"""Loading conf/agent.toml: every problem named by its key path, nothing started on a bad file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ingest_toolkit.cli import main
from ingest_toolkit.collect.config import load_agent_config
from ingest_toolkit.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]

BASE = """
[agent]
state_dir = "state"
[channels.events]
checkpoint_dir = "ch/events/cp"
data_dirs = ["ch/events/data"]
[sources.spool]
type = "spool_dir"
dir = "spool"
channels = ["events"]
"""


def _load(tmp_path: Path, text: str, **env: str) -> object:
    conf = tmp_path / "agent.toml"
    conf.write_text(text)
    return load_agent_config(conf, environ=env)


def _error(tmp_path: Path, text: str, **env: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text, **env)
    return info.value

WITH_BACKUP = 'checkpoint_dir = "ch/events/cp"\nbackup_checkpoint_dir = "bk"'


def test_the_shipped_local_configuration_is_valid() -> None:
    config = load_agent_config(REPO / "conf" / "agent.toml", environ={})
    assert list(config.channels) == ["events"] and list(config.sources) == ["spool"]
    assert config.agent.grpc.host == config.agent.admin.host == "127.0.0.1"
    assert config.channels["events"].checkpoint_dir.endswith("var/channels/events/checkpoint")


def test_relative_paths_are_resolved_against_the_working_directory(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = BASE.replace('checkpoint_dir = "ch/events/cp"', WITH_BACKUP)
    config = load_agent_config(_write(tmp_path, text), environ={})
    assert config.channels["events"].data_dirs == [str(tmp_path / "ch/events/data")]
    assert config.channels["events"].backup_checkpoint_dir == str(tmp_path / "bk")
    assert config.agent.state_dir == tmp_path / "state"
    assert config.agent.ports_path == tmp_path / "state" / "ports.json"
    assert config.sources["spool"].dir == tmp_path / "spool"  # type: ignore[attr-defined]
    assert config.source_state_dir("spool") == tmp_path / "state" / "sources" / "spool"


def test_environment_overrides_nested_keys(tmp_path: Path) -> None:
    config = load_agent_config(_write(tmp_path, BASE), environ={
        "INGEST_AGENT__GRPC__PORT": "0", "INGEST_CHANNELS__EVENTS__CAPACITY": "500",
        "INGEST_CHANNELS__EVENTS__TRANSACTION_CAPACITY": "100",
        "INGEST_CHANNELS__EVENTS__DATA_DIRS": "/d1,/d2", "INGEST_CHANNEL__CAPACITY": "7"})
    assert config.agent.grpc.port == 0
    assert config.channels["events"].capacity == 500 and config.channels["events"].data_dirs == ["/d1", "/d2"]


@pytest.mark.parametrize(("edit", "key", "message"), [
    (lambda t: t.replace('dir = "spool"\n', ""), "sources.spool.dir", "field required"),
    (lambda t: t + "[channels.events2]\ncheckpoint_dir = 'a'\ndata_dirs = ['b']\ncapacity = 0\n",
     "channels.events2.capacity", "must be > 0"),
    (lambda t: t.replace('type = "spool_dir"', 'type = "spool_dir"\nbatchsize = 5'), "sources.spool.batchsize",
     "unknown key"),
    (lambda t: t.replace('channels = ["events"]', 'channels = ["evnets"]'), "sources.spool.channels",
     "unknown channel 'evnets'"),
    (lambda t: t + "[channels.other]\ncheckpoint_dir = 'x'\ndata_dirs = ['ch/events/data']\n",
     "channels.other.data_dirs", "also used by channels.events"),
    (lambda t: t.replace('checkpoint_dir = "ch/events/cp"', WITH_BACKUP)
     + "[channels.other]\ncheckpoint_dir = 'x'\ndata_dirs = ['y']\nbackup_checkpoint_dir = 'bk'\n",
     "channels.other.backup_checkpoint_dir", "also used by channels.events"),
    (lambda t: t.replace('type = "spool_dir"', 'type = "ftp"'), "sources.spool.type", "unknown source type 'ftp'"),
    (lambda t: t.replace("[agent]", "[agent]\nlog_format = 'xml'"), "agent.log_format", "input should be"),
    (lambda t: t.replace("[agent]", "[agent.grpc]\nport = 70000\n[agent]"), "agent.grpc.port", "65535"),
    (lambda t: t + "[pipes.x]\n", "pipes", "unknown table"),
    (lambda t: t.replace('channels = ["events"]', 'channels = ["events"]\ninterceptors = [{type = "host", x = 1}]'),
     "sources.spool.interceptors.0.x", "unknown key"),
    (lambda t: t.replace('channels = ["events"]',
                         'channels = ["events"]\nselector = {type = "replicating", optional = ["zzz"]}'),
     "sources.spool.selector.optional", "zzz"),

    (lambda t: t + '[sources.again]\ntype = "spool_dir"\ndir = "./spool/"\nchannels = ["events"]\n',
     "sources.again.dir", "is also the dir of sources.spool: every file would be ingested by both"),
    (lambda t: t.replace('state_dir = "state"', 'state_dir = "ch/events/cp"'), "agent.state_dir",
     "ch/events/cp is channels.events.checkpoint_dir"),
    (lambda t: t.replace('state_dir = "state"', 'state_dir = "ch/events/data/agent"'), "agent.state_dir",
     "is inside channels.events.data_dirs"),
    (lambda t: t.replace('state_dir = "state"', 'state_dir = "ch"'), "agent.state_dir",
     "contains channels.events.checkpoint_dir"),
])
def test_each_problem_names_its_key_path(tmp_path: Path, edit: object, key: str, message: str) -> None:
    err = _error(tmp_path, edit(BASE))  # type: ignore[operator]
    assert err.key == key, str(err)
    assert f"{key}: " in str(err) and message in str(err), str(err)


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    err = _error(tmp_path, BASE.replace('dir = "spool"\n', "").replace("[agent]", "[agent]\nnmae = 'x'"))
    assert "sources.spool.dir: field required" in str(err) and "agent.nmae: unknown key" in str(err)


def test_missing_file_and_bad_toml_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_agent_config(tmp_path / "nope.toml")
    assert "not valid TOML" in str(_error(tmp_path, "[agent\n"))
    assert "at least one [channels.<name>] table" in str(_error(tmp_path, "[agent]\nname = 'x'\n"))


def test_cli_rejects_a_bad_configuration_with_exit_1_and_starts_nothing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    conf = _write(tmp_path, BASE.replace("[channels.events]", "[channels.events]\ncapacity = -1"))
    result = CliRunner().invoke(main, ["agent", "--conf", str(conf)])
    assert result.exit_code == 1
    assert "channels.events.capacity: must be > 0" in result.output
    assert not (tmp_path / "ch").exists() and not (tmp_path / "state").exists()


def test_a_state_dir_inside_a_channel_is_refused_before_anything_starts(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    conf = _write(tmp_path, BASE.replace('state_dir = "state"', 'state_dir = "ch/events/cp/agent"'))
    result = CliRunner().invoke(main, ["agent", "--conf", str(conf)])
    assert result.exit_code == 1
    assert "agent.state_dir: " in result.output and "is inside channels.events.checkpoint_dir" in result.output
    assert "ChannelLockedError" not in result.output and not (tmp_path / "ch").exists()


def test_cli_check_validates_without_starting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # the default ports may be taken on a shared machine (--check probes them): ephemeral ones here
    result = CliRunner().invoke(main, ["agent", "--conf", str(_write(tmp_path, BASE)), "--check"],
                                env={"INGEST_AGENT__GRPC__PORT": "0", "INGEST_AGENT__ADMIN__PORT": "0"})
    assert result.exit_code == 0 and "configuration OK" in result.output
    assert not (tmp_path / "ch").exists()


def _write(tmp_path: Path, text: str) -> Path:
    conf = tmp_path / "agent.toml"
    conf.write_text(text)
    return conf
