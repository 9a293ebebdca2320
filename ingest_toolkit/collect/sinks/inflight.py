"""The in-flight records of a sink group: one file per batch taken and not yet committed.

A record (:class:`InFlight`) is written (atomically, fsync'ed) before the first put of its batch
and removed after the local commit of the take; :mod:`.forward` says why the batch ids rest on it.
With several batches in flight (``pipeline``) each has its own file, ``inflight-<take>.json``,
where ``take`` numbers the group's takes in order: after a restart the records are retaken in
that order, which is the order of their events at the head of the channel (the recovery puts
uncommitted takes back where they were). ``inflight.json``, the single record of earlier
versions, is read as the oldest.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ...channel import EventColumns
from ...channel.fs import OsFileSystem, write_atomic
from ...errors import ConfigError

__all__ = ["InFlight", "Records"]

LEGACY = "inflight.json"


@dataclass
class InFlight:
    """A batch being forwarded (see :mod:`.forward`); ``in_doubt``: the sink it is pinned to;
    ``maybe_stored``: a put of it to that sink may have been stored there (a put that failed in
    doubt, or one in flight when the edge stopped): only that sink's answer unpins it then, or
    ``release_in_doubt_after``. ``take``: the order of the group's takes."""

    batch_id: str
    first_seq: int
    last_seq: int
    count: int
    in_doubt: str | None = None
    maybe_stored: bool = False
    take: int = -1

    def matches(self, columns: EventColumns) -> bool:
        return (len(columns) == self.count and len(columns) > 0 and columns.seqs[0] == self.first_seq
                and columns.seqs[-1] == self.last_seq)


class Records:
    """The record files of one sink group under ``directory``."""

    def __init__(self, directory: Path, group: str) -> None:
        self.directory, self.group = directory, group
        self._fs = OsFileSystem()
        self._paths: dict[int, Path] = {}  # take -> its file

    def load(self) -> list[InFlight]:
        """The records left by an earlier run, oldest take first. A put to the sink a record names
        may have been in flight when the edge stopped: such a record is ``maybe_stored``."""
        found = []
        paths = sorted(self.directory.glob("inflight*.json")) if self.directory.is_dir() else []
        for path in paths:
            record = self._read(path)
            if path.name == LEGACY:
                record.take = -1  # written before pipelining: the only one then
            if record.in_doubt is not None:
                record.maybe_stored = True
            self._paths[record.take] = path
            found.append(record)
        return sorted(found, key=lambda r: r.take)

    def _read(self, path: Path) -> InFlight:
        try:
            return InFlight(**json.loads(path.read_text()))
        except (ValueError, TypeError) as err:
            raise ConfigError(f"{path} is not a sink group in-flight record ({err}); it is written atomically, so "
                              "something else wrote it: restore it, or remove it knowing that the batch in flight "
                              "may then be forwarded twice", key=f"sink_groups.{self.group}") from None

    def write(self, record: InFlight) -> None:
        path = self._paths.setdefault(record.take, self.directory / f"inflight-{record.take}.json")
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self._fs, str(path), json.dumps(asdict(record)).encode())

    def remove(self, record: InFlight) -> None:
        """After the local commit (a crash before this leaves a record the head no longer matches)."""
        path = self._paths.pop(record.take, None)
        if path is not None:
            path.unlink(missing_ok=True)
