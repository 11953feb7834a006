"""``anti_join(other, on=(left_key, right_key))``: the left anti-semi-join ("where not exists").

The output holds, for every left event, the parts of its lifetime during which *no* right event
with an equal key is alive, with the left payload. ``on=None`` matches every right event::

    left    a: [0 ─────────────────────── 20)  k=1
    right   b:        [5 ──── 9)  k=1    c: [12 ─── 25)  k=1
    output  a: [0 ─ 5)         [9 ── 12)

A right event arriving later splits or removes earlier output by retraction: the fragment that
straddles its start is shortened, the rest re-emitted. Each fragment is a maximal piece of its
left event and has a fresh id from a counter (never reused).

    >>> from operators.events import Insert, Cti
    >>> a = AntiJoin()
    >>> a.process([Insert("a", 0, 20, "x")], 0)
    [Insert(id=0, start=0, end=20, payload='x')]
    >>> a.process([Insert("b", 5, 9, "y")], 1)
    [Retract(id=0, start=0, end=20, new_end=5, payload='x'), \
Insert(id=1, start=9, end=20, payload='x')]

**Recomputing from a time.** A message that changes input at or after time ``T`` (an insert at
its start, a retraction at ``min(end, new_end)``) cannot change the output before ``T``. So
for each affected left event the fragments before ``T`` are kept as they are, the uncovered
parts of ``[T, end)`` are computed from the right events alive after ``T``, and the two are
joined into maximal fragments. The difference to the old fragments is emitted: a fragment that
keeps its start changes its end (a retraction at or after ``T``), the others are retracted or
inserted (starting at or after ``T``). Hence every output change is at or after the changing
input's CTI, and the output CTI is ``min(left CTI, right CTI)``.

**Freeing state** follows the join's rule (:mod:`operators.join`): an event of input A is
dropped once ``end < CTI_A and end <= CTI_B``. A freed left event's fragments are final; a
freed right event ends at or before every later ``T``, so no recomputation needs it.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Any

from .events import Insert, Message, Retract
from .temporal import END, KEY, LINKS, PAYLOAD, START, BinaryTemporal

# a fragment (one output event): [start, end, out_id]; a left record keeps its fragments,
# sorted by start, in rec[LINKS]; a right record has None there
F_START, F_END, F_ID = range(3)


class AntiJoin(BinaryTemporal):
    """Input 0 (left) minus input 1 (right) over time, per key; see the module docstring.

    ``on=(left_key, right_key)``: field names or functions of the payload; ``None``: a left
    event is output wherever no right event at all is alive.
    """

    _state_fields = (*BinaryTemporal._state_fields, "n_frags", "final_heap")

    def __init__(self, on: Any = None, name: str | None = None) -> None:
        super().__init__(on, "anti_join", name)
        self.n_frags = 0
        #: (end of the first fragment, left seq): finds the fragments the CTIs made final
        self.final_heap: list[tuple[int, int]] = []

    # -- the uncovered parts of a left event ------------------------------------------------
    def _holes(self, key: Any, lo: int, hi: int) -> list[tuple[int, int]]:
        """The lifetimes of the right events of ``key`` that overlap ``[lo, hi)``, sorted."""
        recs = self.recs
        return sorted((recs[s][START], recs[s][END])
                      for s in self.index[1].overlapping(key, lo, hi, recs))

    def _recompute(self, seq: int, rec: list[Any], time: int, out: list[Message]) -> None:
        """Bring the fragments of left event ``rec`` up to date after a change at ``time``."""
        start, end = rec[START], rec[END]
        t = max(start, time)
        old = rec[LINKS]
        first_end = old[0][F_END] if old else None
        new: list[list[int]] = [[fs, min(t, fe)] for fs, fe, _ in old if fs < t]
        if t < end:
            for hs, he in self._holes(rec[KEY], t, end):
                if hs > t:
                    self._extend(new, t, hs)
                if he > t:
                    t = he
                    if t >= end:
                        break
            if t < end:
                self._extend(new, t, end)
        by_start = {f[F_START]: f for f in old}
        kept = {fs for fs, _ in new}
        payload = rec[PAYLOAD]
        for f in old:
            if f[F_START] not in kept:
                out.append(Retract(f[F_ID], f[F_START], f[F_END], f[F_START], payload))
                self.n_frags -= 1
        frags = []
        for fs, fe in new:
            f = by_start.get(fs)
            if f is None:
                f = [fs, fe, self._mint()]
                out.append(Insert(f[F_ID], fs, fe, payload))
                self.n_frags += 1
            elif f[F_END] != fe:
                out.append(Retract(f[F_ID], fs, f[F_END], fe, payload))
                f[F_END] = fe
            frags.append(f)
        rec[LINKS] = frags
        if frags and frags[0][F_END] != first_end:
            heappush(self.final_heap, (frags[0][F_END], seq))

    @staticmethod
    def _extend(pieces: list[list[int]], start: int, end: int) -> None:
        if pieces and pieces[-1][1] == start:
            pieces[-1][1] = end
        else:
            pieces.append([start, end])

    def _recompute_left(self, key: Any, lo: int, hi: int, out: list[Message]) -> None:
        """Recompute every left event of ``key`` overlapping ``[lo, hi)`` from ``lo``."""
        recs = self.recs
        for seq in self.index[0].overlapping(key, lo, hi, recs):
            self._recompute(seq, recs[seq], lo, out)

    # -- messages -------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        out: list[Message] = []
        if port == 0:
            seq, rec = self._add(msg, 0, [])
            self._recompute(seq, rec, msg.start, out)
        else:
            _, rec = self._add(msg, 1, None)
            self._recompute_left(rec[KEY], msg.start, msg.end, out)
        return out

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        seq, rec = self._find(msg, port)
        out: list[Message] = []
        full = msg.new_end == msg.start
        if full:
            self._delete(port, seq, rec)
        else:
            self._set_end(port, seq, rec, msg.new_end)
        if port == 0:
            if full:
                for fs, fe, oid in rec[LINKS]:
                    out.append(Retract(oid, fs, fe, fs, rec[PAYLOAD]))
                self.n_frags -= len(rec[LINKS])
            else:
                self._recompute(seq, rec, msg.sync_time, out)
        else:
            lo, hi = (msg.new_end, msg.end) if msg.new_end < msg.end else (msg.end, msg.new_end)
            self._recompute_left(rec[KEY], lo, hi, out)
        return out

    # -- state ----------------------------------------------------------------------------
    def on_cti(self, time: int, port: int) -> list[Message]:
        out = super().on_cti(time, port)
        self._forget_final()
        return out

    def _forget_final(self) -> None:
        """Forget the fragments that end before both CTIs: every later change is at or after
        one of them, so a fragment ending before is neither cut nor lengthened any more (and
        its left event can no longer be deleted: it started before that CTI too)."""
        low = self.in_cti
        heap, recs = self.final_heap, self.recs
        while heap and heap[0][0] < low:
            first_end, seq = heappop(heap)
            rec = recs.get(seq)
            frags = None if rec is None else rec[LINKS]
            if not frags or frags[0][F_END] != first_end:
                continue  # stale: the event or its first fragment changed since
            n = 0
            while n < len(frags) and frags[n][F_END] < low:
                n += 1
            del frags[:n]
            self.n_frags -= n
            if frags:
                heappush(heap, (frags[0][F_END], seq))
        if len(heap) > 2 * len(self.ids[0]) + 64:
            self.final_heap = [(recs[s][LINKS][0][F_END], s) for s in self.ids[0].values()
                               if recs[s][LINKS]]
            heapify(self.final_heap)

    def _dropped(self, port: int, seq: int, rec: list[Any]) -> None:
        if port == 0:
            self.n_frags -= len(rec[LINKS])  # final

    def state_size(self) -> int:
        """Live events held on both inputs plus the output fragments that may still change."""
        return len(self.recs) + self.n_frags

    def _check(self) -> None:
        self._check_events()
        n = 0
        low = self.in_cti
        tracked = {s for e, s in self.final_heap
                   if s in self.recs and self.recs[s][LINKS] and self.recs[s][LINKS][0][F_END] == e}
        for seq in self.ids[0].values():
            rec = self.recs[seq]
            frags = rec[LINKS]
            n += len(frags)
            assert not frags or seq in tracked, "the first fragment's end is in the heap"
            for i, (fs, fe, _) in enumerate(frags):
                assert rec[START] <= fs < fe <= rec[END]
                assert fe >= low, "final fragments are forgotten"
                if i:
                    assert frags[i - 1][F_END] < fs, "fragments are maximal and sorted"
        assert n == self.n_frags
        assert all(self.recs[s][LINKS] is None for s in self.ids[1].values())
