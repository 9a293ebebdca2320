"""The core install: every core command runs with Spark, Arrow and Dagster uninstallable.

Each command runs in a child Python whose import system refuses the extras' packages
(``blocked_cli.py``) and logs every attempt; the core commands must not even try them, and a
command that needs one stops with one line naming the extra.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .session import clean_env, first_session, run

REPO = Path(__file__).resolve().parents[2]

BLOCKED_CLI = [sys.executable, str(Path(__file__).with_name("blocked_cli.py"))]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**clean_env(), "INGEST_TEST_BLOCKED_LOG": str(tmp_path / "blocked.log")}


def _attempts(env: dict[str, str]) -> list[str]:
    log = Path(env["INGEST_TEST_BLOCKED_LOG"])
    return log.read_text().split() if log.exists() else []


def test_help_lists_every_command_without_importing_an_extra(tmp_path: Path, env: dict[str, str]) -> None:
    done = run(BLOCKED_CLI, ["--help"], tmp_path, env)
    for command in ("init", "agent", "send", "channel", "land", "hdfs", "demo"):
        assert f"  {command} " in done.stdout, done.stdout
    assert _attempts(env) == []


def test_init_agent_send_and_inspect_never_import_an_extra(tmp_path: Path, env: dict[str, str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    document = first_session(BLOCKED_CLI, work, env, events=300)
    assert document["checkpoint"]["puts_committed"] == 300
    assert document["checkpoint"]["queue_size"] == 300
    assert _attempts(env) == []


def test_land_without_spark_stops_with_one_line_naming_the_extra(tmp_path: Path, env: dict[str, str]) -> None:
    run(BLOCKED_CLI, ["init"], tmp_path, env)
    done = run(BLOCKED_CLI, ["land", "--channel", "events"], tmp_path, env, check=False)
    assert done.returncode == 1
    assert done.stderr == "Error: land needs Spark: pip install 'ingest-toolkit[spark]'\n"
    assert "pyspark" in _attempts(env) or "pyarrow" in _attempts(env) or "numpy" in _attempts(env)
    assert not (tmp_path / "var" / "landing" / "events").exists()


def test_hdfs_fetch_without_spark_stops_with_one_line_naming_the_extra(tmp_path: Path,
                                                                        env: dict[str, str]) -> None:
    done = run(BLOCKED_CLI, ["hdfs", "fetch"], tmp_path, env, check=False)
    assert done.returncode == 1
    assert done.stderr == "Error: hdfs needs Spark: pip install 'ingest-toolkit[spark]'\n"


def test_a_missing_core_module_is_not_blamed_on_an_extra() -> None:
    from ingest_toolkit.extras import extra_for

    assert extra_for(ModuleNotFoundError("No module named 'grpc'", name="grpc"), "send") is None
    missing = extra_for(ModuleNotFoundError("No module named 'pyarrow.fs'", name="pyarrow.fs"), "land")
    assert missing is not None and str(missing) == "land needs Spark: pip install 'ingest-toolkit[spark]'"


def test_the_demo_without_the_dagster_extra_stops_with_one_line_and_touches_nothing(tmp_path: Path) -> None:
    blocker = Path(__file__).resolve().parent
    code = (f"import runpy, sys; sys.path.insert(0, {str(blocker)!r}); import blocked_cli as b; "
            "b.BLOCKED = b.BLOCKED - {'dagster_defs'}; sys.meta_path.insert(0, b.RefuseExtras()); "
            "runpy.run_module('dagster_defs.demo', run_name='__main__')")
    (tmp_path / "var" / "demo").mkdir(parents=True)
    (tmp_path / "var" / "demo" / "keep").write_text("a previous demo's file")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip().splitlines() == [
        "error: python -m dagster_defs.demo needs Dagster: pip install 'ingest-toolkit[dagster]' "
        "(from a checkout: pip install -e '.[dagster]')"]
    assert (tmp_path / "var" / "demo" / "keep").exists()
