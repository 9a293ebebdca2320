"""Which transactions lose their commit when damaged frames are removed, and which events go.

:class:`TxnSim` follows the commit bookkeeping of replay over what stays after a repair, in log
order. A COMMIT whose count no longer matches the frames its transaction still has, after a
damaged range was seen, loses frames to the damage: repair neutralises that COMMIT (a NOOP over
it) so the whole transaction counts as uncommitted, keeping transactions atomic. A transaction
left without COMMIT at the end whose COMMIT was in a damaged range (its header names the
transaction, or the range starts right after the transaction's last frame) is dropped too.

A dropped put loses its events, except those a committed take had already removed (they were
delivered; only their record goes). A dropped take gives its events back to the queue: they are
delivered again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..codec import TXN_PUT, decode_commit, decode_take
from ..format import FRAME_HEADER, FrameType
from .scan import Damage, Image, Piece

__all__ = ["DroppedTxn", "LostEvent", "TxnSim"]

_HEAD = FRAME_HEADER.size


@dataclass(frozen=True, slots=True)
class LostEvent:
    seq: int
    pointer: int
    verified: bool  # False: the sequence number was read from a damaged frame
    already_taken: bool  # a committed take had removed it: delivered before, nothing lost


@dataclass(slots=True)
class DroppedTxn:
    txn_id: int
    kind: str  # "put" or "take"
    cause: str
    commit: tuple[str, int] | None = None  # (path, offset) of the COMMIT frame neutralised
    events: list[LostEvent] = field(default_factory=list)  # a put's events
    unreadable: int = 0  # a put's events whose frames were not readable at all
    returned: int = 0  # a take's events, back in the queue

    @property
    def events_lost(self) -> int:
        return sum(not e.already_taken for e in self.events) + self.unreadable


@dataclass(slots=True)
class _Drop:
    txn: int
    kind: str
    cause: str
    commit: tuple[str, int] | None
    found: list[tuple[int, int]]  # (pointer, seq) of the put frames that remain
    count: int | None  # events the COMMIT counted (None: the COMMIT itself was lost)


class TxnSim:
    def __init__(self) -> None:
        self.puts: dict[int, list[tuple[int, int]]] = {}
        self.takes: dict[int, list[int]] = {}
        self.last: dict[int, tuple[int, int]] = {}  # txn -> (log id, end of its last frame)
        self.pending: set[int] = set()  # pointers of uncommitted PUT frames
        self.watch: set[int] = set()  # pointers of dropped or damaged events
        self.taken: set[int] = set()  # watched or pending pointers a committed take removed
        self.in_damage: dict[int, list[tuple[Damage, Piece]]] = {}  # txn -> frames in damage
        self.damage_starts: dict[tuple[int, int], Damage] = {}
        self.drops: list[_Drop] = []
        self.unexplained: list[str] = []

    # -- feeding ----------------------------------------------------------------------------
    def damage(self, damage: Damage) -> None:
        self.damage_starts[(damage.log_id, damage.offset)] = damage
        for piece in damage.frames:
            self.in_damage.setdefault(piece.txn, []).append((damage, piece))
            if piece.type == FrameType.PUT:
                self.watch.add((damage.log_id << 32) | piece.offset)

    def frame(self, log_id: int, path: str, piece: Piece, image: Image) -> bool:
        """Apply one valid frame; True when it is a COMMIT that must be neutralised."""
        txn = piece.txn
        if piece.type == FrameType.PUT:
            pointer = (log_id << 32) | piece.offset
            self.puts.setdefault(txn, []).append((pointer, piece.seq))
            self.pending.add(pointer)
        elif piece.type == FrameType.TAKE:
            self.takes.setdefault(txn, []).extend(decode_take(image[piece.offset + _HEAD: piece.end - 4]))
        elif piece.type == FrameType.COMMIT:
            self.last.pop(txn, None)
            kind, count = decode_commit(image[piece.offset + _HEAD: piece.end - 4])
            return self._commit(txn, kind, count, path, piece.offset)
        elif piece.type == FrameType.ROLLBACK:
            self.pending.difference_update(p for p, _ in self.puts.pop(txn, []))
            self.takes.pop(txn, None)
        if piece.type in (FrameType.PUT, FrameType.TAKE):
            self.last[txn] = (log_id, piece.end)
        return False

    def _commit(self, txn: int, kind: int, count: int, path: str, offset: int) -> bool:
        if kind == TXN_PUT:
            found = self.puts.pop(txn, [])
            self.pending.difference_update(p for p, _ in found)
            if len(found) == count:
                return False
        else:
            pointers = self.takes.pop(txn, [])
            if len(pointers) == count:
                if self.watch or self.pending:
                    self.taken.update(p for p in pointers if p in self.watch or p in self.pending)
                return False
            found = []
        if not self.damage_starts:
            self.unexplained.append(
                f"COMMIT of transaction {txn} in {path} at offset {offset} counts {count} events but "
                f"{len(found) if kind == TXN_PUT else len(pointers)} remain, and no damaged range precedes "
                "it: the missing frames are in a deleted segment, so a full replay of this log fails")
            return False
        self.watch.update(p for p, _ in found)
        cause = f"COMMIT counts {count} events but frames were lost in a damaged range; COMMIT neutralised"
        self.drops.append(_Drop(txn, "put" if kind == TXN_PUT else "take", cause, (path, offset), found, count))
        return True

    # -- result -----------------------------------------------------------------------------
    def finish(self) -> list[DroppedTxn]:
        """Every transaction the repair drops, in the order they were found."""
        for txn, found in self.puts.items():
            cause = self._lost_commit(txn)
            if cause:
                self.drops.append(_Drop(txn, "put", cause, None, found, None))
        for txn, pointers in self.takes.items():
            cause = self._lost_commit(txn)
            if cause:
                self.drops.append(_Drop(txn, "take", cause, None, [(p, 0) for p in pointers], None))
        return [self._result(drop) for drop in self.drops]

    def _lost_commit(self, txn: int) -> str | None:
        """Why an uncommitted transaction lost its COMMIT to damage; None if it did not."""
        pieces = self.in_damage.get(txn, [])
        if any(p.type == FrameType.ROLLBACK for _, p in pieces):
            return None  # it was rolled back: nothing lost
        damage = self.damage_starts.get(self.last.get(txn, (-1, -1)))
        if damage is None and pieces:
            damage = pieces[-1][0]
        if damage is None:
            return None  # open at a crash or rolled back: uncommitted anyway
        return f"its COMMIT frame was in the damaged range at {damage.path}:{damage.offset}"

    def _result(self, drop: _Drop) -> DroppedTxn:
        result = DroppedTxn(drop.txn, drop.kind, drop.cause, drop.commit)
        if drop.kind == "take":
            result.returned = drop.count if drop.count is not None else len(drop.found)
            return result
        events = [LostEvent(seq, p, True, p in self.taken) for p, seq in drop.found]
        for damage, piece in self.in_damage.get(drop.txn, []):
            if piece.type == FrameType.PUT:
                pointer = (damage.log_id << 32) | piece.offset
                events.append(LostEvent(piece.seq, pointer, piece.verified, pointer in self.taken))
        events.sort(key=lambda e: e.pointer)
        result.events = events
        if drop.count is not None:
            result.unreadable = max(drop.count - len(events), 0)
        return result
