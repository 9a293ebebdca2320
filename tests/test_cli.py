"""The CLI demo and settings loading, run for real on temporary directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.config import load_channel_settings
from ingest_toolkit.cli import main
from ingest_toolkit.errors import ConfigError


def _conf(tmp_path: Path) -> Path:
    conf = tmp_path / "channel.toml"
    conf.write_text(
        "[channel]\n"
        f'checkpoint_dir = "{tmp_path / "cp"}"\n'
        f'data_dirs = ["{tmp_path / "d1"}", "{tmp_path / "d2"}"]\n'
        "min_free_bytes = 0\nmax_file_size = 1048576\nmax_event_size = 65536\n")
    return conf


def test_demo_puts_replays_and_takes_everything(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--conf", str(_conf(tmp_path)), "--events", "5000",
                                       "--batch", "250"])
    assert result.exit_code == 0, result.output
    assert "5,000" in result.output and "0 left" in result.output
    # Drained segments were deleted after the closing checkpoint; only the last sealed one stays.
    assert (tmp_path / "cp" / "checkpoint.meta").exists()
    assert len(list((tmp_path / "d1").glob("log-*.meta")) + list((tmp_path / "d2").glob("log-*.meta"))) == 1


def test_demo_refuses_to_delete_a_channel_a_live_process_owns(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    with FileChannel(**load_channel_settings(conf)) as owner:  # this process owns it, as an agent would
        with owner.transaction() as tx:
            tx.put_many([Event(b"keep me") for _ in range(10)])
        result = CliRunner().invoke(main, ["demo", "--conf", str(conf), "--events", "100"])
        assert result.exit_code == 1
        assert "in use by process" in result.output and str(tmp_path / "cp") in result.output
        assert len(owner) == 10 and (tmp_path / "cp" / "in_use.lock").exists()
    with FileChannel(**load_channel_settings(conf)) as reopened:
        assert len(reopened) == 10


def test_environment_overrides_file_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_CHANNEL__CAPACITY", "1234")
    monkeypatch.setenv("INGEST_CHANNEL__DATA_DIRS", "a,b")
    settings = load_channel_settings(_conf(tmp_path))
    assert settings["capacity"] == "1234" and settings["data_dirs"] == ["a", "b"]


def test_missing_or_broken_config_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_channel_settings(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[channel\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_channel_settings(bad)
    bad.write_text("[other]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"no \[channel\] table"):
        load_channel_settings(bad)


def test_demo_reports_invalid_settings(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    conf.write_text(conf.read_text() + "capacity = 0\n")
    result = CliRunner().invoke(main, ["demo", "--conf", str(conf), "--events", "10"])
    assert result.exit_code == 1
    assert "ConfigError" in result.output and "capacity" in result.output


# -- operator tools find a channel by name in the agent configuration ------------------------------
def _agent_conf(root: Path, *channels: str) -> Path:
    conf = root / "conf" / "agent.toml"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("[agent]\n" + "".join(
        f'[channels.{c}]\ncheckpoint_dir = "{root / c / "cp"}"\ndata_dirs = ["{root / c / "d"}"]\n'
        "min_free_bytes = 0\nmax_file_size = 1048576\nmax_event_size = 65536\n" for c in channels))
    return conf


def _fill(root: Path, name: str, events: int) -> None:
    with FileChannel(checkpoint_dir=str(root / name / "cp"), data_dirs=[str(root / name / "d")], min_free_bytes=0,
                     max_file_size=1 << 20, max_event_size=65536) as channel, channel.transaction() as tx:
        tx.put_many([Event(b"x") for _ in range(events)])


def test_channel_tools_find_a_channel_by_name_in_the_agent_configuration(tmp_path: Path) -> None:
    conf = _agent_conf(tmp_path, "events", "audit")
    _fill(tmp_path, "events", 7)
    _fill(tmp_path, "audit", 3)
    result = CliRunner().invoke(main, ["channel", "inspect", "--conf", str(conf), "--channel", "audit", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["checkpoint_dir"] == str(tmp_path / "audit" / "cp") and report["checkpoint"]["queue_size"] == 3
    result = CliRunner().invoke(main, ["channel", "verify", "--conf", str(conf), "--channel", "events", "--json"])
    assert result.exit_code == 0, result.output
    verified = json.loads(result.output)
    assert verified["ok"] and verified["queue_size"] == 7
    assert verified["checkpoint_dir"] == str(tmp_path / "events" / "cp")
    result = CliRunner().invoke(main, ["channel", "repair", "--conf", str(conf), "--channel", "events", "--dry-run",
                                       "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["scanned_segments"] == 1, result.output


def test_channel_tools_default_to_the_agent_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _agent_conf(tmp_path, "events")
    _fill(tmp_path, "events", 5)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INGEST_CHANNELS__EVENTS__CAPACITY", "5000")  # overrides apply as they do for the agent
    result = CliRunner().invoke(main, ["channel", "inspect", "--channel", "events", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["checkpoint"]["queue_size"] == 5
    result = CliRunner().invoke(main, ["channel", "verify", "--json"])  # its only channel
    assert result.exit_code == 0, result.output


def test_channel_tool_errors_name_what_the_user_passed(tmp_path: Path) -> None:
    conf = _agent_conf(tmp_path, "events", "audit")
    result = CliRunner().invoke(main, ["channel", "inspect", "--conf", str(conf), "--channel", "events"])
    assert result.exit_code == 1
    line = result.output.strip()
    assert len(line.splitlines()) == 1, line
    assert str(conf) in line and "[channels.events]" in line and "does not exist" in line
    assert "--checkpoint-dir" not in line
    result = CliRunner().invoke(main, ["channel", "inspect", "--conf", str(conf), "--channel", "nope"])
    assert result.exit_code != 0 and "nope" in result.output and "audit" in result.output and "events" in result.output
    result = CliRunner().invoke(main, ["channel", "inspect", "--conf", str(conf)])  # two channels: which one?
    assert result.exit_code != 0 and "--channel" in result.output
    missing = tmp_path / "missing.toml"
    result = CliRunner().invoke(main, ["channel", "inspect", "--conf", str(missing), "--channel", "events"])
    assert result.exit_code != 0 and str(missing) in result.output and "--checkpoint-dir" not in result.output


def test_channel_tools_still_take_directories_or_a_channel_settings_file(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    FileChannel(**load_channel_settings(conf)).close()
    result = CliRunner().invoke(main, ["channel", "inspect", "--conf", str(conf), "--json"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["channel", "verify", "--checkpoint-dir", str(tmp_path / "cp"), "--data-dir",
                                       str(tmp_path / "d1"), "--data-dir", str(tmp_path / "d2"), "--json"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["channel", "inspect", "--checkpoint-dir", str(tmp_path / "nowhere"),
                                       "--data-dir", str(tmp_path / "d1")])
    assert result.exit_code == 1 and "--checkpoint-dir" in result.output


def test_invalid_environment_override_names_the_variable_not_the_file(tmp_path: Path) -> None:
    """INGEST_AGENT__GRPC__PORT=abc used to be reported as a problem of conf/agent.toml."""
    conf = tmp_path / "agent.toml"
    conf.write_text(f'[agent]\nstate_dir = "{tmp_path / "state"}"\n[channels.events]\n'
                    f'checkpoint_dir = "{tmp_path / "cp"}"\ndata_dirs = ["{tmp_path / "data"}"]\n')
    result = CliRunner().invoke(main, ["agent", "--conf", str(conf), "--check"],
                                env={"INGEST_AGENT__GRPC__PORT": "abc"})
    assert result.exit_code == 1
    line = result.output.strip()
    assert "\n" not in line and "INGEST_AGENT__GRPC__PORT" in line and "'abc'" in line, line
    assert "agent.grpc.port" in line and str(conf) not in line, line
    landing = tmp_path / "landing.toml"
    landing.write_text(f'[landing]\nroot = "{tmp_path / "land"}"\n')
    result = CliRunner().invoke(main, ["land", "--conf", str(landing), "--channel", "events"],
                                env={"INGEST_LANDING__MAX_EVENTS": "many"})
    assert result.exit_code == 1 and "INGEST_LANDING__MAX_EVENTS" in result.output, result.output


def test_landing_and_channel_settings_errors_use_the_toolkit_wording_and_name_the_file(tmp_path: Path) -> None:
    """"unknown key" and the file, as the agent's configuration says it, not pydantic's "Extra
    inputs are not permitted" without a file."""
    landing = tmp_path / "landing.toml"
    landing.write_text(f'[landing]\nroot = "{tmp_path / "land"}"\nmax_event = 10\n')
    result = CliRunner().invoke(main, ["land", "--conf", str(landing), "--channel", "events"])
    assert result.exit_code == 1
    assert f"in {landing}: landing.max_event: unknown key" in result.output, result.output
    channel = _conf(tmp_path)
    channel.write_text(channel.read_text() + "capacity_limit = 5\n")
    for args in (["demo", "--conf", str(channel)], ["channel", "inspect", "--conf", str(channel)]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1
        assert f"in {channel}: channel.capacity_limit: unknown key" in result.output, (args, result.output)


def test_demo_table_piped_keeps_names_whole_and_names_the_reopen_for_what_it_was(tmp_path: Path) -> None:
    """Without a terminal the table was cut at 80 columns ("take (in order," / "verified)" on two
    lines), and a reopen that read the checkpoint and replayed no frame was called "full replay"."""
    result = CliRunner().invoke(main, ["demo", "--conf", str(_conf(tmp_path)), "--events", "3000"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == [
        "put (fsync per commit)", "reopen (checkpoint #1, nothing to replay)", "take (in order, verified)"], rows
    assert "full replay" not in result.output and "0 frames replayed" in rows[1]


def test_land_is_listed_and_its_help_is_its_own_when_spark_is_installed() -> None:
    listing = CliRunner().invoke(main, ["--help"])
    assert "land     Land committed events into a table ([spark] extra)." in listing.output
    result = CliRunner().invoke(main, ["land", "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: main land [OPTIONS]" in result.output and "--drain" in result.output
