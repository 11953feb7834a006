"""The output of a query: :class:`Publish` forwards the stream and remembers what is alive.

The sink of every plan is a ``Publish`` stage. It passes its input on unchanged (to the
driver's subscriptions and to queries composed onto this one) and keeps the rows of the output
CHT that are still *alive* at its CTI: every row whose end is at or after the latest output
CTI. (A row that ends exactly at the CTI still counts: a retraction may lengthen it, because a
retraction only needs ``min(end, new_end) >= CTI``.) That set is exactly what a newcomer needs
to join the stream mid-way: :meth:`Publish.alive_snapshot` returns it as Inserts followed by
``Cti(current)``, a valid stream whose live continuation is the publisher's next messages.

Rows that end before the CTI are final; they are dropped, or kept in :attr:`Publish.closed`
with ``history=True`` (so :meth:`rows` returns the whole output CHT).

    >>> from operators.events import Insert, Retract, Cti
    >>> p = Publish("sink")
    >>> _ = p.process([Insert("a", 0, 3, "x"), Insert("b", 2, 9, "y"), Cti(5)])
    >>> p.alive_snapshot()
    [Insert(id='b', start=2, end=9, payload='y'), Cti(time=5)]
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable
from typing import Any

from operators.base import Processor
from operators.columns import expand
from operators.events import MIN_TIME, Cti, Insert, Message, Retract


class Publish(Processor):
    _state_fields = ("alive", "by_end", "cti", "closed")

    def __init__(self, name: str = "sink", history: bool = False) -> None:
        super().__init__(name)
        self.history = history
        #: id -> [start, end, payload] of the rows with end >= cti
        self.alive: dict[Hashable, list[Any]] = {}
        #: (end, seq, id) min-heap; stale entries (end changed) are skipped when popped
        self.by_end: list[tuple[int, int, Hashable]] = []
        self._seq = itertools.count()
        self._stale = 0
        self.cti = MIN_TIME
        #: final rows (end < cti), kept only with ``history=True``
        self.closed: list[tuple[int, int, Any]] = []

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        msgs = list(expand(batch))
        alive, heap, seq = self.alive, self.by_end, self._seq
        for m in msgs:
            kind = type(m)
            if kind is Insert:
                alive[m.id] = [m.start, m.end, m.payload]
                heapq.heappush(heap, (m.end, next(seq), m.id))
            elif kind is Retract:
                row = alive.get(m.id)
                if row is None:
                    continue
                self._stale += 1  # the heap entry of the old end is stale now
                if m.new_end == m.start:
                    del alive[m.id]
                else:
                    row[1] = m.new_end
                    heapq.heappush(heap, (m.new_end, next(seq), m.id))
            elif m.time > self.cti:  # type: ignore[union-attr]
                self.cti = m.time  # type: ignore[union-attr]
                self._prune()
        if self._stale > 2 * len(alive) + 1024:
            self._compact()
        return msgs

    def _compact(self) -> None:
        """Rebuild the end heap from the alive rows: entries of retracted ends (an edge event
        deleted at ∞, say) would otherwise stay until the CTI passes them."""
        seq = self._seq
        self.by_end = [(row[1], next(seq), eid) for eid, row in self.alive.items()]
        heapq.heapify(self.by_end)
        self._stale = 0

    def _prune(self) -> None:
        alive, heap, cti = self.alive, self.by_end, self.cti
        while heap and heap[0][0] < cti:
            end, _, eid = heapq.heappop(heap)
            row = alive.get(eid)
            if row is not None and row[1] == end:
                del alive[eid]
                if self.history:
                    self.closed.append((row[0], row[1], row[2]))

    def alive_snapshot(self) -> list[Message]:
        """The alive rows as Inserts (by start), then ``Cti(current)`` when there is one."""
        out: list[Message] = [Insert(i, s, e, p) for i, (s, e, p)
                              in sorted(self.alive.items(), key=lambda kv: kv[1][0])]
        if self.cti > MIN_TIME:
            out.append(Cti(self.cti))
        return out

    def rows(self) -> list[tuple[int, int, Any]]:
        """The output CHT held: the alive rows (and the final ones with ``history=True``)."""
        from operators.cht import row_key

        rows = self.closed + [(s, e, p) for s, e, p in self.alive.values()]
        return sorted(rows, key=row_key)

    def snapshot(self) -> dict[str, Any]:
        state = super().snapshot()
        state["_seq"] = next(self._seq)
        return state

    def restore(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self._seq = itertools.count(state.pop("_seq", 0))
        super().restore(state)

    def state_size(self) -> int:
        return len(self.alive)

    def _check(self) -> None:
        assert all(e >= self.cti for _, e, _ in self.alive.values())
        ends = {(e, i) for e, _, i in self.by_end}
        assert all((row[1], i) in ends for i, row in self.alive.items())
