"""How the commands print counts: one way everywhere.

Every count a command shows has thousands separators (``300,000``, never ``300000``) and its noun
agrees with it (``1 file``, ``2 files``). The commands, reports and check descriptions call these
functions rather than formatting numbers themselves, so the rule lives here only.
"""

from __future__ import annotations

__all__ = ["byte_size", "count", "number"]



def number(value: int) -> str:
    """``value`` with thousands separators: ``number(300000) == "300,000"``."""
    return f"{value:,}"


def byte_size(size: int) -> str:
    """Bytes as a person reads them: ``1.6 MB``, ``820.0 kB``, ``12 B`` (powers of 1,000, as ``du --si``)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}" if size < 100 * scale else f"{size / scale:,.0f} {unit}"
    return f"{size} B"


def count(value: int, noun: str, plural: str | None = None) -> str:
    """``value`` and ``noun`` agreeing with it: ``count(1, "file") == "1 file"``,
    ``count(1000, "segment") == "1,000 segments"``. ``plural`` when it is not in the table."""
    if value == 1:
        return f"1 {noun}"
    return f"{value:,} {plural or _plural(noun)}"


def _plural(noun: str) -> str:
    """English plural of the nouns the commands count (batch, entry, process, file, ...)."""
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "o", "u"):
        return noun[:-1] + "ies"
    return noun + "s"
