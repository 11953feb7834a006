"""Live events: the one structure behind every "rows not final yet" in cedar.

A stream's live events are those a retraction may still change. After ``Cti(c)`` a
retraction needs ``min(end, new_end) >= c`` (docs/model.md), so an event ending before ``c``
is final. :class:`LiveEvents` keeps the live events by id and a lazy min-heap of their ends:
:meth:`~LiveEvents.insert` and :meth:`~LiveEvents.retract` apply a message after checking it
against the rules of physical streams (they return the problem, in the words of
:class:`~operators.cht.StreamValidator`, or None), and :meth:`~LiveEvents.advance_to` returns
what a CTI made final. A heap entry whose event was deleted or re-ended is skipped when it
surfaces, and the heap is rebuilt when stale entries outnumber live ones, so an end retracted
at ∞ costs nothing for ever::

    >>> from operators.events import Insert, Retract
    >>> ev = LiveEvents()
    >>> ev.insert(Insert("a", 0, 3, "x")), ev.insert(Insert("b", 2, 9, "y"))
    (None, None)
    >>> ev.retract(Retract("b", 2, 9, 5, "y"))
    >>> ev.advance_to(4), sorted(ev.rows())
    ([('a', 0, 3, 'x')], [(2, 5, 'y')])

A column batch of inserts that an upstream operator has already checked can be added as it is
(:meth:`~LiveEvents.insert_columns`): its rows stay columns, a CTI frees the final ones with
one comparison per batch, and only a message that needs them one by one (an insert or a
retraction) turns them into live events.

Used by the stream validator and :func:`~operators.cht.to_cht`, the query sink
(:class:`operators.publish.Publish`), the Spark sink of final rows and ``group_apply``; the temporal
joins keep their events in a keyed interval index and use :class:`ExpiryHeap`, the same lazy
heap, to free them.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterator
from typing import Any

from .columns import Columns
from .events import MAX_TIME, MIN_TIME, Insert, Retract, fmt_time
from .payloads import same_payload

Row = tuple[Hashable, int, int, Any]  # (id, start, end, payload)

# a live event: [start, end, payload, seq of its heap entry]
_START, _END, _PAYLOAD, _SEQ = range(4)


class LiveEvents:
    """The live events of one stream, by id, with their ends in a lazy heap."""

    __slots__ = ("by_end", "chunks", "cti", "live", "seq")

    def __init__(self) -> None:
        #: id -> [start, end, payload, seq]
        self.live: dict[Hashable, list[Any]] = {}
        #: (end, seq, id) min-heap; an entry whose seq is not its event's is stale
        self.by_end: list[tuple[int, int, Hashable]] = []
        self.seq = 0
        #: the latest CTI passed to :meth:`advance_to`
        self.cti = MIN_TIME
        #: live events added by :meth:`insert_columns`, still as column batches
        self.chunks: list[Columns] = []

    def __len__(self) -> int:
        return len(self.live) + sum(map(len, self.chunks))

    def __contains__(self, eid: Hashable) -> bool:
        self._unchunk()
        return eid in self.live

    def get(self, eid: Hashable) -> list[Any] | None:
        """The live event ``eid`` as ``[start, end, payload, seq]`` (do not change it)."""
        self._unchunk()
        return self.live.get(eid)

    def rows(self) -> Iterator[tuple[int, int, Any]]:
        """The live events as ``(start, end, payload)``."""
        return ((s, e, p) for _, s, e, p in self.items())

    def items(self) -> Iterator[Row]:
        """The live events as ``(id, start, end, payload)``."""
        for c in self.chunks:
            yield from _rows(c)
        yield from ((i, r[_START], r[_END], r[_PAYLOAD]) for i, r in self.live.items())

    def insert_columns(self, cols: Columns) -> None:
        """Add a column batch of inserts that an upstream operator has already checked (no
        duplicate-id or CTI checks here): its rows stay columns until a message needs them
        one by one."""
        if len(cols):
            self.chunks.append(cols)

    def _unchunk(self) -> None:
        chunks, self.chunks = self.chunks, []
        for c in chunks:
            for eid, s, e, p in _rows(c):
                self.seq += 1
                self.live[eid] = [s, e, p, self.seq]
                heapq.heappush(self.by_end, (e, self.seq, eid))

    # -- messages ----------------------------------------------------------------------------
    def insert(self, msg: Insert) -> str | None:
        """Add ``msg``'s event; or say why it cannot be added (nothing changes then)."""
        if self.chunks:
            self._unchunk()
        if msg.start < self.cti:
            return f"insert starts at {fmt_time(msg.start)}, behind the CTI {fmt_time(self.cti)}"
        if msg.id in self.live:
            return f"duplicate id {msg.id!r}; ids must be unique within a stream"
        self.seq += 1
        self.live[msg.id] = [msg.start, msg.end, msg.payload, self.seq]
        heapq.heappush(self.by_end, (msg.end, self.seq, msg.id))
        return None

    def retract(self, msg: Retract) -> str | None:
        """Apply ``msg`` to its live event; or say why it cannot be (nothing changes then)."""
        if self.chunks:
            self._unchunk()
        row = self.live.get(msg.id)
        if row is None:
            return (f"retraction of unknown id {msg.id!r} (never inserted, already fully "
                    f"retracted, or final: ended before the CTI)")
        start, end, payload = row[_START], row[_END], row[_PAYLOAD]
        if start != msg.start or end != msg.end:
            return (f"retraction lifetime [{fmt_time(msg.start)}, {fmt_time(msg.end)}) does "
                    f"not match the live event [{fmt_time(start)}, {fmt_time(end)})")
        if not same_payload(msg.payload, payload):
            return (f"retraction payload {msg.payload!r} is not the payload {payload!r} its "
                    f"insert carried; a retraction repeats its insert's payload (change a "
                    f"payload by retracting the event fully and inserting a new one)")
        if msg.sync_time < self.cti:
            return (f"retraction changes time {fmt_time(msg.sync_time)}, behind the CTI "
                    f"{fmt_time(self.cti)}")
        if msg.new_end == msg.start:
            del self.live[msg.id]
        else:
            self.seq += 1
            row[_END], row[_SEQ] = msg.new_end, self.seq
            heapq.heappush(self.by_end, (msg.new_end, self.seq, msg.id))
        if len(self.by_end) > 2 * len(self.live) + 64:
            self._compact()
        return None

    def advance_to(self, cti: int, final: bool = True) -> list[Row]:
        """Move to ``cti`` (a CTI that goes back is the caller's to reject) and return, by end,
        the events it made final: those ending before it (with ``final=False`` they are only
        freed: nothing is built for them). ``Cti(MAX_TIME)`` leaves open events live: use
        :meth:`drain` when the stream is over."""
        if cti > self.cti:
            self.cti = cti
        out: list[Row] = []
        if self.chunks:
            kept = []
            for c in self.chunks:
                done = c.ends < cti
                if not done.any():
                    kept.append(c)
                    continue
                if final:
                    out.extend(_rows(c.take(done)))
                if not done.all():
                    kept.append(c.take(~done))
            self.chunks = kept
        mixed = bool(out)  # chunk rows first: sort by end below
        heap, live = self.by_end, self.live
        while heap and heap[0][0] < cti:
            end, seq, eid = heapq.heappop(heap)
            row = live.get(eid)
            if row is not None and row[_SEQ] == seq:
                del live[eid]
                if final:
                    out.append((eid, row[_START], end, row[_PAYLOAD]))
        if mixed:
            out.sort(key=lambda r: r[2])
        return out

    def drain(self) -> list[Row]:
        """Every live event, by end (the stream is over: all of them are final)."""
        self._unchunk()
        self.cti = MAX_TIME
        out = sorted(self.items(), key=lambda r: (r[2], r[1]))
        self.live.clear()
        self.by_end.clear()
        return out

    def _compact(self) -> None:
        self.by_end = [(r[_END], r[_SEQ], eid) for eid, r in self.live.items()]
        heapq.heapify(self.by_end)

    def check(self) -> None:
        """Assert the invariants (tests)."""
        for c in self.chunks:
            assert len(c) and bool((c.ends >= self.cti).all()) and bool((c.ends > c.starts).all())
        entries = set(self.by_end)
        for eid, (s, e, _, seq) in self.live.items():
            assert s < e and e >= self.cti, (eid, s, e, self.cti)
            assert (e, seq, eid) in entries, eid


def _rows(c: Columns) -> Iterator[Row]:
    """A column batch's events as ``(id, start, end, payload)``."""
    return zip(c.ids.tolist(), c.starts.tolist(), c.ends.tolist(), c.payloads())


class ExpiryHeap:
    """Events by end time, to free them when the CTIs pass, for an operator that keeps its
    events as records in a dict by sequence number (the temporal joins, ``group_apply``): the
    same lazy heap as :class:`LiveEvents`, whose entries are checked against the record's end
    (``rec[end_field]``) when they surface, rebuilt when stale entries outnumber live ones."""

    __slots__ = ("end_field", "heap")

    def __init__(self, end_field: int) -> None:
        self.end_field = end_field
        self.heap: list[tuple[int, int]] = []

    def push(self, end: int, seq: int) -> None:
        heapq.heappush(self.heap, (end, seq))

    def pop_before(self, time: int, recs: dict[int, list[Any]]) -> Iterator[int]:
        """Yield (and forget) the seqs of live records whose end is before ``time``."""
        heap, field = self.heap, self.end_field
        while heap and heap[0][0] < time:
            end, seq = heapq.heappop(heap)
            rec = recs.get(seq)
            if rec is not None and rec[field] == end:
                yield seq

    def compact(self, live: dict[Hashable, int], recs: dict[int, list[Any]]) -> None:
        """Rebuild from the live records (``live``: id -> seq) when stale entries dominate
        (amortised O(1))."""
        if len(self.heap) > 2 * len(live) + 64:
            self.heap = [(recs[seq][self.end_field], seq) for seq in live.values()]
            heapq.heapify(self.heap)
