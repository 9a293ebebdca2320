"""The code location of this repository (``dg dev`` / ``dagster dev`` load ``defs``): a components project.

Every channel is one instance of :class:`ingest_toolkit.dagster.IngestChannelComponent`, a
``defs.yaml`` under ``dagster_defs/defs/<channel>/`` (written by ``dg scaffold defs
ingest_toolkit.dagster.IngestChannelComponent <channel>``); this module only loads that folder,
so the demo and the UI run what a user of the package runs. ``defs`` is lazy: nothing is read
from ``conf/`` at import, and a configuration problem is an error of the code location's load.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

__all__ = ["defs"]


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
