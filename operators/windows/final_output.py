"""``emit="final"`` for any window operator: one final result per window, never retracted.

A window operator outputs speculatively: a window's row appears as soon as an event lands in
it and is corrected (fully retracted, reinserted) as later events arrive. :class:`FinalOutput`
hosts such an operator and holds its output rows back until they are final — until its output
CTI reaches their end, when no retraction can touch them any more (a window operator only ever
retracts a row fully, at its start) — then sends each one insert. At the end of input it sends
what is left, as it stands. Its CTI never passes the start of a row it still holds, so the rows
so the rows it sends later are never behind it::

    input     a·0  b·2 | CTI 6  c·7  CTI 12          tumbling_window(5), Count
    inner     [0,5) 2  | CTI 5  [5,10) 1  CTI 10     (speculative: before any CTI)
    final              | [0,5) 2  CTI 5  [5,10) 1  CTI 10

    >>> from operators.aggregates import Count
    >>> from operators.events import Insert, Cti
    >>> from operators.windows import make_window
    >>> from operators.windows import tumbling_window
    >>> op = FinalOutput(make_window(tumbling_window(5), Count(), name="w"), final_at_end=True)
    >>> op.process([Insert("a", 0, 1), Insert("b", 2, 3)])
    []
    >>> op.process([Cti(6), Insert("c", 7, 8), Cti(12)])  # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=FreshId('w', 0), start=0, end=5, payload=2), Cti(time=5),
     Insert(id=FreshId('w', 1), start=5, end=10, payload=1), Cti(time=10)]
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from sortedcontainers import SortedList

from ..columns import Columns
from ..errors import DeadLetter
from ..events import MAX_TIME, Cti, Insert, Message, Retract
from ..processor import Processor


class FinalOutput(Processor):
    """The final rows of ``inner``'s output (see the module doc)."""

    _state_fields = ("rows", "by_end", "by_start", "inner_cti", "seq")
    _parts = ("inner",)

    def __init__(self, inner: Processor, final_at_end: bool = False,
                 name: str | None = None) -> None:
        super().__init__(name or inner.name)
        self.inner = inner
        #: whether a row is final once the CTI reaches its end (rows that are windows: hopping
        #: and tumbling windows stamped "window" or "point_end"); otherwise only once the CTI
        #: passes it (snapshot, count and compressed rows may still be lengthened at the CTI)
        self.final_at_end = final_at_end
        self.n_inputs = inner.n_inputs
        #: id -> [start, end, payload, seq] of the rows not sent yet (seq: arrival number, so
        #: that the sorted lists never compare ids)
        self.rows: dict[Hashable, list[Any]] = {}
        self.by_end: SortedList = SortedList()  # (end, seq, id) of the held rows
        self.by_start: SortedList = SortedList()  # (start, seq, id)
        self.inner_cti = self.out_cti
        self.seq = 0

    @property
    def dead_letters(self) -> Sequence[DeadLetter]:  # type: ignore[override]
        return self.inner.dead_letters

    def children(self) -> Iterable[Processor]:
        return (self.inner,)

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        return self._absorb(self.inner.process(batch, port))

    def finish(self) -> list[Message]:
        out = self._absorb(self.inner.finish())
        return out + self._release(MAX_TIME) + self.emit_cti(self.inner_cti)

    def _absorb(self, msgs: Sequence[Message | Columns]) -> list[Message]:
        out: list[Message] = []
        rows = self.rows
        for msg in msgs:
            if type(msg) is Insert:
                self.seq += 1
                rows[msg.id] = [msg.start, msg.end, msg.payload, self.seq]
                self.by_end.add((msg.end, self.seq, msg.id))
                self.by_start.add((msg.start, self.seq, msg.id))
            elif type(msg) is Retract:
                s, e, _, seq = row = rows[msg.id]
                self.by_end.remove((e, seq, msg.id))
                if msg.new_end == msg.start:
                    self.by_start.remove((s, seq, msg.id))
                    del rows[msg.id]
                else:
                    row[1] = msg.new_end
                    self.by_end.add((msg.new_end, seq, msg.id))
            elif type(msg) is Cti:
                self.inner_cti = msg.time
                out += self._release(msg.time)
            else:  # Columns: the inserts it holds
                out += self._absorb(msg.inserts())
        return out

    def _release(self, time: int) -> list[Message]:
        """Send the rows final at ``time`` (all of them at ``MAX_TIME``), in start order, then
        a CTI up to the first row still held."""
        by_end, rows = self.by_end, self.rows
        last = time if self.final_at_end else time - 1
        cut = by_end.bisect_right((last, float("inf"))) if time < MAX_TIME else len(by_end)
        ready = [rid for _, _, rid in by_end[:cut]]
        del by_end[:cut]
        out: list[Message] = []
        for rid in sorted(ready, key=lambda r: rows[r][0]):
            s, e, p, seq = rows.pop(rid)
            self.by_start.remove((s, seq, rid))
            out.append(Insert(rid, s, e, p))
        held = self.by_start[0][0] if self.by_start else time
        return out + self.emit_cti(min(time, held))

    def state_size(self) -> int:
        return self.inner.state_size() + len(self.rows)


