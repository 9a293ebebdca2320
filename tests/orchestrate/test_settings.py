"""Where the orchestration settings come from: the neutral ``[orchestrate]`` table, ``[dagster]``
on top, each with its environment overrides; and the hourly windows of an orchestrator's interval."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingest_toolkit.errors import ConfigError
from ingest_toolkit.orchestrate.curation import hourly_windows
from ingest_toolkit.orchestrate.settings import channel_spec, load_orchestration_settings

from .helpers import make_setup


def test_the_neutral_table_alone(tmp_path: Path) -> None:
    (tmp_path / "orchestrate.toml").write_text("[orchestrate]\nsensor_min_backlog = 500\ntimezone = 'Europe/Paris'\n")
    settings = load_orchestration_settings(directory=tmp_path)
    assert (settings.sensor_min_backlog, settings.timezone) == (500, "Europe/Paris")
    assert settings.agent_conf == str(tmp_path / "agent.toml")  # defaults from the directory


def test_dagster_wins_over_the_neutral_table_and_each_has_its_variables(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "orchestrate.toml").write_text("[orchestrate]\nsensor_min_backlog = 500\nbatches_per_run = 4\n")
    (tmp_path / "dagster.toml").write_text("[dagster]\nsensor_min_backlog = 700\n")
    settings = load_orchestration_settings(directory=tmp_path)
    assert (settings.sensor_min_backlog, settings.batches_per_run) == (700, 4)
    monkeypatch.setenv("INGEST_ORCHESTRATE__BATCHES_PER_RUN", "6")
    monkeypatch.setenv("INGEST_DAGSTER__SENSOR_MIN_BACKLOG", "900")
    settings = load_orchestration_settings(directory=tmp_path)
    assert (settings.sensor_min_backlog, settings.batches_per_run) == (900, 6)


def test_no_file_is_the_defaults_and_the_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_ORCHESTRATE__SENSOR_MAX_BACKLOG_AGE_SECONDS", "42")
    settings = load_orchestration_settings(directory=tmp_path)
    assert settings.sensor_max_backlog_age_seconds == 42.0 and settings.sensor_min_backlog == 10_000


def test_a_bad_value_names_its_table_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "orchestrate.toml").write_text("[orchestrate]\nsensor_min_backlog = 0\n")
    with pytest.raises(ConfigError) as raised:
        load_orchestration_settings(directory=tmp_path)
    assert str(raised.value).startswith(f"invalid orchestration settings in {tmp_path / 'orchestrate.toml'}: "
                                        "orchestrate.sensor_min_backlog: must be > 0")
    monkeypatch.setenv("INGEST_DAGSTER__SENSOR_MIN_BACKLOG", "-1")
    with pytest.raises(ConfigError, match="dagster.sensor_min_backlog: .*INGEST_DAGSTER__SENSOR_MIN_BACKLOG"):
        load_orchestration_settings(directory=tmp_path)


def test_an_unknown_channel_names_the_file_and_its_channels(tmp_path: Path) -> None:
    setup = make_setup(tmp_path)
    assert channel_spec(setup.conf / "agent.toml", "events").name == "events"
    with pytest.raises(ConfigError, match=r"agent.toml has no \[channels.clicks\] table; its channels: events"):
        channel_spec(setup.conf / "agent.toml", "clicks")


def _at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, 20, hour, minute, tzinfo=UTC)


def test_hourly_windows_of_an_interval() -> None:
    assert hourly_windows(_at(8), _at(9)) == [(_at(8), _at(9))]
    assert hourly_windows(_at(8), _at(11)) == [(_at(8), _at(9)), (_at(9), _at(10)), (_at(10), _at(11))]
    assert hourly_windows(_at(8, 30), _at(9, 30)) == [(_at(8, 30), _at(9, 30))]  # a half-hour zone's hour
    for start, end in ((_at(8), _at(8)), (_at(8), _at(8, 30)), (_at(9), _at(8))):
        with pytest.raises(ConfigError, match="is not a whole number of hours"):
            hourly_windows(start, end)
