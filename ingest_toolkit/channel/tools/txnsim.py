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

A damaged RUN frame (a sealed run of an encrypted segment) cannot be opened: its events are lost
with its transaction and counted (from the COMMIT), not listed one by one.

PUT frames read from damaged bytes are attributed by the transaction id in their header; one whose
header names no dropped transaction fills a missing slot of the next dropped COMMIT after it
(a transaction's frames precede its COMMIT). What is left is reported as damaged events of an
unknown, possibly uncommitted, transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import DecodeError

from ...errors import CorruptLogError
from ..codec import TXN_PUT, decode_commit, decode_take
from ..format import FRAME_HEADER, FrameType, make_pointer, pointer_offset
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
    returned: int | None = 0  # a take's events, back in the queue (None: how many is unknown)

    @property
    def events_lost(self) -> int:
        return sum(not e.already_taken for e in self.events) + self.unreadable


@dataclass(slots=True)
class _Drop:
    txn: int
    kind: str
    cause: str
    commit: tuple[str, int] | None
    position: int  # pointer of the COMMIT frame neutralised (the end of the log for the others)
    found: list[tuple[int, int]]  # (pointer, seq) of the put frames that remain
    count: int | None  # events the COMMIT counted (None: the COMMIT itself was lost)


_END = 1 << 64
_T = TypeVar("_T")


def _decoded(decode: Callable[[bytes], _T], image: Image, piece: Piece, path: str) -> _T:
    """The payload of a valid (CRC-checked) frame, decoded; protobuf's refusal is CorruptLogError."""
    try:
        return decode(bytes(image[piece.offset + _HEAD: piece.end - 4]))
    except DecodeError as err:
        raise CorruptLogError(path=path, offset=piece.offset,
                              reason=f"frame payload is not a valid message ({err}); repair cannot attribute it: "
                                     "restore the file from a backup") from None


class TxnSim:
    def __init__(self) -> None:
        self.puts: dict[int, list[tuple[int, int]]] = {}
        self.takes: dict[int, list[int]] = {}
        self.last: dict[int, tuple[int, int]] = {}  # txn -> (log id, end of its last frame)
        self.pending: set[int] = set()  # pointers of uncommitted PUT frames
        self.watch: set[int] = set()  # pointers of dropped or damaged events
        self.taken: set[int] = set()  # watched or pending pointers a committed take removed
        self.in_damage: dict[int, list[tuple[Damage, Piece]]] = {}  # txn -> frames in damage
        self.resolved: set[int] = set()  # txns named in damage that committed or rolled back later
        self.damaged_counts: dict[int, int] = {}  # txn -> count of a COMMIT read from damage
        self.damage_starts: dict[tuple[int, int], Damage] = {}
        self.drops: list[_Drop] = []
        self.unexplained: list[str] = []
        self.unattributed: list[LostEvent] = []  # damaged PUT frames of no known dropped transaction
        # As replay: when the oldest segment is not log 1, history before it was deleted, and a
        # COMMIT in it (or of a transaction pending at its end) may count frames that were there.
        self.truncated = self.in_first = False
        self.first_txns: set[int] = set()

    # -- feeding ----------------------------------------------------------------------------
    def segment(self, log_id: int, index: int) -> None:
        """Called before the frames of each segment, in log order."""
        if index == 0:
            self.truncated = self.in_first = log_id > 1
        elif self.in_first:
            self.first_txns = set(self.puts) | set(self.takes)
            self.in_first = False

    def damage(self, damage: Damage, image: Image) -> None:
        self.damage_starts[(damage.log_id, damage.offset)] = damage
        for piece in damage.frames:
            self.in_damage.setdefault(piece.txn, []).append((damage, piece))
            if piece.type == FrameType.PUT:
                self.watch.add(make_pointer(damage.log_id, piece.offset))
            elif piece.type == FrameType.COMMIT and piece.end <= len(image):
                try:
                    self.damaged_counts[piece.txn] = decode_commit(image[piece.offset + _HEAD: piece.end - 4])[1]
                except Exception:  # protobuf's DecodeError: the payload is damaged too
                    pass

    def frame(self, log_id: int, path: str, piece: Piece, image: Image) -> bool:
        """Apply one valid frame; True when it is a COMMIT that must be neutralised."""
        txn = piece.txn
        if piece.type == FrameType.RUN:  # a sealed run: its PUT frames, then the run's end is the last
            for inner in piece.inner:
                self.frame(log_id, path, inner, image)
            self.last[txn] = (log_id, piece.end)
            return False
        if piece.type == FrameType.PUT:
            pointer = make_pointer(log_id, piece.offset)
            self.puts.setdefault(txn, []).append((pointer, piece.seq))
            self.pending.add(pointer)
        elif piece.type == FrameType.TAKE:
            self.takes.setdefault(txn, []).extend(_decoded(decode_take, image, piece, path))
        elif piece.type in (FrameType.COMMIT, FrameType.ROLLBACK):
            self.last.pop(txn, None)
            if txn in self.in_damage:
                self.resolved.add(txn)
            if piece.type == FrameType.COMMIT:
                kind, count, _tag = _decoded(decode_commit, image, piece, path)
                return self._commit(txn, kind, count, path, make_pointer(log_id, piece.offset))
            self.pending.difference_update(p for p, _ in self.puts.pop(txn, []))
            self.takes.pop(txn, None)
        if piece.type in (FrameType.PUT, FrameType.TAKE):
            self.last[txn] = (log_id, piece.end)
        return False

    def _commit(self, txn: int, kind: int, count: int, path: str, pointer: int) -> bool:
        found = self.puts.pop(txn, []) if kind == TXN_PUT else []
        pointers = self.takes.pop(txn, []) if kind != TXN_PUT else []
        self.pending.difference_update(p for p, _ in found)
        if len(found if kind == TXN_PUT else pointers) == count:
            if pointers and (self.watch or self.pending):
                self.taken.update(p for p in pointers if p in self.watch or p in self.pending)
            return False
        offset = pointer_offset(pointer)
        found_count = len(found) if kind == TXN_PUT else len(pointers)
        if not self.damage_starts and found_count < count and self._began_before_history(txn, found_count):
            return False  # replay applies what is left: the rest was in deleted segments
        if not self.damage_starts:
            self.unexplained.append(
                f"COMMIT of transaction {txn} in {path} at offset {offset} counts {count} events but "
                f"{found_count} remain, no damaged range precedes it, and it did not begin before the "
                "oldest segment: a segment in the middle of the log is missing, so a full replay fails")
            return False
        self.watch.update(p for p, _ in found)
        cause = f"COMMIT counts {count} events but frames were lost in a damaged range; COMMIT neutralised"
        self.drops.append(_Drop(txn, "put" if kind == TXN_PUT else "take", cause, (path, offset), pointer,
                                found, count))
        return True

    def _began_before_history(self, txn: int, found: int) -> bool:
        return self.truncated and (not found or self.in_first or txn in self.first_txns)

    # -- result -----------------------------------------------------------------------------
    def finish(self) -> list[DroppedTxn]:
        """Every transaction the repair drops, in the order they were found."""
        dropped = {d.txn for d in self.drops}
        for txn, found in self.puts.items():
            if cause := self._lost_commit(txn):
                self.drops.append(_Drop(txn, "put", cause, None, _END, found, None))
        for txn, pointers in self.takes.items():
            if cause := self._lost_commit(txn):
                count = self.damaged_counts.get(txn, len(pointers))
                self.drops.append(_Drop(txn, "take", cause, None, _END, [], count))
        dropped |= set(self.puts) | set(self.takes)
        for txn, pieces in self.in_damage.items():
            if txn not in dropped and txn not in self.resolved:
                self._damage_only(txn, pieces)
        results = [self._result(drop) for drop in self.drops]
        self._attribute(results)
        return results

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

    def _damage_only(self, txn: int, pieces: list[tuple[Damage, Piece]]) -> None:
        """A transaction whose every frame was in damaged ranges.

        Only when its COMMIT was read there too, or the range runs to the end of the segment (where
        the COMMIT may have been): otherwise the id may be a damaged header's, and its PUT frames
        are attributed by position instead (:meth:`_attribute`).
        """
        types = {FrameType.PUT if p.type == FrameType.RUN else p.type for _, p in pieces}  # a run holds puts
        if FrameType.ROLLBACK in types or not types & {FrameType.PUT, FrameType.TAKE}:
            return
        if FrameType.COMMIT not in types and not any(d.tail for d, _ in pieces):
            return
        damage = pieces[0][0]
        cause = f"all its frames were in the damaged range at {damage.path}:{damage.offset}"
        if FrameType.PUT in types:
            self.drops.append(_Drop(txn, "put", cause, None, _END, [], None))
        else:
            self.drops.append(_Drop(txn, "take", cause, None, _END, [], self.damaged_counts.get(txn)))

    def _result(self, drop: _Drop) -> DroppedTxn:
        result = DroppedTxn(drop.txn, drop.kind, drop.cause, drop.commit)
        if drop.kind == "take":
            result.returned = drop.count
            return result
        result.events = [LostEvent(seq, p, True, p in self.taken) for p, seq in drop.found]
        result.events += [self._event(damage, piece) for damage, piece in self.in_damage.get(drop.txn, [])
                          if piece.type == FrameType.PUT]
        result.events.sort(key=lambda e: e.pointer)
        if drop.count is not None:
            result.unreadable = max(drop.count - len(result.events), 0)
        return result

    def _event(self, damage: Damage, piece: Piece) -> LostEvent:
        pointer = make_pointer(damage.log_id, piece.offset)
        return LostEvent(piece.seq, pointer, piece.verified, pointer in self.taken)

    def _attribute(self, results: list[DroppedTxn]) -> None:
        """Give damaged PUT frames of unknown transactions to the dropped COMMITs missing frames."""
        puts = {r.txn_id for r in results if r.kind == "put"}
        loose = sorted((self._event(d, p) for pieces in self.in_damage.values() for d, p in pieces
                        if p.type == FrameType.PUT and p.txn not in puts), key=lambda e: e.pointer)
        slots = sorted(((drop.position, result) for drop, result in zip(self.drops, results, strict=True)
                        if result.unreadable), key=lambda slot: slot[0])
        for event in loose:
            target = next((r for position, r in slots if position > event.pointer and r.unreadable), None)
            if target is None:
                self.unattributed.append(event)
                continue
            target.events.append(event)
            target.unreadable -= 1
