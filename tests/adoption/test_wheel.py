"""The package as users get it: the sdist and wheel built, their metadata checked, the wheel
installed (not editable) into fresh virtualenvs, and used from a directory outside the checkout:

* with only the core: ``init``, agent, ``send``, SIGTERM, ``channel inspect``;
* with the ``[dagster]`` extra (which brings ``[spark]``): the same session, then ``dg scaffold
  defs ingest_toolkit.dagster.IngestChannelComponent events``, ``dg check defs`` and ``dg launch``
  of the landing asset (and its checks), which must land every event sent.

The build is shared by both. With a warm pip cache the core test takes about a minute and the
Dagster one two (docs/install.md has the measured numbers).
"""

from __future__ import annotations

import email
import json
import subprocess
import sys
import tarfile
import time
import venv
import zipfile
from email.message import Message
from importlib.metadata import version
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from .session import clean_env, first_session, run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXTRAS = {"spark", "connect", "dagster", "airflow", "all", "dev"}
NOT_CORE = ("pyspark", "pyarrow", "numpy", "pandas", "dagster", "pendulum", "tomlkit", "apache-airflow")


def _build(out: Path) -> tuple[Path, Path]:
    """``python -m build``: the sdist, then the wheel built from it (so the sdist must be complete)."""
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], check=True,
                   capture_output=True, text=True, timeout=300)
    (sdist,), (wheel,) = out.glob("*.tar.gz"), out.glob("*.whl")
    return sdist, wheel


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


def _check_metadata(sdist: Path, wheel: Path) -> None:
    meta = _metadata(wheel)
    assert (meta["Name"], meta["Version"]) == ("ingest-toolkit", version("ingest-toolkit"))
    requires = meta.get_all("Requires-Dist") or []
    core = [r for r in requires if "extra ==" not in r]
    assert core and not [r for r in core if r.lower().startswith(NOT_CORE)], core
    assert EXTRAS <= set(meta.get_all("Provides-Extra") or []), meta.get_all("Provides-Extra")
    spark = [r for r in requires if 'extra == "spark"' in r]
    assert any(r.startswith("pyspark") for r in spark) and any(r.startswith("pyarrow") for r in spark), spark
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"ingest_toolkit"}, top  # no generic top-level package (the repository's dagster_defs)
    assert "ingest_toolkit/dagster/component.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as archive:
        assert "[dagster_dg_cli.registry_modules]\ningest_toolkit = ingest_toolkit.dagster" in (
            archive.read(entry_points).decode())
    for template in ("agent.toml", "landing.toml", "dagster.toml", "dagster.yaml"):
        assert f"ingest_toolkit/scaffold/conf/{template}" in names
    for doc in ("runbook.md", "install.md", "agent.md", "img/check-failing.png"):  # what `docs` and the checks name
        assert f"ingest_toolkit/docs/{doc}" in names, doc
    with tarfile.open(sdist) as archive:
        assert any(n.endswith("ingest_toolkit/scaffold/conf/agent.toml") for n in archive.getnames())
        assert any(n.endswith("/docs/runbook.md") for n in archive.getnames())  # the wheel is built from it


def _venv(where: Path, requirement: str) -> Path:
    venv.create(where, with_pip=True)
    subprocess.run([where / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    requirement], check=True, capture_output=True, text=True, timeout=600)
    return where / "bin"


def _user_env(bin_dir: Path) -> dict[str, str]:
    """A user's shell with the virtualenv activated: no INGEST_* settings, no PYTHONPATH."""
    env = clean_env()
    env.pop("PYTHONPATH", None)
    env.pop("DAGSTER_HOME", None)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel, built once for the module."""
    started = time.monotonic()
    sdist, wheel = _build(tmp_path_factory.mktemp("dist"))
    print(f"build: {time.monotonic() - started:.1f} s")
    return sdist, wheel


def test_the_wheel_with_only_the_core_runs_a_first_session_outside_the_checkout(
        tmp_path: Path, built: tuple[Path, Path]) -> None:
    started = time.monotonic()
    sdist, wheel = built
    _check_metadata(sdist, wheel)
    bin_dir = _venv(tmp_path / "venv", str(wheel))
    env = _user_env(bin_dir)
    work = tmp_path / "user"
    work.mkdir()
    where = subprocess.run([bin_dir / "python", "-c", "import ingest_toolkit; print(ingest_toolkit.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    assert str(tmp_path / "venv") in where and str(REPO) not in where  # the installed copy, not the checkout
    docs = run([str(bin_dir / "ingest-toolkit")], ["docs", "runbook"], work, env).stdout.strip()
    assert docs.startswith(str(tmp_path / "venv")) and Path(docs).is_file(), docs  # shipped in the wheel
    for extra_only in ("pyspark", "pyarrow", "dagster", "airflow"):
        assert subprocess.run([bin_dir / "python", "-c", f"import {extra_only}"], cwd=work, env=env,
                              capture_output=True).returncode != 0, f"{extra_only} came with the core install"
    provider = subprocess.run([bin_dir / "python", "-c", "import ingest_toolkit.airflow"], cwd=work, env=env,
                              capture_output=True, text=True)
    assert provider.returncode == 1 and provider.stderr.splitlines()[-1] == (
        "ingest_toolkit.extras.MissingExtraError: ingest_toolkit.airflow needs Airflow: "
        "pip install 'ingest-toolkit[airflow]'"), provider.stderr

    document = first_session([str(bin_dir / "ingest-toolkit")], work, env, events=1000)
    assert document["checkpoint"]["puts_committed"] == 1000 and document["checkpoint"]["queue_size"] == 1000
    assert document["data_dirs"] == [str(work.resolve() / "var" / "channels" / "events" / "data")]

    land = run([str(bin_dir / "ingest-toolkit")], ["land", "--channel", "events"], work, env, check=False)
    assert (land.returncode, land.stderr) == (1, "Error: land needs Spark: pip install 'ingest-toolkit[spark]'\n")
    print(f"metadata, core install and first session: {time.monotonic() - started:.1f} s")


def test_the_wheel_with_the_dagster_extra_lands_through_a_scaffolded_component(
        tmp_path: Path, built: tuple[Path, Path]) -> None:
    """``init``, agent, ``send``; then the Dagster path a user takes: scaffold the channel's
    component instance, check the definitions, launch the landing asset; every event lands once."""
    started = time.monotonic()
    _sdist, wheel = built
    bin_dir = _venv(tmp_path / "venv", f"{wheel}[dagster]")
    installed = time.monotonic()
    env = _user_env(bin_dir)
    work = tmp_path / "user"
    work.mkdir()
    cli = [str(bin_dir / "ingest-toolkit")]
    document = first_session(cli, work, env, events=1000)
    assert document["checkpoint"]["queue_size"] == 1000

    dg_cli = [str(bin_dir / "dg")]
    listed = run(dg_cli, ["list", "components", "--json"], work, env)
    assert "ingest_toolkit.dagster.IngestChannelComponent" in {c["key"] for c in json.loads(listed.stdout)["items"]}
    run(dg_cli, ["scaffold", "defs", "ingest_toolkit.dagster.IngestChannelComponent", "events"], work, env)
    defs_yaml = (work / "orchestration" / "defs" / "events" / "defs.yaml").read_text()
    assert "channel: events" in defs_yaml and "agent_conf: conf/agent.toml" in defs_yaml
    checked = run(dg_cli, ["check", "defs"], work, env)
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr

    # One process (one Spark session) for the landing and its two checks.
    in_process = json.dumps({"execution": {"config": {"in_process": {}}}})
    launched = run(dg_cli, ["launch", "--assets", "events_landed", "--config-json", in_process], work,
                   {**env, "DAGSTER_HOME": str(work / "var" / "dagster")}, timeout=600)
    log = launched.stdout + launched.stderr
    assert "RUN_SUCCESS" in log, log[-3000:]
    assert "Asset check 'landed_reconciles' on 'events_landed' passed" in log, log[-3000:]
    table = pq.read_table(work / "var" / "landing" / "events")
    assert table.num_rows == 1000 and len(set(table.column("event_id").to_pylist())) == 1000
    inspected = json.loads(run(cli, ["channel", "inspect", "--channel", "events", "--json"], work, env).stdout)
    assert inspected["checkpoint"]["queue_size"] == 0
    print(f"[dagster] install: {installed - started:.1f} s; session, scaffold, check and landing: "
          f"{time.monotonic() - installed:.1f} s")
