"""The machinery the two-input temporal operators share (:mod:`operators.join`,
:mod:`operators.anti_join`, and :mod:`operators.left_join` through them): the key functions of
``on=``, the event record layout (also ``group_apply``'s), :class:`KeyedIntervals` (one input's
live events hashed by key and indexed by time) and :class:`BinaryTemporal` (both inputs, their
merged CTIs, and freeing by the rule in :mod:`operators.join`'s docstring)."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Hashable
from typing import Any, ClassVar

from sortedcontainers import SortedList

from .columns import payload_list
from .events import MAX_TIME, MIN_TIME, Insert, Message, Retract, fmt_time
from .live import ExpiryHeap
from .processor import Processor
from .udm import field_getter

KeyFn = Callable[[Any], Hashable]

# an event record: [id, key, start, end, payload, links]; links maps the sequence number of
# each partner event (on the other input) to the shared pair [out_id, start, end, payload]
ID, KEY, START, END, PAYLOAD, LINKS = range(6)
# a pair (one output event)
P_ID, P_START, P_END, P_PAYLOAD = range(4)

_CROSS_KEY = None  # the only key of the cross join


def key_functions(on: Any, where: str) -> tuple[KeyFn, KeyFn]:
    """The ``(left_key, right_key)`` functions of ``on=(left_key, right_key)``: each a
    callable of the payload or a field name; ``on=None`` (cross join) keys everything alike."""
    if on is None:
        def const(payload: Any) -> Hashable:
            return _CROSS_KEY
        return const, const
    if not isinstance(on, (tuple, list)) or len(on) != 2:
        raise ValueError(
            f"{where}: on must be a pair (left_key, right_key) of field names or functions of "
            f"the payload, e.g. on=('meter', 'meter'), or None for a cross join; got {on!r}"
        )
    return field_getter(on[0]), field_getter(on[1])


def find_live(msg: Retract, ids: dict[Hashable, int], recs: dict[int, list[Any]],
              where: str = "") -> tuple[int, list[Any]]:
    """The ``(seq, record)`` of the live event ``msg`` retracts (``ids``: user id -> seq), or
    a ValueError saying why it matches none."""
    seq = ids.get(msg.id)
    rec = None if seq is None else recs[seq]
    if seq is None or rec is None or rec[START] != msg.start or rec[END] != msg.end:
        live = "" if rec is None else f" (it lives [{rec[START]}, {fmt_time(rec[END])}))"
        raise ValueError(f"retraction {msg!r}{where} does not match a live event{live}; "
                         f"retract an event with its current lifetime, at or after the CTI")
    return seq, rec


class KeyedIntervals:
    """The live events of one input, hashed by key; within a key, indexed by start and by end.

    Entries are ``(time, seq)`` tuples: ``seq`` is unique, so user ids (which need not be
    comparable) never take part in a comparison. ``recs`` maps seq to the event record (its
    start and end are read at ``START`` / ``END``) and is shared with the operator.

    A key's two sorted lists are plain lists (C-level bisect and insort, cheap to create and
    drop for the many small keys of a high-cardinality join) until they hold ``SMALL`` entries,
    and ``SortedList`` (O(log n) inserts and deletes) beyond.
    """

    SMALL = 512

    def __init__(self) -> None:
        #: key -> [by_start, by_end]
        self.buckets: dict[Hashable, list[Any]] = {}

    def add(self, key: Hashable, seq: int, start: int, end: int) -> None:
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [[(start, seq)], [(end, seq)]]
            return
        by_start, by_end = bucket
        if type(by_start) is list:
            if len(by_start) < self.SMALL:
                insort(by_start, (start, seq))
                insort(by_end, (end, seq))
                return
            bucket[0] = by_start = SortedList(by_start)
            bucket[1] = by_end = SortedList(by_end)
        by_start.add((start, seq))
        by_end.add((end, seq))

    def remove(self, key: Hashable, seq: int, start: int, end: int) -> None:
        by_start, by_end = self.buckets[key]
        if len(by_start) == 1:
            del self.buckets[key]
        elif type(by_start) is list:
            del by_start[bisect_left(by_start, (start, seq))]
            del by_end[bisect_left(by_end, (end, seq))]
        else:
            by_start.remove((start, seq))
            by_end.remove((end, seq))

    def move_end(self, key: Hashable, seq: int, old_end: int, new_end: int) -> None:
        by_end = self.buckets[key][1]
        if type(by_end) is list:
            del by_end[bisect_left(by_end, (old_end, seq))]
            insort(by_end, (new_end, seq))
        else:
            by_end.remove((old_end, seq))
            by_end.add((new_end, seq))

    def overlapping(self, key: Hashable, start: int, end: int, recs: dict[int, list[Any]]
                    ) -> list[int]:
        """Seqs of the events of ``key`` whose lifetime overlaps ``[start, end)``: walks the
        smaller of {start < end} (by start) and {end > start} (by end)."""
        bucket = self.buckets.get(key)
        if bucket is None:
            return []
        by_start, by_end = bucket
        if type(by_start) is list:
            i = bisect_left(by_start, (end,))  # by_start[:i] start before `end`
            j = bisect_left(by_end, (start + 1,))  # by_end[j:] end after `start`
            if i <= len(by_end) - j:
                return [seq for _, seq in by_start[:i] if recs[seq][END] > start]
            return [seq for _, seq in by_end[j:] if recs[seq][START] < end]
        i = by_start.bisect_left((end,))
        j = by_end.bisect_left((start + 1,))
        if i <= len(by_end) - j:
            return [seq for _, seq in by_start.islice(0, i) if recs[seq][END] > start]
        return [seq for _, seq in by_end.islice(j) if recs[seq][START] < end]

    def starting_in(self, key: Hashable, lo: int, hi: int) -> list[int]:
        """Seqs of the events of ``key`` that start in ``[lo, hi)``."""
        bucket = self.buckets.get(key)
        if bucket is None:
            return []
        by_start = bucket[0]
        if type(by_start) is list:
            return [seq for _, seq in
                    by_start[bisect_left(by_start, (lo,)):bisect_left(by_start, (hi,))]]
        return [seq for _, seq in by_start.irange((lo,), (hi,), inclusive=(True, False))]

    def __len__(self) -> int:
        return sum(len(b[0]) for b in self.buckets.values())

    def check(self, recs: dict[int, list[Any]], seqs: set[int]) -> None:
        """Assert that the index holds exactly ``seqs`` with their current times."""
        found = set()
        for key, (by_start, by_end) in self.buckets.items():
            assert by_start, f"empty bucket for key {key!r} was not deleted"
            assert len(by_start) == len(by_end)
            assert type(by_start) is type(by_end)
            assert list(by_start) == sorted(by_start) and list(by_end) == sorted(by_end)
            for start, seq in by_start:
                assert recs[seq][KEY] is key or recs[seq][KEY] == key  # (a NaN key: itself)
                assert recs[seq][START] == start
                found.add(seq)
            for end, seq in by_end:
                assert recs[seq][END] == end
        assert found == seqs, (found, seqs)


class BinaryTemporal(Processor):
    """Shared state of the two-input temporal operators (join, anti-join): the live events
    of each input hashed by key and indexed by time, freed on CTIs (see the module docstring
    for the rule). Subclasses keep their per-event output in ``rec[LINKS]`` and override
    :meth:`_dropped` to release it."""

    n_inputs = 2
    _state_fields: ClassVar[tuple[str, ...]] = (
        "recs", "ids", "index", "expiry", "next_seq", "next_out")

    def __init__(self, on: Any, where: str, name: str | None) -> None:
        super().__init__(name)
        self.keys = key_functions(on, where)
        #: seq -> event record (both inputs share the numbering)
        self.recs: dict[int, list[Any]] = {}
        #: per input: user id -> seq of its live event
        self.ids: tuple[dict[Hashable, int], dict[Hashable, int]] = ({}, {})
        self.index = (KeyedIntervals(), KeyedIntervals())
        self.expiry = (ExpiryHeap(END), ExpiryHeap(END))
        self.next_seq = 0
        #: the next output id (a counter: ids are never reused)
        self.next_out = 0

    # -- events ---------------------------------------------------------------------------
    def _add(self, msg: Insert, port: int, links: Any) -> tuple[int, list[Any]]:
        id, start, end, payload = msg
        ids = self.ids[port]
        if id in ids:
            raise ValueError(f"duplicate id {id!r} on input {port}: it is still live; "
                             f"ids must be unique within a stream")
        key = self.keys[port](payload)
        seq = self.next_seq
        self.next_seq = seq + 1
        rec = [id, key, start, end, payload, links]
        self.recs[seq] = rec
        ids[id] = seq
        self.index[port].add(key, seq, start, end)
        heapq.heappush(self.expiry[port].heap, (end, seq))
        return seq, rec

    def _adopt(self, sides: Any, keys: list[Hashable], fragments: bool = False) -> None:
        """Make the live events a column-wise state held as arrays (one
        :class:`~operators.two_input_columns.ColumnEvents` per input, key codes into ``keys``)
        records, index entries and expiry entries, as if every event had arrived alone; with
        ``fragments`` the left records start with an empty list of fragments (the
        anti-join's), else without links."""
        recs = self.recs
        for port, side in enumerate(sides):
            if not len(side):
                continue
            ids, index, expiry = self.ids[port], self.index[port], self.expiry[port]
            lists = fragments and port == 0
            for seq, code, s, e, eid, p in zip(
                    side.seq.tolist(), side.code.tolist(), side.start.tolist(),
                    side.end.tolist(), side.ids.tolist(), payload_list(side.payload)):
                key = keys[code]
                recs[seq] = [eid, key, s, e, p, [] if lists else None]
                ids[eid] = seq
                index.add(key, seq, s, e)
                expiry.push(e, seq)

    def _find(self, msg: Retract, port: int) -> tuple[int, list[Any]]:
        return find_live(msg, self.ids[port], self.recs, f" on input {port}")

    def _delete(self, port: int, seq: int, rec: list[Any]) -> None:
        del self.ids[port][rec[ID]]
        del self.recs[seq]
        self.index[port].remove(rec[KEY], seq, rec[START], rec[END])

    def _set_end(self, port: int, seq: int, rec: list[Any], end: int) -> None:
        self.index[port].move_end(rec[KEY], seq, rec[END], end)
        rec[END] = end
        expiry = self.expiry[port]
        expiry.push(end, seq)
        expiry.compact(self.ids[port], self.recs)

    def _mint(self) -> int:
        oid = self.next_out
        self.next_out = oid + 1
        return oid

    def key_functions(self) -> tuple[KeyFn, KeyFn]:
        return self.keys

    # -- CTIs and freeing -----------------------------------------------------------------
    def on_cti(self, time: int, port: int) -> list[Message]:
        self._free()
        return self.emit_cti(self.in_cti)

    def on_end_input(self, port: int) -> list[Message]:
        """One input ended, the other is open: the output CTI follows the open input alone
        (every later output change comes from its messages, at or after its CTI), and what
        the ended input can no longer change or match is freed (:meth:`_limit`)."""
        return self.on_cti(self.in_cti, port)

    def finish(self) -> list[Message]:
        """Both inputs have ended: nothing can change any more, so the output CTI moves up
        to the furthest input's, as a union's does (whichever input ended last)."""
        return self.emit_cti(max(self.in_ctis or [self.out_cti]))

    def _limit(self, port: int) -> int:
        """Events of ``port`` (input A; B is the other) ending before this are freed:
        ``min(CTI_A, CTI_B + 1)``, where an input that ended counts as ``MAX_TIME``: an ended
        A retracts no end any more, an ended B sends no event that could match."""
        ctis = self.in_ctis or (MIN_TIME, MIN_TIME)
        own, other = ctis[port], ctis[1 - port]
        ended = self.in_ended
        if ended:
            if port in ended:
                own = MAX_TIME
            if 1 - port in ended:
                other = MAX_TIME
        return own if own <= other else other + 1

    def _free(self) -> None:
        """Drop the events no future message can make produce or change output (an event of
        input A with ``end < CTI_A and end <= CTI_B``), and the output state they own."""
        recs = self.recs
        heappop = heapq.heappop
        for port in (0, 1):
            limit = self._limit(port)
            heap = self.expiry[port].heap
            ids, remove = self.ids[port], self.index[port].remove
            while heap and heap[0][0] < limit:
                end, seq = heappop(heap)
                rec = recs.get(seq)
                if rec is None or rec[END] != end:
                    continue  # a stale entry: the event was deleted or its end moved
                del recs[seq]
                del ids[rec[ID]]
                remove(rec[KEY], seq, rec[START], end)
                if rec[LINKS]:
                    self._dropped(port, seq, rec)

    def _dropped(self, port: int, seq: int, rec: list[Any]) -> None:
        """Release the output state of a freed event (its output is final); called only when
        ``rec[LINKS]`` is not empty."""

    def _check_events(self) -> None:
        recs = self.recs
        for port in (0, 1):
            seqs = set(self.ids[port].values())
            assert len(seqs) == len(self.ids[port])
            self.index[port].check(recs, seqs)
            limit = self._limit(port)
            heap_seqs = {s for e, s in self.expiry[port].heap if s in recs and recs[s][END] == e}
            assert heap_seqs == seqs, "every live event is in the expiry heap at its end"
            for id, seq in self.ids[port].items():
                rec = recs[seq]
                assert rec[ID] == id and rec[END] > rec[START]
                assert rec[END] >= limit, f"event {id!r} should have been freed"
        assert len(recs) == len(self.ids[0]) + len(self.ids[1])
