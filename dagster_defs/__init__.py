"""Dagster orchestration of ingest-toolkit: landing, curated tables, sensors and on-call checks.

``dagster_defs.definitions.defs`` is the code location; ``python -m dagster_defs.demo`` runs the
whole pipeline once from a fresh clone. Importing this package loads nothing else.
"""
