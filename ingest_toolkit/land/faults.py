"""Test hook: SIGKILL the landing process at a named phase (crash tests only).

Set ``INGEST_LAND_FAULT=<phase>`` in the environment of a landing process and it kills itself
with SIGKILL when it reaches that phase, the way a machine loss or an OOM kill would stop it.
Unset (always, in production) the hook costs one dictionary lookup per phase.

Phases, in the order a run passes them: ``after_take``, ``during_write`` (plain Parquet: once
Spark's job has created its ``_temporary`` directory; Delta and Iceberg: once a data file of the
batch exists, before its commit; at the latest when the write returns),
``after_write``, ``after_manifest``, ``during_moves`` (after the first file was moved),
``after_table_commit`` (Delta and Iceberg: right after the table commit), ``before_commit`` (the
table committed, the take not yet), ``after_commit``. One more, not in :data:`PHASES` (it has a
test of its own): ``during_commit_write`` (plain Parquet), when the storage has written a commit
file (a manifest, or an index entry) under its temporary name and not yet published it; the
crash leaves that file behind.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["COMMIT_WRITE", "FAULT_ENV", "PARQUET_PHASES", "PHASES", "TABLE_PHASES", "fault_during", "fault_point"]

FAULT_ENV = "INGEST_LAND_FAULT"
PHASES = ("after_take", "during_write", "after_write", "after_manifest", "during_moves", "after_table_commit",
          "before_commit", "after_commit")
PARQUET_PHASES = ("after_take", "during_write", "after_write", "after_manifest", "during_moves", "before_commit",
                  "after_commit")
TABLE_PHASES = ("after_take", "during_write", "after_table_commit", "before_commit", "after_commit")  # Delta, Iceberg
COMMIT_WRITE = "during_commit_write"


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def fault_point(phase: str) -> None:
    """Die here when the hook names ``phase``."""
    if os.environ.get(FAULT_ENV) == phase:
        _die()


@contextmanager
def fault_during(phase: str, started: Callable[[], bool], poll: float = 0.005) -> Iterator[None]:
    """Die while the block runs, as soon as ``started()`` is true (checked from a thread)."""
    if os.environ.get(FAULT_ENV) != phase:
        yield
        return

    def watch() -> None:
        while True:
            try:
                if started():
                    _die()
            except Exception:  # the probe may race with the write; keep polling
                pass
            threading.Event().wait(poll)

    threading.Thread(target=watch, name="land-fault", daemon=True).start()
    yield
    _die()
