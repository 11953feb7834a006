"""``join(other, on=(left_key, right_key), select=fn)``: the temporal equi-join (two inputs).

For every pair of a left event and a right event whose keys are equal and whose lifetimes
overlap, the output holds one event over the *intersection* of the two lifetimes, with the
payload ``select(left_payload, right_payload)`` (by default the tuple ``(l, r)``).
``on=None`` is the temporal cross join: every overlapping pair matches::

    left    a: [0 ─────────── 10)  k=1
    right   b:      [4 ─────────────── 15)  k=1      c: [2 ── 6)  k=2
    output  (a, b):  [4 ───── 10)

    >>> from operators.events import Insert, Cti
    >>> j = Join(on=("k", "k"))
    >>> j.process([Insert("a", 0, 10, {"k": 1}), Cti(3)], 0)
    []
    >>> j.process([Insert("b", 4, 15, {"k": 1}), Insert("c", 2, 6, {"k": 2}), Cti(5)], 1)
    [Insert(id=0, start=4, end=10, payload=({'k': 1}, {'k': 1})), Cti(time=3)]

A retraction on either input moves the end of every intersection it takes part in: an output
may change its end, vanish (fully retracted) or appear (a lengthened event meets new
partners). Output ids are minted from a counter and never reused.

**State.** Each input keeps its live events hashed by key, and within a key indexed by start
and by end (sorted containers), so a probe for ``[s, e)`` walks only the smaller of "starts
before e" and "ends after s". Each event keeps the outputs (pairs) it takes part in.

**CTIs.** Output ``Cti(min(left CTI, right CTI))``: an output starts at the later of its two
starts, each at or after its own input's CTI when inserted, and an output end changes only
where an input end changes, at or after that input's CTI.

**Freeing state.** An event of input A (the other input is B) can still produce or change
output only if its own end may be retracted (``end >= CTI_A``) or a future event of B, which
starts at or after ``CTI_B``, may overlap it (``end > CTI_B``). So it is dropped, with the
pairs it takes part in, as soon as ``end < CTI_A and end <= CTI_B``. A pair whose left or right
event is dropped is final: the survivor's end can only move at or after its own CTI, which is
at or past the dropped event's end, so the intersection's end cannot move.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .events import Insert, Message, Retract
from .temporal import (
    END,
    KEY,
    LINKS,
    P_END,
    P_ID,
    P_PAYLOAD,
    P_START,
    PAYLOAD,
    START,
    BinaryTemporal,
)


class Join(BinaryTemporal):
    """The temporal join of input 0 (left) and input 1 (right); see the module docstring.

    ``on=(left_key, right_key)``: field names or functions of the payload; ``None`` joins every
    pair (cross join). ``select(l, r)`` builds the output payload (default ``(l, r)``).
    """

    _state_fields = (*BinaryTemporal._state_fields, "n_pairs")

    def __init__(self, on: Any = None, select: Callable[[Any, Any], Any] | None = None,
                 name: str | None = None) -> None:
        super().__init__(on, "join", name)
        if select is not None and not callable(select):
            raise TypeError(f"join: select must be a function (left, right) -> payload, "
                            f"got {select!r}")
        self.select = select
        self.n_pairs = 0

    # -- pairs ----------------------------------------------------------------------------
    def _pair(self, seq: int, rec: list[Any], oseq: int, orec: list[Any], port: int,
              out: list[Message]) -> None:
        """Link ``rec`` (on ``port``) with ``orec`` (on the other input); emit the output."""
        start = max(orec[START], rec[START])
        end = min(orec[END], rec[END])
        lp, rp = (rec[PAYLOAD], orec[PAYLOAD]) if port == 0 else (orec[PAYLOAD], rec[PAYLOAD])
        payload = (lp, rp) if self.select is None else self.select(lp, rp)
        oid = self._mint()
        pair = [oid, start, end, payload]
        if rec[LINKS] is None:
            rec[LINKS] = {oseq: pair}
        else:
            rec[LINKS][oseq] = pair
        if orec[LINKS] is None:
            orec[LINKS] = {seq: pair}
        else:
            orec[LINKS][seq] = pair
        self.n_pairs += 1
        out.append(Insert(oid, start, end, payload))

    def _unlink(self, seq: int, oseq: int, pair: list[Any], out: list[Message]) -> None:
        """The intersection of ``seq`` and ``oseq`` vanished: forget the pair, retract it."""
        del self.recs[oseq][LINKS][seq]
        self.n_pairs -= 1
        out.append(Retract(pair[P_ID], pair[P_START], pair[P_END], pair[P_START],
                           pair[P_PAYLOAD]))

    # -- messages -------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        seq, rec = self._add(msg, port, None)
        recs = self.recs
        matches = self.index[1 - port].overlapping(rec[KEY], msg.start, msg.end, recs)
        if not matches:
            return []
        out: list[Message] = []
        for oseq in matches:
            self._pair(seq, rec, oseq, recs[oseq], port, out)
        return out

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        seq, rec = self._find(msg, port)
        out: list[Message] = []
        recs = self.recs
        old_end, new_end = msg.end, msg.new_end
        links = rec[LINKS] or {}
        if new_end == msg.start:  # full retraction: every pair vanishes
            self._delete(port, seq, rec)
            for oseq, pair in links.items():
                self._unlink(seq, oseq, pair, out)
            return out
        self._set_end(port, seq, rec, new_end)
        for oseq, pair in list(links.items()):
            end = min(recs[oseq][END], new_end)
            if end <= pair[P_START]:  # the intersection vanishes
                del links[oseq]
                self._unlink(seq, oseq, pair, out)
            elif end != pair[P_END]:
                out.append(Retract(pair[P_ID], pair[P_START], pair[P_END], end,
                                   pair[P_PAYLOAD]))
                pair[P_END] = end
        if new_end > old_end:
            # new partners overlap [old_end, new_end) but not [start, old_end): they start there
            for oseq in self.index[1 - port].starting_in(rec[KEY], old_end, new_end):
                self._pair(seq, rec, oseq, recs[oseq], port, out)
        return out

    # -- state ----------------------------------------------------------------------------
    def _dropped(self, port: int, seq: int, rec: list[Any]) -> None:
        # the pairs of a freed event are final (see the module docstring)
        recs = self.recs
        for oseq in rec[LINKS]:
            del recs[oseq][LINKS][seq]
        self.n_pairs -= len(rec[LINKS])

    def state_size(self) -> int:
        """Live events held on both inputs plus the output pairs that may still change."""
        return len(self.recs) + self.n_pairs

    def _check(self) -> None:
        self._check_events()
        recs = self.recs
        pairs = 0
        for seq in self.ids[0].values():
            rec = recs[seq]
            for oseq, pair in (rec[LINKS] or {}).items():
                orec = recs[oseq]
                assert orec[LINKS][seq] is pair, "pairs are linked both ways"
                assert pair[P_START] == max(rec[START], orec[START])
                assert pair[P_END] == min(rec[END], orec[END]) > pair[P_START]
                assert orec[KEY] == rec[KEY]
                pairs += 1
        assert pairs == self.n_pairs
        assert sum(len(recs[s][LINKS] or ()) for s in self.ids[1].values()) == pairs
