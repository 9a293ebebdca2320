"""How long the long loops run: ``INGEST_SOAK`` scales every slow loop's trial count.

The suite's counts (``INGEST_SOAK=1``, what CI runs) keep the whole suite inside its time
budget; a soak run multiplies them, e.g. before a release::

    INGEST_SOAK=10 python -m pytest -m slow tests/channel -q

(``INGEST_SOAK=2`` gives the counts the suite ran before the HDFS tests joined it.) Crash loops
print their seed; ``CRASH_SEED`` repeats one."""

from __future__ import annotations

import os

SOAK = float(os.environ.get("INGEST_SOAK", "1"))


def soak(count: int) -> int:
    """``count`` trials scaled by ``INGEST_SOAK`` (at least one)."""
    return max(1, round(count * SOAK))
