"""``ingest-toolkit init``: the starting point it writes, generated from the shipped conf/."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from ingest_toolkit.cli import main
from ingest_toolkit.collect.config import load_agent_config
from ingest_toolkit.land.config import load_landing_config
from ingest_toolkit.scaffold import PROJECT_FILES, SCAFFOLD_FILES
from ingest_toolkit.scaffold.source import install_command

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "ingest_toolkit" / "scaffold" / "conf"


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _init(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["init", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("name", sorted(set(SCAFFOLD_FILES.values())))
def test_the_packaged_templates_are_the_shipped_conf_files(name: str) -> None:
    assert (TEMPLATES / name).read_bytes() == (REPO / "conf" / name).read_bytes(), (
        f"conf/{name} changed: copy it to ingest_toolkit/scaffold/conf/{name} (what `init` writes)")


def test_init_writes_the_shipped_settings_and_the_directories_they_name(tmp_path: Path) -> None:
    code, output = _init(str(tmp_path / "new"))
    assert code == 0, output
    root = tmp_path / "new"
    for target, source in SCAFFOLD_FILES.items():
        written, shipped = (root / target).read_text(), (REPO / "conf" / source).read_text()
        if target.endswith(".toml"):
            assert tomllib.loads(written) == tomllib.loads(shipped), target  # same keys, same values
        else:
            assert yaml.safe_load(written) == yaml.safe_load(shipped), target
        assert written.startswith("# Written by `ingest-toolkit init`")
        assert "repository root" not in written
    instance = yaml.safe_load((root / "var/dagster/dagster.yaml").read_text())
    assert instance["concurrency"]["pools"]["default_limit"] == 1
    for directory in ("var/agent", "var/channels/events/checkpoint", "var/channels/events/data", "var/spool",
                      "var/landing", "var/curated", "var/dagster"):
        assert (root / directory).is_dir(), directory
    for target, text in PROJECT_FILES.items():  # the empty Dagster project `dg scaffold defs` adds to
        assert (root / target).read_text() == text, target
    assert tomllib.loads((root / "dg.toml").read_text())["project"]["root_module"] == "orchestration"
    assert f"cd {root}" in output and "ingest-toolkit agent --conf conf/agent.toml" in output
    assert install_command("spark") in output and "pip install 'ingest-toolkit[spark]'" not in output


def test_the_generated_settings_load_from_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("INGEST_")]:
        monkeypatch.delenv(key)
    assert _init()[0] == 0
    agent = load_agent_config(Path("conf/agent.toml"))
    assert list(agent.channels) == ["events"]
    assert load_landing_config(Path("conf/landing.toml")).root == (tmp_path / "var" / "landing").as_uri()
    result = CliRunner().invoke(main, ["agent", "--conf", "conf/agent.toml", "--check"],  # ports probed: any free
                                env={"INGEST_AGENT__GRPC__PORT": "0", "INGEST_AGENT__ADMIN__PORT": "0"})
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("existing", ["conf/landing.toml", "var/dagster/dagster.yaml", "dg.toml",
                                      "orchestration/definitions.py"])
def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path: Path, existing: str) -> None:
    (tmp_path / existing).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / existing).write_text("mine\n")
    before = _tree(tmp_path)
    code, output = _init(str(tmp_path))
    assert code == 1
    assert output == (f"Error: {tmp_path / existing} exists: init overwrites nothing, so it wrote nothing; give it "
                      "an empty directory (ingest-toolkit init DIR) or move that file away\n")
    assert _tree(tmp_path) == before


def test_init_refuses_a_file_where_a_directory_goes(tmp_path: Path) -> None:
    (tmp_path / "var").write_text("a file\n")
    code, output = _init(str(tmp_path))
    assert code == 1 and f"{tmp_path / 'var'} exists and is not a directory" in output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["var"]


def test_init_twice_refuses_the_second_time(tmp_path: Path) -> None:
    assert _init(str(tmp_path))[0] == 0
    before = _tree(tmp_path)
    code, output = _init(str(tmp_path))
    assert code == 1 and "conf/agent.toml exists" in output
    assert _tree(tmp_path) == before
