"""Operator tools of the file channel: ``inspect`` (live, no lock), ``verify`` and ``repair``
(offline). The CLI commands ``ingest-toolkit channel inspect|verify|repair`` call these functions;
each returns a report with ``to_json()`` for machines and is rendered by :mod:`.render` for people.
"""

from __future__ import annotations

from .common import ChannelInUseError, ToolError
from .inspection import InspectReport, LogFileInfo, inspect_channel
from .repair import RepairReport, repair_channel
from .verify import Finding, VerifyReport, verify_channel

__all__ = ["ChannelInUseError", "Finding", "InspectReport", "LogFileInfo", "RepairReport", "ToolError",
           "VerifyReport", "inspect_channel", "repair_channel", "verify_channel"]
