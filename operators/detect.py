"""``detect(pattern, define, within=, ...)``: row pattern recognition (SQL:2016
``MATCH_RECOGNIZE``) over events, exact on disordered input, corrected by retractions and made
final by CTIs (docs/patterns.md#detect).

**The rows** are the live events in start order (equal starts by ``tie(payload)``, default
``repr(payload)``; a user's tie made total by ``repr``), per ``key(payload)`` when ``key`` is
given. An event deleted (retracted to ``new_end == start``) is no row; one shortened or
lengthened still is (only its start and payload matter).

**A match** is found as ``MATCH_RECOGNIZE`` finds one, with ONE ROW PER MATCH and AFTER MATCH
SKIP PAST LAST ROW: from the first row, the preferred match of a backtracking regex over the
rows (greedy takes more, ``|`` its left, reluctant fewer; contiguous rows; never empty) whose
rows all start before ``first start + within``; if there is none, the next row is tried;
after a match, the row after its last. A row is bound to a symbol whose predicate holds:
``define[sym](payload, match)``, where ``match[s]`` is the tuple of payloads bound to ``s``
so far (the row being tested is not in it yet); a symbol without a predicate matches any
row. **The output** is one event per match, ``[first start, last start + 1)``, with payload
``measures(m)``, ``m`` a dict symbol → tuple of its payloads (every symbol of the pattern, in
the order they first appear; the default measures return ``m`` itself)::

    pattern 'A B+ C', within 10      A: p == "a"   B: p == "b"   C: p == "c"
    rows      a@1  b@2  b@3  c@5  a@6  b@7  c@8
    matches   [1 ─────────────── 6)  [6 ──────── 9)
    late      b@4 arrives: the first match becomes a b b b c: [1, 6) retracted, [1, 6)
              inserted (the same lifetime, a new payload); the second is not touched
    deleted   a@1: the first match is retracted (no A at its start); b@2 .. c@5 are tried
              and fail; the second match is not touched

    >>> from operators.events import Cti, Insert
    >>> op = Detect("A B+ C", {"A": lambda p, m: p == "a", "B": lambda p, m: p == "b",
    ...                        "C": lambda p, m: p == "c"}, within=10)
    >>> out = op.process([Insert(t, t, t + 1, p) for t, p in
    ...                   [(1, "a"), (2, "b"), (3, "b"), (5, "c")]] + [Cti(4)])
    >>> out  # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=FreshId(0, 0), start=1, end=6,
            payload={'A': ('a',), 'B': ('b', 'b'), 'C': ('c',)}), Cti(time=1)]

**Speculative** (the default): a match is output as soon as its rows are there, and retracted
when a late insert or a deletion changes it (the difference is output: an unchanged match
keeps its event). **Final** (``emit="final"``): a match is output once no later input can
change it, never retracted.

**The output CTI** is the input CTI held back to the first row whose match attempt may still
change, since a match (or a retraction of one) is stamped at its first row, which lies before
the CTI. An attempt from row ``r`` is final once the CTI has passed every row it read and,
if it wanted more rows (a greedy ``B+`` still taking rows, or a ``C`` not arrived), also
``start(r) + within``; the attempts before it must be final too. So the output CTI lags the
input CTI by at most ``within``, and only where an attempt is still open.

**Incremental**: a change at row ``k`` re-runs only the attempts that read ``k`` or wanted
the row where ``k`` lands (an attempt from ``r`` reads only rows before ``start(r) + within``),
then the attempts after them until the attempt sequence meets its old one past ``k``; the
output is the difference. **State** is the rows from the first attempt that is not final yet
(rows more than ``within`` behind the CTI are freed), and per row the attempt's result: how
far it read, whether it wanted more, its match.

**Column batches** (``Columns``): a predicate that ignores the match and traces column-wise
(``lambda p, m: p["v"] < 10``, or a column expression ``col("v") < 10``;
:mod:`operators.expr`) is decided for the whole batch at once; one that reads the match is
called per row. While every predicate is decided so and each key's rows come in start order,
the rows stay columns and attempts run an automaton over symbol masks
(:mod:`operators.detect_columns`); otherwise they go in as rows, each key's changed attempts
re-run once per batch. The output is the per-event path's (its differences per batch and its
CTIs), with less churn: a match that a later row of the same batch changes is sent once.

Predicates and measures must be deterministic (they are called again to recompute a match).
"""

from __future__ import annotations

import copy
import gc
import itertools
from bisect import bisect_left
from collections.abc import Callable, Hashable, Mapping
from heapq import heappop, heappush
from itertools import pairwise
from typing import Any

import numpy as np

from .columns import Columns
from .detect_column_mode import ColumnMode
from .detect_columns import Automaton, ColumnState
from .detect_rows import (
    DECIDED_MOST,
    END,
    ID,
    LEN,
    OUT,
    REACH,
    SEQ,
    START,
    WANTS,
    Match,
    final_at,
    new_tuple,
    same_output,
)
from .detect_seeing import EVENT, RETRACTION, EndedRuns, Seeing, run_out
from .events import MAX_TIME, Insert, KeyCtis, Message, Retract
from .expr import Expr, NotElementwise, evaluate, trace, truthy
from .group_apply import group_key
from .pattern import Program, compile_pattern, parse
from .processor import Processor
from .ticks import to_duration

#: ``emit=``: whether the output is final (matches sent once no later input can change them)
EMITS = {"speculative": False, "final": True}


class Detect(ColumnMode, Seeing, Processor):
    """Row pattern recognition over events; see the module docstring.

    ``Detect(pattern, define=None, *, within, measures=None, key=None, tie=None,
    emit="speculative", name=None)``: ``within`` is a duration (int ticks, a timedelta or a
    string such as ``"5 min"``), required and positive; ``define`` maps symbols of the
    pattern to ``pred(payload, match) -> bool``; ``measures(match) -> payload``; ``key`` and
    ``tie`` functions of the payload; ``emit`` ``"speculative"`` or ``"final"``.
    Complexity: a change re-runs the attempts that could read it, each reading at most the
    rows of one ``within``; a CTI visits the keys changed since the last CTI and those whose
    first open attempt it makes final, O(log keys) each."""

    _state_fields = ("keys", "ids", "seq", "minted", "touched", "wake", "woken", "fronts",
                     "front_of", "cols")

    def __init__(self, pattern: str, define: Mapping[str, Callable[[Any, Any], Any]] | None = None,
                 *, within: Any = None, measures: Callable[[Any], Any] | None = None,
                 key: Callable[[Any], Hashable] | None = None,
                 tie: Callable[[Any], Any] | None = None, emit: str = "speculative",
                 name: str | None = None) -> None:
        super().__init__(name)
        self.pattern = pattern
        tree = parse(pattern)
        self.program: Program = compile_pattern(tree)
        names = self.program.names
        if within is None:
            raise ValueError(
                f"detect({pattern!r}): within is required: give the longest time a match may "
                f"span, from its first row's start to its last's, e.g. within=\"5 min\", "
                f"within=timedelta(minutes=5) or within=300_000_000 (ticks)")
        self.within: int = to_duration(within, "detect", "within", positive=True)
        define = {} if define is None else define
        if not isinstance(define, Mapping):
            raise TypeError(f"detect({pattern!r}): define={define!r} is not a dict; give "
                            f"{{symbol: pred(payload, match)}}")
        unknown = [s for s in define if s not in names]
        if unknown:
            raise ValueError(
                f"detect({pattern!r}): define names {', '.join(map(repr, unknown))}, which "
                f"the pattern does not use; its symbols are {', '.join(names)}")
        for sym, pred in define.items():
            if not callable(pred):
                raise TypeError(f"detect({pattern!r}): define[{sym!r}]={pred!r} is not "
                                f"callable; give pred(payload, match) -> bool")
        for arg, fn in (("measures", measures), ("key", key), ("tie", tie)):
            if fn is not None and not callable(fn):
                raise TypeError(f"detect({pattern!r}): {arg}={fn!r} is not callable")
        if emit not in EMITS:
            raise ValueError(f"detect({pattern!r}): emit={emit!r}; give 'speculative' (matches "
                             f"at once, retracted when late input breaks them) or 'final'")
        self.define = dict(define)
        #: per symbol: its predicate as ``pred(payload, match)`` (a column expression made
        #: one), or None (any row)
        self.preds: tuple[Callable[[Any, Any], Any] | None, ...] = tuple(
            _ExprPredicate(p) if isinstance(p, Expr) else p
            for p in (define.get(s) for s in names))
        #: per symbol: its predicate as a column expression, or None (it reads the match, or
        #: does not trace: tested per row); found when the first column batch comes
        self._columnwise: tuple[Any, ...] | None = None
        self.index = {s: i for i, s in enumerate(names)}
        #: the match before the first row: every symbol bound to ()
        self.empty = Match(self.index, [], 0, [])
        self.measures = measures
        self.key = key
        self.tie = tie
        self.emit = emit
        self.final = EMITS[emit]
        #: key -> [rows (sorted list of Row), records (arrival number of the row -> record)]
        self.keys: dict[Hashable, list[Any]] = {}
        #: live event id -> (key, the row's order key)
        self.ids: dict[Hashable, tuple[Hashable, tuple[Any, ...]]] = {}
        #: rows seen: the arrival numbers
        self.seq = 0
        #: matches output: the origin of output ids
        self.minted = 0
        #: keys changed since the last CTI
        self.touched: set[Hashable] = set()
        #: (time, n, key) min-heap: when a key's first open attempt becomes final; an entry
        #: counts only while ``woken[key]`` is its time
        self.wake: list[tuple[int, int, Hashable]] = []
        self.woken: dict[Hashable, int] = {}
        #: (start, n, key) min-heap of the keys' first rows; an entry counts only while
        #: ``front_of[key]`` is its start (the output CTI is held back to the least)
        self.fronts: list[tuple[int, int, Hashable]] = []
        self.front_of: dict[Hashable, int] = {}
        #: the keys in the column mode (:mod:`operators.detect_columns`): never a key of
        #: ``keys`` too
        self.cols = ColumnState()
        #: the automaton of the column mode, made when first needed (False: the pattern
        #: has none)
        self._automaton: Automaton | bool | None = None
        self._table: np.ndarray | None = None
        #: where the rows bound to each symbol are in a match (detect_columns.shape), by the
        #: masks of its rows
        self._bound: dict[tuple[int, ...], list[slice | list[int]]] = {}
        self._opens: dict[int, bool] = {}
        #: the last candidate runs that ended without a match: a diagnostic, not state
        self.ended = EndedRuns()

    # -- messages -----------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        eid, start, _, payload = msg
        out: list[Message] = []
        if self.cols.keys:
            k = None if self.key is None else group_key(self.key(payload))
            if k in self.cols.keys:
                self._to_rows([k])
        self._insert(eid, start, payload, 0, out)
        return out

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """A batch of inserts: the predicates that do not read the match and trace
        column-wise (:mod:`operators.expr`) are decided for the whole batch at once (the
        matching tests those bits instead of calling them); all rows go in, then each key's
        attempts that the new rows may change are re-run once (a long open run is read once
        per batch, not once per row). The output is the difference the inserts one by one
        would make in all."""
        out: list[Message] = []
        if not len(msg):
            return out
        decided = self._decided(msg)
        if decided is not None or not any(self.preds):
            # (a batch makes many small objects that form no cycle -- a match's payloads,
            # the records -- and the cyclic collector would scan them again and again: a
            # third of the column mode's time; paused for the batch, as timeit does)
            collecting = gc.isenabled()
            gc.disable()
            try:
                if self._columns(msg, decided, out):
                    return out
            finally:
                if collecting:
                    gc.enable()
        if self.cols.keys:
            self._to_rows()
        bits = None if decided is None else decided.tolist()
        ids, starts, payloads = msg.ids.tolist(), msg.starts.tolist(), msg.payloads()
        add = self._add
        news: dict[Hashable, list[tuple[Any, ...]]] = {}
        for eid, start, payload, b in zip(ids, starts, payloads,
                                          itertools.repeat(0) if bits is None else bits):
            k, kk = add(eid, start, payload, b)
            at_k = news.get(k)
            if at_k is None:
                news[k] = [kk]
            else:
                at_k.append(kk)
        for k, changed in news.items():
            ks = self.keys[k]
            changed.sort()
            self._change(ks, bisect_left(ks[0], changed[0]), changed, False, out)
        return out

    def columnwise(self) -> tuple[Any, ...]:
        """Per symbol, its predicate as a column expression (see :meth:`decided`), or None:
        no predicate, a predicate that reads the match, or one that does not trace."""
        if self._columnwise is None:
            self._columnwise = tuple(
                None if pred is None or sym >= DECIDED_MOST else _payload_only(pred)
                for sym, pred in enumerate(self.preds))
        return self._columnwise

    def decided(self, msg: Columns) -> list[int] | None:
        """The ``bits`` of each row of a column batch (see :data:`Row`): the predicates that
        trace column-wise, evaluated on the whole batch where that is exact for its values
        (:func:`operators.expr.evaluate`); None when none is."""
        bits = self._decided(msg)
        return None if bits is None else bits.tolist()

    def _decided(self, msg: Columns) -> np.ndarray | None:
        n = len(msg)
        bits = None
        for sym, expr in enumerate(self.columnwise()):
            if expr is None:
                continue
            values = evaluate(expr, msg.payload, n)
            if not isinstance(values, np.ndarray) or values.shape != (n,) or \
                    values.dtype.kind not in "biuf":
                continue  # (these values run per row: the predicate raises, or a type
                # whose truth numpy does not give as Python does)
            column = (truthy(values).astype(np.int64) * 2 + 1) << (2 * sym)
            bits = column if bits is None else bits | column
        return bits

    def _insert(self, eid: Hashable, start: int, payload: Any, bits: int,
                out: list[Message]) -> None:
        k, kk = self._add(eid, start, payload, bits)
        ks = self.keys[k]
        self._change(ks, bisect_left(ks[0], kk), [kk], False, out)

    def _add(self, eid: Hashable, start: int, payload: Any, bits: int,
             seq: int | None = None) -> tuple[Hashable, tuple[Any, ...]]:
        """Put a row in (its attempts not re-run yet): its key and order key. ``seq``: its
        arrival number when already given (a row of a column batch)."""
        # (an id may come again once its event has ended before the CTI: the id then names
        # the new event; the old row stays a row, which nothing can delete any more)
        k = None if self.key is None else group_key(self.key(payload))  # (NaN keys: one)
        tie = repr(payload) if self.tie is None else (self.tie(payload), repr(payload))
        if seq is None:
            seq = self.seq
            self.seq += 1
        row = (start, tie, seq, eid, payload, bits)
        self.ids[eid] = (k, row[:3])
        self.touched.add(k)
        ks = self.keys.get(k)
        if ks is None:
            ks = self.keys[k] = [[], {}, {}]
        rows = ks[0]
        kk = row[:3]
        if not rows or rows[-1][:3] < kk:
            rows.append(row)  # (in start order: the common case)
        else:
            rows.insert(bisect_left(rows, kk), row)
        return k, kk

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        if msg.new_end != msg.start:
            return []  # a lifetime correction: the row stays (its start and payload are kept)
        if self.cols.keys:
            self._to_rows()
        entry = self.ids.get(msg.id)
        if entry is None or entry[1][0] != msg.start:
            return []
        del self.ids[msg.id]
        self.touched.add(entry[0])
        ks = self.keys[entry[0]]
        rows = ks[0]
        at = bisect_left(rows, entry[1])
        row = rows.pop(at)
        out: list[Message] = []
        reading = self._reading(ks, row[:3])
        rec = ks[1].pop(row[SEQ], None)
        if rec is not None and rec[OUT] is not None and not self.final:
            self._retract(rec[OUT], out)
        if rec is not None and (rec[END] is not None or rec[WANTS] or rec[REACH] != row[:3]):
            self.ended.runs.append((RETRACTION, entry[0], row[START], row[ID], row[START],
                                    row[ID], row[START] + self.within))
        self._change(ks, at, [row[:3]], True, out)
        self._ended_by_deletion(ks, reading, entry[0], row)
        if not rows:
            del self.keys[entry[0]]
        return out

    def on_cti(self, time: int, port: int) -> list[Message]:
        """Free (and in final mode output) each key's attempts that are final; the output CTI
        is held back to the first that is not. Visits only the keys changed since the last
        CTI and those whose first open attempt becomes final by ``time`` (a heap by that
        time), not every key."""
        out: list[Message] = []
        visit, self.touched = self.touched, set()
        wake, woken = self.wake, self.woken
        while wake and wake[0][0] <= time:
            at, _, k = heappop(wake)
            if woken.get(k) == at:
                del woken[k]
                visit.add(k)
        for k in visit:
            self._settle(k, time, out)
        if self.cols.batches:
            self.ended.resolve(self.cols, time, self.within)
            self.cols.drop_batches()
        fronts, front_of = self.fronts, self.front_of
        while fronts and front_of.get(fronts[0][2]) != fronts[0][0]:
            heappop(fronts)  # (an entry of a key that moved on or went)
        front = time if not fronts or fronts[0][0] > time else fronts[0][0]
        out.extend(self.emit_cti(front))
        return out

    per_key = False  # the planner's: the input's KeyCtis are by key (planning.key_progress)

    def on_key_ctis(self, msg: KeyCtis, port: int) -> list[Message]:
        """Settle each listed key at its own CTI as a CTI would; the output CTI stays."""
        out: list[Message] = []
        for k, time in msg.times if self.per_key and self.key is not None else ():
            if time > self.in_cti:
                self._settle(group_key(k), time, out)
        return out

    def _settle(self, k: Hashable, time: int, out: list[Message]) -> None:
        """Key ``k`` at ``Cti(time)``: free its final attempts from the first on (in final
        mode, output their matches); schedule the key again for when its first open attempt
        becomes final."""
        ks = self.keys.get(k)
        if ks is None:
            ck = self.cols.keys.get(k)
            if ck is not None:
                self._settle_columns(k, ck, time, out)
                return
            self.front_of.pop(k, None)
            self.woken.pop(k, None)
            return
        rows, recs, _ = ks
        within, ids = self.within, self.ids
        pos, n = 0, len(rows)
        while pos < n:
            row = rows[pos]
            rec = recs[row[SEQ]]
            if rec[REACH][0] >= time or (rec[WANTS] and row[START] + within > time):
                break
            if rec[END] is None:
                if rec[WANTS] or rec[REACH][2] != row[SEQ]:  # a candidate ends
                    by = None if rec[WANTS] else rows[bisect_left(rows, rec[REACH], pos)]
                    self.ended.runs.append(
                        (run_out(time), k, row[START], row[ID], time, None, row[START] + within)
                        if by is None else
                        (EVENT, k, row[START], row[ID], by[START], by[ID], row[START] + within))
                pos += 1
                continue
            if self.final:
                o = rec[OUT]
                out.append(new_tuple(Insert, (self._mint(), o[0], o[1], o[2])))
            pos = bisect_left(rows, rec[END], pos) + 1
        if pos:
            for row in rows[:pos]:
                recs.pop(row[SEQ], None)
                entry = ids.get(row[ID])
                if entry is not None and entry[1][2] == row[SEQ]:
                    del ids[row[ID]]
            del rows[:pos]
        if not rows:
            del self.keys[k]
            self.front_of.pop(k, None)
            self.woken.pop(k, None)
            return
        first = rows[0]
        self._schedule(k, final_at(recs[first[SEQ]], first, within), first[START])

    def _schedule(self, k: Hashable, at: int, front: int) -> None:
        """Visit key ``k`` again at ``Cti(at)`` (its first open attempt is final then); its
        first row starts at ``front``."""
        if self.woken.get(k) != at:
            self.woken[k] = at
            heappush(self.wake, (at, self.seq, k))
            self.seq += 1
        if self.front_of.get(k) != front:
            self.front_of[k] = front
            heappush(self.fronts, (front, self.seq, k))
            self.seq += 1

    def finish(self) -> list[Message]:
        """End of input: no row can come or go any more, so every attempt is final (in final
        mode its match is output now), and the output CTI catches up with the input's."""
        out: list[Message] = []
        for k in [*self.keys, *self.cols.keys]:
            self._settle(k, MAX_TIME, out)
        self.ended.resolve(self.cols, MAX_TIME, self.within)
        out.extend(self.emit_cti(self.in_cti))
        return out

    # -- introspection ------------------------------------------------------------------------
    def key_functions(self) -> tuple[Callable[[Any], Any], ...] | None:
        return None if self.key is None else (self.key,)

    def state_size(self) -> int:
        """Rows held: those from each key's first attempt that is not final yet."""
        return sum(len(ks[0]) for ks in self.keys.values()) + sum(
            len(ck.starts) for ck in self.cols.keys.values())

    def _check(self) -> None:
        """Every key's records are what the attempts from scratch give over its rows: one per
        row not inside a match, none inside (the column mode's keys: in a copy moved into
        the per-row state, which checks the automaton's records against the program's)."""
        if self.cols.keys:
            assert not self.keys.keys() & self.cols.keys.keys(), "a key in both modes"
            probe = copy.deepcopy(self)
            probe._to_rows()
            probe._check()
            return
        held: set[tuple[Any, Any]] = set()
        for k, (rows, recs, reaching) in self.keys.items():
            assert rows, f"key {k!r} holds no rows"
            assert all(a[:3] < b[:3] for a, b in pairwise(rows)), "rows out of order"
            pos, expected = 0, set()
            while pos < len(rows):
                row = rows[pos]
                rec = recs.get(row[SEQ])
                assert rec is not None, f"no attempt recorded at row {row!r}"
                again = self._attempt(rows, pos)
                assert rec[:3] == again[:3], f"attempt at {row!r}: {rec} != {again}"
                assert (rec[OUT] is None) == (again[OUT] is None)
                if rec[OUT] is not None:
                    assert rec[OUT][:2] == again[OUT][:2] and same_output(rec[OUT], again[OUT])
                    assert (rec[OUT][3] is None) == self.final
                expected.add(row[SEQ])
                if rec[WANTS] or rec[REACH] != row[:3]:
                    assert reaching.get(row[SEQ]) == row[:3], \
                        f"attempt at {row!r} reads past its row, not indexed"
                pos += 1 if again[END] is None else again[LEN] + 1
            assert set(recs) == expected, "records at rows inside a match"
            held.update((k, row[:3]) for row in rows)
        for eid, entry in self.ids.items():
            assert entry in held, f"id {eid!r} names a row no key holds"
        for k, (rows, recs, _) in self.keys.items():
            if k in self.touched or not rows:
                continue
            first = rows[0]
            assert self.front_of.get(k) == first[START], f"key {k!r}: front not scheduled"
            assert self.woken.get(k) == final_at(recs[first[SEQ]], first, self.within), \
                f"key {k!r}: its first open attempt is not scheduled"
            assert (self.woken[k], k) in {(t, kk) for t, _, kk in self.wake}



class _Unread(Mapping[str, Any]):
    """The match as tracing shows it to a predicate: any use of it stops the trace (the
    predicate reads the match: it is tested per row)."""

    def _refuse(self, *args: Any) -> Any:
        raise NotElementwise("reads the match")

    __getitem__ = __iter__ = __len__ = __contains__ = __eq__ = __ne__ = __bool__ = _refuse
    __hash__ = __str__ = __format__ = _refuse


_UNREAD = _Unread()


def _payload_only(pred: Callable[[Any, Any], Any]) -> Any:
    """``pred(payload, match)`` as a column expression of the payload when it ignores the
    match and traces column-wise (:func:`operators.expr.trace`), else None."""
    if isinstance(pred, _ExprPredicate):
        return pred.expr

    def of_payload(p: Any) -> Any:
        return pred(p, _UNREAD)

    traced = trace(of_payload)
    return traced if isinstance(traced, Expr) else None


class _ExprPredicate:
    """A column expression given as a predicate (``define={"A": col("v") < 10}``), called as
    ``pred(payload, match)``."""

    __slots__ = ("expr",)

    def __init__(self, expr: Expr) -> None:
        self.expr = expr

    def __call__(self, payload: Any, match: Any) -> Any:
        return self.expr(payload)

    def __repr__(self) -> str:
        return repr(self.expr)

    @property
    def __name__(self) -> str:
        return repr(self.expr)
