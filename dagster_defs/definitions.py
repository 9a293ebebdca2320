"""The one Definitions object of the project (``dg dev`` / ``dagster dev`` load ``defs``).

A pure merge: every asset, check, job, sensor and schedule comes from the per-channel factory
(:mod:`dagster_defs.factory`), configured from ``conf/``; the resources too.
"""

from __future__ import annotations

from .factory import definitions_from_conf

__all__ = ["defs"]

defs = definitions_from_conf()
