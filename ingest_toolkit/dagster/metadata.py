"""Plain results of :mod:`ingest_toolkit.orchestrate` as Dagster sees them: metadata values, check results."""

from __future__ import annotations

from typing import Any

import dagster as dg

from ingest_toolkit.orchestrate.verdict import PathValue, Severity, TextValue, UrlValue, Verdict

__all__ = ["asset_check_result", "dagster_metadata"]

_SEVERITY = {Severity.ERROR: dg.AssetCheckSeverity.ERROR, Severity.WARN: dg.AssetCheckSeverity.WARN}


def _value(value: Any) -> Any:
    """Text, path and URL hints as Dagster's metadata values; anything else as it is (Dagster
    shows numbers, strings, lists and dicts by their type)."""
    if isinstance(value, TextValue):
        return dg.MetadataValue.text(str(value))
    if isinstance(value, PathValue):
        return dg.MetadataValue.path(str(value))
    if isinstance(value, UrlValue):
        return dg.MetadataValue.url(str(value))
    return value


def dagster_metadata(values: dict[str, Any]) -> dict[str, Any]:
    return {key: _value(value) for key, value in values.items()}


def asset_check_result(verdict: Verdict) -> dg.AssetCheckResult:
    """The check result the UI shows for ``verdict``: its severity, description and metadata."""
    return dg.AssetCheckResult(passed=verdict.passed, severity=_SEVERITY[verdict.severity],
                               description=verdict.description, metadata=dagster_metadata(verdict.metadata))
