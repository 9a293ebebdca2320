"""Building sources from settings: SOURCE_TYPES, build_source, validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from ingest_toolkit.collect.sources import (
    SOURCE_TYPES,
    AnySourceSettings,
    ExecSource,
    HttpSource,
    SpoolDirSource,
    TailSource,
    build_source,
)
from ingest_toolkit.collect.sources.base import make_batch_id
from ingest_toolkit.errors import ConfigError

from .conftest import ChannelFactory, simple_pipeline


def test_every_type_builds_from_a_config_table(tmp_path: Path, make_channel: ChannelFactory) -> None:
    (tmp_path / "spool").mkdir()
    tables = {
        "spool": {"type": "spool_dir", "dir": str(tmp_path / "spool"), "channels": ["ch"],
                  "interceptors": [{"type": "timestamp"}], "selector": {"optional": []}},
        "tail": {"type": "tail", "paths": [str(tmp_path / "*.log")], "channels": ["ch"]},
        "web": {"type": "http", "channels": ["ch"], "port": 0},
        "cmd": {"type": "exec", "channels": ["ch"], "command": ["true"], "restart": False},
    }
    pipeline = simple_pipeline(make_channel())
    adapter: TypeAdapter[object] = TypeAdapter(AnySourceSettings)
    built = {name: build_source(name, adapter.validate_python(t), pipeline, tmp_path / "state" / name)  # type: ignore[arg-type]
             for name, t in tables.items()}
    assert [type(s) for s in built.values()] == [SpoolDirSource, TailSource, HttpSource, ExecSource]
    assert set(SOURCE_TYPES) == {"spool_dir", "tail", "http", "exec"}
    for source in built.values():
        source.start()
    for source in built.values():
        source.stop(2)
        assert isinstance(source.stats()["errors"], int)


def test_settings_are_validated(tmp_path: Path) -> None:
    adapter: TypeAdapter[object] = TypeAdapter(AnySourceSettings)
    for bad in ({"type": "spool_dir", "dir": "x", "channels": []},
                {"type": "spool_dir", "dir": "x", "channels": ["c"], "decode_errors": "ignore"},
                {"type": "spool_dir", "dir": "x", "channels": ["c"], "unknown": 1},
                {"type": "tail", "paths": [], "channels": ["c"]},
                {"type": "http", "channels": ["c"], "port": 70000},
                {"type": "ftp", "channels": ["c"]}):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)


def test_missing_spool_dir_is_a_config_error(tmp_path: Path, make_channel: ChannelFactory) -> None:
    settings = TypeAdapter(AnySourceSettings).validate_python(
        {"type": "spool_dir", "dir": str(tmp_path / "missing"), "channels": ["ch"]})
    source = build_source("s", settings, simple_pipeline(make_channel()), tmp_path / "state")
    with pytest.raises(ConfigError) as err:
        source.start()
    assert err.value.key == "sources.s.dir"


def test_long_batch_ids_are_hashed_to_fit_a_commit_tag() -> None:
    short = make_batch_id("src", "1.2.3", "0-10")
    assert short == "src:1.2.3:0-10"
    long = make_batch_id("s" * 200, "1.2.3", "0-10")
    assert len(long.encode()) <= 128 and long == make_batch_id("s" * 200, "1.2.3", "0-10")
