"""Errors of the landing (``LandingError`` derives from ``IngestError``)."""

from __future__ import annotations

from ..errors import IngestError, TransientError

__all__ = ["CommitConflict", "LandingError", "MaintenanceConflict", "PreflightError", "SparkStartError"]


class LandingError(IngestError):
    """A landing run failed; ``phase`` says where, ``rolled_back`` whether the take went back.

    When ``rolled_back`` is true the taken events are back at the head of the channel in order,
    and whatever the run wrote is either invisible (staging, cleaned up by a later run) or
    recorded by a manifest, so the next run recognises it: retrying is always safe.
    """

    def __init__(self, message: str, *, channel: str, phase: str, rolled_back: bool) -> None:
        super().__init__(message)
        self.channel, self.phase, self.rolled_back = channel, phase, rolled_back


class CommitConflict(LandingError):
    """Another landing committed some of this batch's events first: a concurrent landing, or a
    remote take whose lease ran out while Spark wrote and whose events were taken again.

    Nothing of this batch was published; its take is rolled back (if it is still held) and the
    next run recognises the events that are landed and writes only the rest.
    """


class PreflightError(IngestError):
    """A check before the first take failed (:mod:`ingest_toolkit.land.preflight`: the landing
    root, Java and Spark, the agent, the channel); ``failed`` names the checks. Nothing was taken."""

    def __init__(self, message: str, *, channel: str, failed: list[str]) -> None:
        super().__init__(message)
        self.channel, self.failed = channel, failed


class SparkStartError(IngestError):
    """The Spark session could not start: no Java runtime, one too old, a JVM that exited at once.
    Nothing was taken from any channel; the message says what to install or set."""


class MaintenanceConflict(TransientError):
    """A compaction or snapshot expiry of a Delta or Iceberg table lost the race to other commits
    (landings) on every attempt. Nothing of it was committed, the table is as the landings left
    it; run it again, or in the landing's concurrency pool so the two take turns."""
