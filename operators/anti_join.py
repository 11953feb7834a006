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
input's CTI, and the output CTI is ``min(left CTI, right CTI)``; once one input has ended,
the open input's CTI (as the join's, :mod:`operators.join`).

**Column batches.** While only :class:`~operators.columns.Columns` batches have arrived, both
inputs' live events and the fragments that may still change are arrays (as the join's, in
:mod:`operators.two_input_columns`) and a batch is handled all at once. A left batch: its
events' overlaps with the live right events of their key (one vectorised search), and their
fragments by :func:`~operators.two_input_columns.uncovered`, emitted as one ``Columns``
batch. A right batch: the fragments it overlaps (the same search over the fragments), each
cut by the new right events (``uncovered`` again); a cut fragment keeps its id where it keeps
its start (a retraction of its end), else is retracted, and the new pieces are one ``Columns``
batch. This gives the per-event path's fragments: they are always the maximal pieces of a left
event that no right event covers, and the parts recomputed from ``T`` there are exactly the
old fragments minus the new right events. The first message that is not such a batch (a
retraction, a single insert, a batch the arrays cannot hold exactly) turns the arrays into the
per-event state, as if every event had arrived alone, and the anti-join goes on event by event.

**Freeing state** follows the join's rule (:mod:`operators.join`): an event of input A is
dropped once ``end < CTI_A and end <= CTI_B``. A freed left event's fragments are final; a
freed right event ends at or before every later ``T``, so no recomputation needs it. An
ended input counts as ``CTI = MAX_TIME`` there (the join's rule).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Any

import numpy as np

from .columns import Columns, map_columns, payload_list
from .events import Insert, Message, Retract
from .expr import evaluate, trace
from .two_input import END, KEY, LINKS, PAYLOAD, START, BinaryTemporal
from .two_input_columns import (
    ColumnEvents,
    KeyCodes,
    by_key_and_start,
    overlapping_pairs,
    uncovered,
)

# a fragment (one output event): [start, end, out_id]; a left record keeps its fragments,
# sorted by start, in rec[LINKS]; a right record has None there
F_START, F_END, F_ID = range(3)

_EMPTY = np.zeros(0, dtype=np.int64)
_new = tuple.__new__


class ColumnFragments:
    """An anti-join's state while only column batches have arrived: each input's live events
    (:class:`~operators.two_input_columns.ColumnEvents`) and the fragments that may still
    change, as arrays (output id, left seq, key code, start, end) sorted by left seq and
    start."""

    def __init__(self) -> None:
        self.sides = (ColumnEvents(), ColumnEvents())
        self.codes = KeyCodes()
        self.fid, self.lseq, self.code, self.start, self.end = (_EMPTY,) * 5

    def __len__(self) -> int:
        return len(self.fid)

    def columns(self) -> tuple[np.ndarray, ...]:
        return self.fid, self.lseq, self.code, self.start, self.end

    def set(self, keep: np.ndarray | None, *new: np.ndarray) -> None:
        """Keep the fragments where ``keep`` is true (all: None), add ``new`` (the same five
        columns) and sort again by left seq and start."""
        old = self.columns()
        if keep is not None:
            old = tuple(c[keep] for c in old)
        cols = tuple(np.concatenate([a, b]) for a, b in zip(old, new)) if len(new[0]) else old
        if keep is not None:  # (appended new left events' fragments are in order already)
            order = np.lexsort((cols[3], cols[1]))
            cols = tuple(c[order] for c in cols)
        self.fid, self.lseq, self.code, self.start, self.end = cols

    def free(self, limits: tuple[int, int], low: int) -> None:
        """Free the events ending before their input's limit, the fragments of the freed left
        events and those ending before ``low`` (both CTIs): all of them are final."""
        for side, limit in zip(self.sides, limits):
            side.keep(side.end >= limit)
        keep = (self.end >= low) & np.isin(self.lseq, self.sides[0].seq)
        if not keep.all():
            self.fid, self.lseq, self.code, self.start, self.end = (
                c[keep] for c in self.columns())

    def check(self, limits: tuple[int, int], low: int) -> None:
        left = self.sides[0]
        for side, limit in zip(self.sides, limits):
            side.check()
            assert (side.end >= limit).all(), "an event that should have been freed"
        assert len(set(self.fid.tolist())) == len(self.fid)
        pos = np.searchsorted(left.seq, self.lseq)
        assert (left.seq[pos] == self.lseq).all(), "a fragment of a freed left event"
        assert (self.code == left.code[pos]).all()
        assert (left.start[pos] <= self.start).all() and (self.end <= left.end[pos]).all()
        assert (self.start < self.end).all() and (self.end >= low).all()
        same = self.lseq[1:] == self.lseq[:-1]
        assert (self.lseq[1:] >= self.lseq[:-1]).all()
        assert (self.end[:-1][same] < self.start[1:][same]).all(), "maximal and sorted"


class AntiJoin(BinaryTemporal):
    """Input 0 (left) minus input 1 (right) over time, per key; see the module docstring.

    ``on=(left_key, right_key)``: field names or functions of the payload; ``None``: a left
    event is output wherever no right event at all is alive.
    """

    _state_fields = (*BinaryTemporal._state_fields, "n_frags", "final_heap", "columns")

    def __init__(self, on: Any = None, name: str | None = None) -> None:
        super().__init__(on, "anti_join", name)
        self.n_frags = 0
        #: (end of the first fragment, left seq): finds the fragments the CTIs made final
        self.final_heap: list[tuple[int, int]] = []
        #: the column-wise state while only column batches have arrived (None: per event)
        self.columns: ColumnFragments | None = ColumnFragments()
        self._key_exprs = (trace(self.keys[0]), trace(self.keys[1]))

    # -- column batches -------------------------------------------------------------------
    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        if self.columns is not None:
            if not len(msg):
                return []
            out = (self._left_columns if port == 0 else self._right_columns)(msg, self.columns)
            if out is not None:
                return out
            self._leave_columns()
        return super().on_columns(msg, port)

    def _codes(self, msg: Columns, port: int, state: ColumnFragments) -> np.ndarray | None:
        keys = evaluate(self._key_exprs[port], msg.payload, len(msg))
        return state.codes.encode(keys) if isinstance(keys, np.ndarray) else None

    def _left_columns(self, msg: Columns, state: ColumnFragments) -> list[Message] | None:
        """New left events: their fragments, one Columns batch; None (nothing changed) when
        the arrays cannot take the batch exactly."""
        codes = self._codes(msg, 0, state)
        if codes is None:
            return None
        starts, ends = msg.starts.astype(np.int64), msg.ends.astype(np.int64)
        right = state.sides[1]
        found = overlapping_pairs(right, codes, starts, ends)
        if found is None:
            return None
        i, j = found
        g, fs, fe = uncovered(starts, ends, i, right.start[j], right.end[j])
        n = len(msg)
        seqs = np.arange(self.next_seq, self.next_seq + n, dtype=np.int64)
        if not state.sides[0].append(seqs, codes, starts, ends, msg.id_column, msg.payload):
            return None
        self.next_seq += n
        count = len(g)
        if not count:
            return []
        fid = np.arange(self.next_out, self.next_out + count, dtype=np.int64)
        self.next_out += count
        state.set(None, fid, seqs[g], codes[g], fs, fe)
        return [Columns(fid, fs, fe, map_columns(msg.payload, lambda c: c[g]))]  # type: ignore[list-item]  # stands for inserts

    def _right_columns(self, msg: Columns, state: ColumnFragments) -> list[Message] | None:
        """New right events: cut the fragments they overlap; retractions of the cut ones and
        the new pieces as one Columns batch; None (nothing changed) when the arrays cannot
        take the batch exactly."""
        codes = self._codes(msg, 1, state)
        if codes is None:
            return None
        starts, ends = msg.starts.astype(np.int64), msg.ends.astype(np.int64)
        found = overlapping_pairs(by_key_and_start(state.code, state.start, state.end),
                                  codes, starts, ends)
        if found is None:
            return None
        i, j = found  # new right event i overlaps fragment j
        n = len(msg)
        seqs = np.arange(self.next_seq, self.next_seq + n, dtype=np.int64)
        if not state.sides[1].append(seqs, codes, starts, ends, msg.id_column, msg.payload):
            return None
        self.next_seq += n
        if not len(j):
            return []
        touched = np.unique(j)
        old_start, old_end = state.start[touched], state.end[touched]
        g, ps, pe = uncovered(old_start, old_end, np.searchsorted(touched, j), starts[i],
                              ends[i])
        keeps = ps == old_start[g]  # the piece that keeps its fragment's start keeps its id
        new_end = old_start.copy()  # a fragment with no such piece is retracted whole
        new_end[g[keeps]] = pe[keeps]
        left = state.sides[0]
        lseq = state.lseq[touched]
        payloads = payload_list(map_columns(left.payload,
                                            lambda c: c[np.searchsorted(left.seq, lseq)]))
        out: list[Message] = [  # (valid by construction: built without the checks)
            _new(Retract, t) for t in zip(
                state.fid[touched].tolist(), old_start.tolist(), old_end.tolist(),
                new_end.tolist(), payloads)]
        fresh = g[~keeps]
        count = len(fresh)
        keep = np.ones(len(state), dtype=bool)
        keep[touched] = False
        cut = touched[g[keeps]]
        fid = np.arange(self.next_out, self.next_out + count, dtype=np.int64)
        self.next_out += count
        state.set(keep, np.concatenate([state.fid[cut], fid]),
                  np.concatenate([state.lseq[cut], lseq[fresh]]),
                  np.concatenate([state.code[cut], state.code[touched][fresh]]),
                  np.concatenate([ps[keeps], ps[~keeps]]),
                  np.concatenate([pe[keeps], pe[~keeps]]))
        if count:
            pos = np.searchsorted(left.seq, lseq[fresh])
            out.append(Columns(fid, ps[~keeps], pe[~keeps],  # type: ignore[arg-type]
                               map_columns(left.payload, lambda c: c[pos])))
        return out

    def _leave_columns(self) -> None:
        """Turn the column-wise state into the per-event one, as if every event had come
        alone (the same records, index entries and fragments)."""
        state, self.columns = self.columns, None
        assert state is not None
        self._adopt(state.sides, state.codes.keys, fragments=True)
        recs = self.recs
        for fid, lseq, s, e in zip(state.fid.tolist(), state.lseq.tolist(),
                                   state.start.tolist(), state.end.tolist()):
            recs[lseq][LINKS].append([s, e, fid])  # (sorted by start)
        self.n_frags = len(state)
        self.final_heap = [(recs[s][LINKS][0][F_END], s) for s in self.ids[0].values()
                           if recs[s][LINKS]]
        heapify(self.final_heap)

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
        if self.columns is not None:
            self._leave_columns()
        out: list[Message] = []
        if port == 0:
            seq, rec = self._add(msg, 0, [])
            self._recompute(seq, rec, msg.start, out)
        else:
            _, rec = self._add(msg, 1, None)
            self._recompute_left(rec[KEY], msg.start, msg.end, out)
        return out

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        if self.columns is not None:
            self._leave_columns()
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
        if self.columns is not None:
            return  # (the arrays forget them as they free events: ColumnFragments.free)
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

    def _free(self) -> None:
        if self.columns is None:
            return super()._free()
        self.columns.free((self._limit(0), self._limit(1)), self.in_cti)
        return None

    def _dropped(self, port: int, seq: int, rec: list[Any]) -> None:
        if port == 0:
            self.n_frags -= len(rec[LINKS])  # final

    def state_size(self) -> int:
        """Live events held on both inputs plus the output fragments that may still change."""
        if self.columns is not None:
            return sum(map(len, self.columns.sides)) + len(self.columns)
        return len(self.recs) + self.n_frags

    def _check(self) -> None:
        if self.columns is not None:
            assert not self.recs and not self.n_frags and not self.final_heap
            self.columns.check((self._limit(0), self._limit(1)), self.in_cti)
            return
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
