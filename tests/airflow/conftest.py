"""Airflow for the tests, isolated: a temporary ``AIRFLOW_HOME`` (its SQLite metadata database,
logs and dags folder) made for this pytest session before Airflow is imported, removed after it.
Nothing is written into the checkout or the home directory.

Airflow reads its settings when it is first imported, so they are set when pytest collects this
directory, before any test module here imports Airflow.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

assert "airflow" not in sys.modules, "Airflow was imported before tests/airflow isolated its home"

HOME = Path(tempfile.mkdtemp(prefix="ingest-airflow-home-"))
atexit.register(shutil.rmtree, HOME, ignore_errors=True)  # also when no test here runs (-m slow, -k)
DAGS = HOME / "dags"
DAGS.mkdir()
os.environ.update({
    "AIRFLOW_HOME": str(HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME / 'airflow.db'}",
    "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(HOME / "logs"),
})

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples" / "airflow"


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The metadata database, migrated once per session (``airflow db migrate``, a few seconds),
    with the example DAGs in the dags folder (``dag.test()`` runs only DAGs Airflow parsed there)."""
    for example in EXAMPLES.glob("*.py"):
        shutil.copy(example, DAGS / example.name)
    done = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True,
                          timeout=600, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]
    return HOME
