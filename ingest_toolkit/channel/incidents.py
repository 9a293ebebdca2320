"""Incidents: every range of the log that recovery or a repair cut away, with the events in it.

Nothing is dropped in silence. Before recovery cuts the newest segment at a torn write that held
events, or sets aside a damaged tail (``recovery_mode = "set_aside"``), and before ``channel
repair`` replaces damaged records, it records an incident in ``<checkpoint_dir>/incidents.json``
(replaced atomically, so any process may read it without a lock): the segment, the offset, the
bytes, the number of events and transactions, whether acknowledged commits may be among them, and
where the bytes were set aside. An incident stays *open* until an operator acknowledges it
(``ingest-toolkit channel acknowledge``; through the agent while one runs the channel): until then
the channel's status and metrics count it and the ``recovery_losses_acknowledged`` check fails,
naming the segment and the count (docs/durability.md, "Recovery modes").
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Final, Literal

from ..errors import ChannelError
from .fs import FileSystem, OsFileSystem, read_file, write_atomic

__all__ = ["INCIDENTS_FILE", "Incident", "IncidentBook", "IncidentKind", "IncidentsUnreadable",
           "acknowledge_incidents", "load_incidents", "open_incidents", "record_incident", "summarize"]

INCIDENTS_FILE: Final = "incidents.json"
FORMAT: Final = "ingest-toolkit/channel-incidents/1"
_MAX_BYTES: Final = 16 << 20
IncidentKind = Literal["torn_tail", "damaged_tail", "repair"]


class IncidentsUnreadable(ChannelError):
    """``incidents.json`` exists but cannot be read: recovery refuses to add to it (it would lose
    the open incidents it holds)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path} {problem}: restore it from a backup, or move it away once its incidents are "
                         "known to be handled (the channel records new incidents in a new file)")
        self.path = path


@dataclass(frozen=True, slots=True)
class Incident:
    """One cut. ``acknowledged_data``: events whose commits were acknowledged may be among
    ``events`` (a damaged tail, a repair, a torn write of a ``page_cache`` channel); otherwise
    they were never acknowledged (a torn write of an ``fsync`` channel: their clients retry)."""

    id: int
    kind: IncidentKind
    segment: str
    offset: int
    bytes: int
    events: int
    transactions: int
    acknowledged_data: bool
    detail: str
    detected_unix_ns: int
    quarantine: str = ""  # where the cut bytes were copied ("" when they were not)
    acknowledged_unix_ns: int = 0
    acknowledged_note: str = ""

    @property
    def open(self) -> bool:
        return not self.acknowledged_unix_ns

    def summary(self) -> str:
        """One line: what was cut where, and what it held."""
        what = {"torn_tail": "torn write cut", "damaged_tail": "damaged tail set aside",
                "repair": "damaged records replaced by repair"}[self.kind]
        held = (f"{self.events} events in {self.transactions} transactions"
                + (" (acknowledged commits may be among them)" if self.acknowledged_data else
                   " (never acknowledged to their clients)"))
        aside = f"; its bytes are in {self.quarantine}" if self.quarantine else ""
        return f"incident {self.id}: {what} at offset {self.offset} of {self.segment}: {held}{aside}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "open": self.open}


def _path(checkpoint_dir: str) -> str:
    return os.path.join(checkpoint_dir, INCIDENTS_FILE)


def load_incidents(checkpoint_dir: str, fs: FileSystem | None = None) -> list[Incident]:
    """The channel's incidents, oldest first ([] when it has none); IncidentsUnreadable when the
    file is damaged."""
    path = _path(checkpoint_dir)
    data = read_file(fs or OsFileSystem(), path, _MAX_BYTES)
    if data is None:
        return []
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("incidents"), list):
            raise ValueError(f"not a {FORMAT} document")
        names = {f.name for f in fields(Incident)}
        return [Incident(**{k: v for k, v in item.items() if k in names}) for item in doc["incidents"]]
    except (ValueError, TypeError, AttributeError) as err:
        raise IncidentsUnreadable(path, f"cannot be read ({err})") from None


def _save(fs: FileSystem, checkpoint_dir: str, incidents: list[Incident]) -> None:
    doc = {"format": FORMAT, "incidents": [asdict(i) for i in incidents]}
    write_atomic(fs, _path(checkpoint_dir), (json.dumps(doc, indent=1) + "\n").encode())


def record_incident(checkpoint_dir: str, *, kind: IncidentKind, segment: str, offset: int, nbytes: int, events: int,
                    transactions: int, acknowledged_data: bool, detail: str, quarantine: str = "",
                    fs: FileSystem | None = None) -> Incident:
    """Add an incident (durably) and return it. The same cut found again (a crash after the
    record, before the cut) returns the incident already recorded."""
    fs = fs or OsFileSystem()
    incidents = load_incidents(checkpoint_dir, fs)
    for known in incidents:
        if (known.kind, known.segment, known.offset) == (kind, segment, offset):
            return known
    incident = Incident(id=max((i.id for i in incidents), default=0) + 1, kind=kind, segment=segment, offset=offset,
                        bytes=nbytes, events=events, transactions=transactions, acknowledged_data=acknowledged_data,
                        detail=detail, detected_unix_ns=time.time_ns(), quarantine=quarantine)
    _save(fs, checkpoint_dir, [*incidents, incident])
    return incident


def acknowledge_incidents(checkpoint_dir: str, ids: Iterable[int] | None, note: str,
                          fs: FileSystem | None = None) -> list[Incident]:
    """Mark open incidents acknowledged (``ids`` None: every open one); returns those it marked.
    An id that is not an open incident raises ChannelError naming the open ones."""
    fs = fs or OsFileSystem()
    incidents = load_incidents(checkpoint_dir, fs)
    still_open = {i.id for i in incidents if i.open}
    wanted = set(still_open if ids is None else ids)
    unknown = sorted(wanted - still_open)
    if unknown:
        raise ChannelError(f"no open incident {unknown[0]} in {_path(checkpoint_dir)}; open incidents: "
                           f"{sorted(still_open) or 'none'}")
    now = time.time_ns()
    marked = [replace(i, acknowledged_unix_ns=now, acknowledged_note=note) for i in incidents if i.id in wanted]
    if marked:
        by_id = {i.id: i for i in marked}
        _save(fs, checkpoint_dir, [by_id.get(i.id, i) for i in incidents])
    return marked


def open_incidents(incidents: Iterable[Incident]) -> list[Incident]:
    return [i for i in incidents if i.open]


def summarize(incidents: Iterable[Incident]) -> dict[str, Any]:
    """What the channel's status and metrics say of its incidents: the open ones, and their events."""
    found = open_incidents(incidents)
    return {"open": len(found), "events": sum(i.events for i in found),
            "acknowledged_data": any(i.acknowledged_data for i in found),
            "incidents": [i.to_json() for i in found]}


class IncidentBook:
    """A channel's incidents as the live channel serves them: read from ``incidents.json`` when it
    changed (a repair or an acknowledgement by another process writes it), written only to
    acknowledge. A file that cannot be read is reported as a problem, never as "no incidents"."""

    def __init__(self, checkpoint_dir: str, fs: FileSystem | None = None) -> None:
        self._dir, self._fs = checkpoint_dir, fs or OsFileSystem()
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None  # (mtime ns, size) of the file last read
        self._incidents: list[Incident] = []
        self._problem: str | None = None

    def all(self) -> list[Incident]:
        with self._lock:
            self._refresh()
            return list(self._incidents)

    def summary(self) -> dict[str, Any]:
        """:func:`summarize` of the incidents, with ``problem`` when the file cannot be read."""
        with self._lock:
            self._refresh()
            return {**summarize(self._incidents), "problem": self._problem}

    def acknowledge(self, ids: Iterable[int] | None, note: str) -> list[Incident]:
        with self._lock:
            marked = acknowledge_incidents(self._dir, ids, note, self._fs)
            self._seen = None
            self._refresh()
            return marked

    def _refresh(self) -> None:
        try:
            stat = os.stat(_path(self._dir))
            seen = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            seen = (0, 0)
        if seen == self._seen:
            return
        try:
            self._incidents, self._problem = load_incidents(self._dir, self._fs), None
        except IncidentsUnreadable as err:
            self._problem = str(err)
        self._seen = seen
