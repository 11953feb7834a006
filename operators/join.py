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
where an input end changes, at or after that input's CTI. Once one input has ended
(:meth:`~operators.processor.Processor.end_input`: a reference table that was read to its
end) every later change comes from the other, so the output CTI follows the open input's CTI
alone; at the end of both, :meth:`finish` moves it to the furthest input's::

    left    r: [0 ─────────────── ∞)  Cti(1)  end
    right   a  b  Cti(10)  c  Cti(20)
    output  (r, a) (r, b)  Cti(10)  (r, c)  Cti(20)     (not stuck at Cti(1))

**Column batches.** While only :class:`~operators.columns.Columns` batches have arrived, both
inputs' live events and the pairs that may still change are held as arrays
(:mod:`operators.two_input_columns`), and a batch is matched all at once: its key column
(``on`` traced as in :mod:`operators.expr`), a vectorised overlap search, the output as one
``Columns`` batch whose payload is ``select`` evaluated on the columns when it traces
(:func:`operators.expr.trace_pair`), else called per pair. The first message that is not such
a batch — a retraction, a single insert, a batch whose keys or payload columns the arrays
cannot hold exactly — turns the arrays into the per-event state below, exactly as if every
event had arrived alone, and the join goes on event by event.

**Freeing state.** An event of input A (the other input is B) can still produce or change
output only if its own end may be retracted (``end >= CTI_A``) or a future event of B, which
starts at or after ``CTI_B``, may overlap it (``end > CTI_B``). So it is dropped, with the
pairs it takes part in, as soon as ``end < CTI_A and end <= CTI_B`` (in the column-wise
state, once such events are an eighth of their side: until then they stay in its arrays,
where nothing can meet them). A pair whose left or right
event is dropped is final: the survivor's end can only move at or after its own CTI, which is
at or past the dropped event's end, so the intersection's end cannot move. An input that has
ended counts as ``CTI = MAX_TIME`` here: its own ends no longer move, and it sends no event
for the other input's events to meet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .columns import Columns, map_columns, one_row, payload_list
from .events import Insert, Message, Retract
from .expr import Side, evaluate, pair_columns, trace, trace_pair
from .two_input import (
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
from .two_input_columns import (
    ColumnEvents,
    KeyCodes,
    overlapping_pairs,
    payload_like,
    payload_parts,
    put_rows,
    same_form,
)

_EMPTY = np.zeros(0, dtype=np.int64)
#: the share of a side's events that may stay in its arrays once freed (:meth:`ColumnState.free`)
SLACK = 1 / 8


class ColumnState:
    """A join's state while only column batches have arrived: each input's live events
    (:class:`~operators.two_input_columns.ColumnEvents`) and the pairs that may still change,
    as arrays: output id, left and right seq, start, end and payload columns."""

    def __init__(self) -> None:
        self.sides = (ColumnEvents(), ColumnEvents())
        self.codes = KeyCodes()
        self.pid, self.lseq, self.rseq = _EMPTY, _EMPTY, _EMPTY
        self.start, self.end = _EMPTY, _EMPTY
        self.payload: Any = None
        #: a column batch has arrived (until then, single inserts join these arrays only
        #: while the other input holds nothing: they make no output yet, so its form is free)
        self.batches = False
        #: the buffers behind the pair arrays (pid, lseq, rseq, start, end, payload columns),
        #: with room to spare (see :class:`~operators.two_input_columns.ColumnEvents`); None:
        #: the arrays themselves
        self._bufs: list[np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # a snapshot holds the pairs, not the spare room of their buffers
        return {**self.__dict__, "_bufs": None}

    def add_pairs(self, pid: np.ndarray, lseq: np.ndarray, rseq: np.ndarray,
                  start: np.ndarray, end: np.ndarray, payload: Any) -> None:
        """Add pairs; ``payload``: their payload columns, of the form of the ones held
        (:func:`~operators.two_input_columns.same_form`). Written after the pairs held, in
        buffers with room to spare: a join whose pairs stay (a reference table with no CTI
        yet) copied every pair at every batch."""
        n = len(self.pid)
        mores = [pid, lseq, rseq, start, end, *payload_parts(payload)]
        if n == 0:
            bufs = [np.zeros(0, dtype=m.dtype) for m in mores]
        elif self._bufs is None:
            bufs = [self.pid, self.lseq, self.rseq, self.start, self.end,
                    *payload_parts(self.payload)]
        else:
            bufs = self._bufs
        bufs = [put_rows(b, n, m) for b, m in zip(bufs, mores, strict=True)]
        self._bufs = bufs
        total = n + len(pid)
        self.pid, self.lseq, self.rseq, self.start, self.end = (b[:total] for b in bufs[:5])
        self.payload = payload_like(payload if n == 0 else self.payload,
                                    [b[:total] for b in bufs[5:]])

    def free(self, limits: tuple[int, int], now: bool = False) -> None:
        """Free the events ending before their input's limit, and the pairs they were in
        (those are final): a side's once they are :data:`SLACK` of it or more, or ``now``.
        Until then they stay in the arrays, where nothing can meet them any more (an event
        of the other input starts at or after its CTI, at or after their end): taking a few
        events out of a side of thousands (the open auctions) copied every array of it at
        every CTI."""
        gone_left, gone_right = (self._freed(side, limit, now)
                                 for side, limit in zip(self.sides, limits))
        if not (len(gone_left) or len(gone_right)) or not len(self.pid):
            return
        # against the few events just freed, not every live one: a side that never frees
        # (events lasting for ever) would cost a sort of all of it at every CTI
        keep = ~(np.isin(self.lseq, gone_left) | np.isin(self.rseq, gone_right))
        if not keep.all():
            self.pid, self.lseq, self.rseq = self.pid[keep], self.lseq[keep], self.rseq[keep]
            self.start, self.end = self.start[keep], self.end[keep]
            self.payload = (map_columns(self.payload, lambda c: c[keep]) if len(self.pid)
                            else None)
            self._bufs = None  # (new arrays: the next pairs are written after these)

    @staticmethod
    def _freed(side: ColumnEvents, limit: int, now: bool) -> np.ndarray:
        if side.least_end() >= limit:
            return _EMPTY  # (no event has ended)
        mask = side.end >= limit
        dead = len(mask) - int(np.count_nonzero(mask))
        if dead and not now and dead < SLACK * len(mask):
            return _EMPTY
        return side.keep(mask)

    def check(self, limits: tuple[int, int]) -> None:
        left, right = self.sides
        for side, limit in zip(self.sides, limits):
            side.check()
            dead = int(np.count_nonzero(side.end < limit))
            assert dead == 0 or dead < SLACK * len(side), "an event that should have been freed"
        li = {s: i for i, s in enumerate(left.seq.tolist())}
        ri = {s: i for i, s in enumerate(right.seq.tolist())}
        assert len(set(self.pid.tolist())) == len(self.pid)
        for ls, rs, s, e in zip(self.lseq.tolist(), self.rseq.tolist(), self.start.tolist(),
                                self.end.tolist()):
            i, j = li[ls], ri[rs]
            assert left.code[i] == right.code[j]
            assert s == max(left.start[i], right.start[j])
            assert e == min(left.end[i], right.end[j]) > s


#: A single insert joins the column-wise state while its input holds fewer events than this
#: there (one-row batches: a small table given as rows) and column batches arrived or the
#: other input is empty; otherwise, or past it, the per-event state.
ROWS_INTO_COLUMNS = 512


class Join(BinaryTemporal):
    """The temporal join of input 0 (left) and input 1 (right); see the module docstring.

    ``on=(left_key, right_key)``: field names or functions of the payload; ``None`` joins every
    pair (cross join). ``select(l, r)`` builds the output payload (default ``(l, r)``).
    """

    _state_fields = (*BinaryTemporal._state_fields, "n_pairs", "columns")

    def __init__(self, on: Any = None, select: Callable[[Any, Any], Any] | None = None,
                 name: str | None = None) -> None:
        super().__init__(on, "join", name)
        if select is not None and not callable(select):
            raise TypeError(f"join: select must be a function (left, right) -> payload, "
                            f"got {select!r}")
        self.select = select
        self.n_pairs = 0
        #: the column-wise state while only column batches have arrived (None: per event)
        self.columns: ColumnState | None = ColumnState()
        self._key_exprs = (trace(self.keys[0]), trace(self.keys[1]))
        self._select_expr = None if select is None else trace_pair(select)

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

    # -- column batches -------------------------------------------------------------------
    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        if self.columns is not None:
            self.columns.batches = True
            out = self._match_columns(msg, port, self.columns)
            if out is not None:
                return out
            self._leave_columns()
        return super().on_columns(msg, port)

    def _match_columns(self, msg: Columns, port: int, state: ColumnState
                       ) -> list[Message] | None:
        """Add a batch and emit its pairs column-wise; None (nothing changed) when the
        arrays cannot take it exactly."""
        n = len(msg)
        if n == 0:
            return []
        keys = evaluate(self._key_exprs[port], msg.payload, n)
        codes = state.codes.encode(keys) if isinstance(keys, np.ndarray) else None
        if codes is None:
            return None
        starts, ends = msg.starts.astype(np.int64), msg.ends.astype(np.int64)
        own, other = state.sides[port], state.sides[1 - port]
        found = overlapping_pairs(other, codes, starts, ends)
        if found is None:
            return None
        i, j = found
        count = len(i)
        pay = None
        if count:
            pay = self._pair_payload(msg.payload, i, other.payload, j, port)
            if len(state.pid) and not same_form(state.payload, pay):
                return None
        seqs = np.arange(self.next_seq, self.next_seq + n, dtype=np.int64)
        if not own.append(seqs, codes, starts, ends, msg.id_column, msg.payload):
            return None  # (nothing above changed the state)
        self.next_seq += n
        if not count:
            return []
        pid = np.arange(self.next_out, self.next_out + count, dtype=np.int64)
        self.next_out += count
        self.n_pairs += count
        start = np.maximum(starts[i], other.start[j])
        end = np.minimum(ends[i], other.end[j])
        lseq, rseq = (seqs[i], other.seq[j]) if port == 0 else (other.seq[j], seqs[i])
        state.add_pairs(pid, lseq, rseq, start, end, pay)
        return [Columns(pid, start, end, pay)]  # type: ignore[list-item]  # stands for inserts

    def _pair_payload(self, mine: Any, i: np.ndarray, theirs: Any, j: np.ndarray,
                      port: int) -> Any:
        """The output payload columns of the pairs (mine[i], theirs[j])."""
        a = map_columns(mine, lambda c: c[i])
        b = map_columns(theirs, lambda c: c[j])
        left, right = (a, b) if port == 0 else (b, a)
        expr = self._select_expr
        if isinstance(expr, Side) and type(left if expr.key[0] == "l" else right) in (
                dict, tuple):  # ``select=lambda l, r: l``: that side's columns as they are
            return left if expr.key[0] == "l" else right
        if expr is not None:
            cols = evaluate(expr, pair_columns(left, right), len(i))
            if cols is not None:
                return cols
        lp, rp = payload_list(left), payload_list(right)
        values = zip(lp, rp) if self.select is None else map(self.select, lp, rp)
        return np.fromiter(values, dtype=object, count=len(i))

    def _leave_columns(self) -> None:
        """Turn the column-wise state into the per-event one, as if every event had come
        alone (the same records, index entries, pairs and links)."""
        state, self.columns = self.columns, None
        assert state is not None
        before = len(state.pid)
        state.free((self._limit(0), self._limit(1)), now=True)  # no freed event is adopted
        self.n_pairs -= before - len(state.pid)
        self._adopt(state.sides, state.codes.keys)
        if not len(state.pid):
            return
        recs = self.recs
        for oid, lseq, rseq, s, e, p in zip(
                state.pid.tolist(), state.lseq.tolist(), state.rseq.tolist(),
                state.start.tolist(), state.end.tolist(), payload_list(state.payload)):
            pair = [oid, s, e, p]
            for seq, oseq in ((lseq, rseq), (rseq, lseq)):
                rec = recs[seq]
                if rec[LINKS] is None:
                    rec[LINKS] = {oseq: pair}
                else:
                    rec[LINKS][oseq] = pair

    # -- messages -------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        if self.columns is not None:
            # a few rows beside column batches (e.g. a small table of metadata joined with a
            # column stream) join the arrays as one-row batches, not the whole state per event;
            # a join of rows only leaves the arrays at its first pair, as before
            state = self.columns
            if len(state.sides[port]) < ROWS_INTO_COLUMNS and (
                    getattr(state, "batches", True) or not len(state.sides[1 - port])):
                ids = np.empty(1, dtype=object)
                ids[0] = msg.id  # np.array([id]) would unpack a tuple id into a row
                one = Columns(ids, np.array([msg.start]), np.array([msg.end]),
                              one_row(msg.payload))
                found = self._match_columns(one, port, state)
                if found is not None:
                    return found
            self._leave_columns()
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
        if self.columns is not None:
            self._leave_columns()
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
    def _free(self) -> None:
        if self.columns is None:
            return super()._free()
        before = len(self.columns.pid)
        self.columns.free((self._limit(0), self._limit(1)))
        self.n_pairs -= before - len(self.columns.pid)
        return None

    def _dropped(self, port: int, seq: int, rec: list[Any]) -> None:
        # the pairs of a freed event are final (see the module docstring)
        recs = self.recs
        for oseq in rec[LINKS]:
            del recs[oseq][LINKS][seq]
        self.n_pairs -= len(rec[LINKS])

    def state_size(self) -> int:
        """Live events held on both inputs plus the output pairs that may still change."""
        held = 0 if self.columns is None else sum(map(len, self.columns.sides))
        return len(self.recs) + held + self.n_pairs

    def _check(self) -> None:
        if self.columns is not None:
            assert not self.recs and self.n_pairs == len(self.columns.pid)
            self.columns.check((self._limit(0), self._limit(1)))
            return
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
