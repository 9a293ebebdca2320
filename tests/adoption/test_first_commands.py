"""The first commands a user types (issue 31, item 6), run as subprocesses the way they type them:
``--help`` in the order of the work with whole descriptions, ``-V``, ``init`` (with a
``.gitignore`` and a ``pyproject.toml``), ``demo`` in the directory ``init`` made, and counts
printed one way (``300,000``; ``1 file``, ``2 files``)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from ingest_toolkit.numbers import count, number
from ingest_toolkit.scaffold.source import install_command

CLI = [str(Path(sys.executable).parent / "ingest-toolkit")]  # the script pip installed, as a user runs it
WORKFLOW = ["init", "agent", "send", "status", "land", "channel", "demo", "docs", "hdfs"]


def _run(*args: str, cwd: Path | None = None, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": str(columns), "HOME": str(cwd or Path.cwd())}
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def _commands(help_text: str) -> list[tuple[str, str]]:
    section = help_text.split("Commands:\n", 1)[1]
    return [(m[1], m[2]) for m in re.finditer(r"^  (\S+) +(.+)$", section, re.MULTILINE)]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_the_commands_in_the_order_of_the_work_each_on_one_whole_line(flag: str) -> None:
    shown = _run(flag)
    assert shown.returncode == 0, shown.stderr
    commands = _commands(shown.stdout)
    assert [name for name, _ in commands] == WORKFLOW
    assert not [line for _, line in commands if line.endswith("...")], commands
    assert all(len(line) <= 80 for line in shown.stdout.splitlines())


def test_channel_help_lists_its_tools_in_order_with_whole_lines() -> None:
    commands = _commands(_run("channel", "--help").stdout)
    assert [name for name, _ in commands] == ["inspect", "verify", "repair", "incidents", "acknowledge"]
    assert not [line for _, line in commands if line.endswith("...")], commands


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_the_version(flag: str) -> None:
    shown = _run(flag)
    assert (shown.returncode, shown.stdout.strip()) == (0, f"ingest-toolkit, version {version('ingest-toolkit')}")


def test_counts_have_separators_and_agree_with_their_nouns() -> None:
    assert number(300000) == "300,000"
    assert [count(n, "file") for n in (0, 1, 2, 1000)] == ["0 files", "1 file", "2 files", "1,000 files"]
    assert (count(1, "batch"), count(3, "batch"), count(2, "entry"), count(2, "duplicate batch")) == (
        "1 batch", "3 batches", "2 entries", "2 duplicate batches")


def test_init_makes_a_repository_of_its_own(tmp_path: Path) -> None:
    shown = _run("init", "here", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    root = tmp_path / "here"
    ignored = (root / ".gitignore").read_text().splitlines()
    assert {"/var/", ".venv/", "__pycache__/"} <= set(ignored)
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert project["project"]["dependencies"] == [f"ingest-toolkit[dagster]=={version('ingest-toolkit')}"]
    assert install_command("dagster") in (root / "pyproject.toml").read_text()
    assert install_command("spark") in shown.stdout  # from the wheel or checkout it came from, not an index
    assert "ingest-toolkit docs" in shown.stdout


def test_demo_runs_in_the_directory_init_made(tmp_path: Path) -> None:
    assert _run("init", cwd=tmp_path).returncode == 0
    shown = _run("demo", "--events", "3000", "--batch", "1000", cwd=tmp_path, columns=200)
    assert shown.returncode == 0, shown.stderr
    assert "3,000 events of 256 B, batches of 1,000" in shown.stdout
    assert "1 segment, 0 frames replayed" in shown.stdout and "0 left" in shown.stdout
    assert "temporary channel" in shown.stdout
    assert not (tmp_path / "var" / "channel").exists()  # its own channel, gone; the agent's untouched
    assert not list((tmp_path / "var" / "channels" / "events" / "data").iterdir())


def test_docs_prints_where_the_documentation_is(tmp_path: Path) -> None:
    listing = _run("docs", cwd=tmp_path, columns=200)
    assert listing.returncode == 0, listing.stderr
    place = Path(listing.stdout.splitlines()[0].removeprefix("documentation: "))
    assert (place / "runbook.md").is_file() and (place / "install.md").is_file()
    assert "runbook.md       Runbook: the asset checks" in listing.stdout
    assert f"checks link to sections of {(place / 'runbook.md').as_uri()}" in listing.stdout
    assert _run("docs", "install", cwd=tmp_path).stdout.strip() == str(place / "install.md")
    missing = _run("docs", "nothing", cwd=tmp_path)
    assert missing.returncode == 1 and "no document nothing.md" in missing.stderr
