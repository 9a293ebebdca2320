"""The package as users get it: the sdist and wheel built, their metadata checked, the wheel
installed (not editable) with only the core into a fresh virtualenv, and a first session run from
a directory outside the checkout (``init``, agent, ``send``, SIGTERM, ``channel inspect``).

About a minute with a warm pip cache: the build's isolated environments and the core install
come from the cache (docs/install.md has the measured numbers).
"""

from __future__ import annotations

import email
import subprocess
import sys
import tarfile
import time
import venv
import zipfile
from email.message import Message
from importlib.metadata import version
from pathlib import Path

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
    assert "ingest_toolkit" in top and top <= {"ingest_toolkit", "dagster_defs"}, top
    for template in ("agent.toml", "landing.toml", "dagster.toml", "dagster.yaml"):
        assert f"ingest_toolkit/scaffold/conf/{template}" in names
    with tarfile.open(sdist) as archive:
        assert any(n.endswith("ingest_toolkit/scaffold/conf/agent.toml") for n in archive.getnames())


def _core_venv(where: Path, wheel: Path) -> Path:
    venv.create(where, with_pip=True)
    subprocess.run([where / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    str(wheel)], check=True, capture_output=True, text=True, timeout=300)
    return where / "bin"


def test_the_wheel_with_only_the_core_runs_a_first_session_outside_the_checkout(tmp_path: Path) -> None:
    started = time.monotonic()
    sdist, wheel = _build(tmp_path / "dist")
    _check_metadata(sdist, wheel)
    bin_dir = _core_venv(tmp_path / "venv", wheel)
    env = clean_env()
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    work = tmp_path / "user"
    work.mkdir()
    where = subprocess.run([bin_dir / "python", "-c", "import ingest_toolkit; print(ingest_toolkit.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    assert str(tmp_path / "venv") in where and str(REPO) not in where  # the installed copy, not the checkout
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
    print(f"build, metadata, core install and first session: {time.monotonic() - started:.1f} s")
