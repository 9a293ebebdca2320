"""The orchestration functions load without any orchestrator, and without pyspark until used."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import ingest_toolkit.orchestrate as orchestrate

REPO = Path(__file__).resolve().parents[2]

_CHILD = """
import importlib, importlib.abc, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("dagster", "airflow"):
            raise ImportError(f"{name} imported by the orchestration package")
        return None

sys.meta_path.insert(0, Refuse())
for module in sys.argv[1:]:
    importlib.import_module(module)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("dagster", "airflow", "pyspark", "dagster_defs"))
print("loaded:", loaded)
"""


def test_no_orchestrator_and_no_pyspark_is_imported() -> None:
    modules = ["ingest_toolkit.orchestrate", *(f"ingest_toolkit.orchestrate.{m.name}"
                                                for m in pkgutil.iter_modules(orchestrate.__path__))]
    assert len(modules) >= 9, modules
    done = subprocess.run([sys.executable, "-c", _CHILD, *modules], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded: []", done.stdout


def test_the_blocker_refuses_dagster() -> None:
    """The child's blocker works: an adapter module that needs Dagster fails to import under it."""
    done = subprocess.run([sys.executable, "-c", _CHILD, "ingest_toolkit.dagster.metadata"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "dagster imported by the orchestration package" in done.stderr
