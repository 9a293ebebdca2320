"""``ingest-toolkit`` with the extras' packages made uninstallable: the core install, simulated.

Run as ``python blocked_cli.py ARGS...``. A meta path finder refuses every module of an extra
(Spark, Arrow, numpy, pandas, Dagster, Airflow) as if it were not installed, and appends each refused name
to the file named by ``INGEST_TEST_BLOCKED_LOG`` (when set), so a test sees even an attempt that
the code caught and survived.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

BLOCKED = frozenset({"pyspark", "py4j", "pyarrow", "numpy", "pandas", "dagster", "dagster_webserver",
                     "dagster_dg_cli", "dagster_shared", "dagster_pipes", "dagster_defs", "pendulum", "tomlkit",
                     "airflow"})


class RefuseExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname.partition(".")[0] not in BLOCKED:
            return None
        if log := os.environ.get("INGEST_TEST_BLOCKED_LOG"):
            with open(log, "a", encoding="utf-8") as out:
                out.write(f"{fullname}\n")
        raise ModuleNotFoundError(f"No module named {fullname!r} (refused: not part of the core install)",
                                  name=fullname)


if __name__ == "__main__":
    sys.meta_path.insert(0, RefuseExtras())
    already = BLOCKED.intersection(name.partition(".")[0] for name in sys.modules)
    assert not already, f"imported before the blocker was installed: {already}"
    from ingest_toolkit.cli import main

    main(sys.argv[1:], prog_name="ingest-toolkit")
