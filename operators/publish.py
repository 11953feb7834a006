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
from collections.abc import Iterable
from itertools import chain
from typing import Any

from .cht import row_key
from .columns import Columns
from .events import MIN_TIME, Cti, Insert, Message, Retract
from .live import LiveEvents
from .payloads import same_payload
from .processor import Processor


class Publish(Processor):
    _state_fields = ("events", "closed")

    def __init__(self, name: str = "sink", history: bool = False) -> None:
        super().__init__(name)
        self.history = history
        #: the rows with end >= cti (the upstream operators checked the stream already)
        self.events = LiveEvents()
        #: final rows (end < cti), kept only with ``history=True``
        self.closed: list[tuple[int, int, Any]] = []
        #: restored from a savepoint into a query changed upstream of the sink
        #: (:func:`topology.running.upgrades.made_states`): see :meth:`_as_inserted`
        self.upgraded = False

    @property
    def cti(self) -> int:
        return self.events.cti

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        out: list[Message] = []
        events = self.events
        for m in batch:
            if type(m) is Columns:  # its rows stay columns in the live events and on the way
                events.insert_columns(m)
                out.append(m)
                continue
            if type(m) is Insert:
                events.insert(m)
            elif type(m) is Retract:
                if self.upgraded:
                    m = self._as_inserted(m)
                events.retract(m)
            elif type(m) is Cti and m.time > events.cti:
                final = events.advance_to(m.time, final=self.history)
                if self.history:
                    self.closed.extend((s, e, p) for _, s, e, p in final)
            out.append(m)
        return out

    def _as_inserted(self, m: Retract) -> Retract:
        """``m`` carrying the payload its row was inserted with. After an upgrade that
        changed a step upstream (a ``select`` after a speculative window), a row emitted
        before the cut is retracted through the new step, with a payload the new step
        made; its readers hold the old one, and a retraction repeats its insert's."""
        row = self.events.get(m.id)
        if row is None or same_payload(row[2], m.payload):
            return m
        return Retract(m.id, m.start, m.end, m.new_end, row[2])

    def snapshot(self) -> dict[str, Any]:
        state = super().snapshot()
        if self.upgraded:
            state["upgraded"] = True
        return state

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.upgraded = bool(state.get("upgraded", False))

    def alive_snapshot(self) -> list[Message]:
        """The alive rows as Inserts (by start), then ``Cti(current)`` when there is one."""
        out: list[Message] = [Insert(i, s, e, p) for i, s, e, p
                              in sorted(self.events.items(), key=lambda r: r[1])]
        if self.cti > MIN_TIME:
            out.append(Cti(self.cti))
        return out

    def rows(self) -> list[tuple[int, int, Any]]:
        """The output CHT held: the alive rows (and the final ones with ``history=True``)."""
        return sorted(self.closed + list(self.events.rows()), key=row_key)

    def newest(self, n: int) -> list[tuple[int, int, Any]]:
        """The ``n`` rows of :meth:`rows` that start last, ordered by start then end (the
        newest last), found without sorting the rest or comparing any payload."""
        rows = chain(self.closed, self.events.rows())
        return heapq.nlargest(n, rows, key=lambda r: (r[0], r[1]))[::-1]

    def state_size(self) -> int:
        return len(self.events)

    def _check(self) -> None:
        self.events.check()
