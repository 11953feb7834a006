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
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Iterator, Mapping
from heapq import heappop, heappush
from itertools import pairwise
from typing import Any

import numpy as np

from .columns import Columns, apply_columns
from .detect_columns import Automaton, ColumnKey, ColumnState, TooLarge, bind, key_runs
from .events import MAX_TIME, FreshId, Insert, Message, Retract
from .expr import Expr, NotElementwise, evaluate, trace, truthy
from .group_apply import group_key
from .pattern import JMP, MATCH, PROGRESS, SAVE, SPLIT, SYM, Program, compile_pattern, parse
from .processor import Processor
from .ticks import to_duration

_new = tuple.__new__

#: A row: ``(start, tie key, arrival number, id, payload, bits)``; ``row[:3]`` orders rows
#: totally (the arrival number tells equal rows apart and is never passed). ``bits`` holds
#: the predicates a column batch decided for the row: for symbol ``s``, bit ``2s`` says
#: whether it was decided, bit ``2s + 1`` its answer (0 for a row that came as an insert).
Row = tuple[Any, ...]
# fields of a row
_START, _SEQ, _ID, _PAYLOAD, _BITS = 0, 2, 3, 4, 5
#: Symbols whose predicates a column batch may decide (two bits each in an int64).
_DECIDED_MOST = 31
#: Match shapes (the masks of its rows) whose bound symbols the column mode remembers.
_BOUND_MOST = 4_096
# fields of an attempt record: [last row's order key or None (no match), the order key of the
# last row read, whether it wanted a row it did not have, its output (start, end, payload,
# id or None) or None]
_END, _REACH, _WANTS, _OUT = 0, 1, 2, 3

#: ``emit=``: whether the output is final (matches sent once no later input can change them)
EMITS = {"speculative": False, "final": True}


class Match(Mapping[str, tuple[Any, ...]]):
    """The rows bound so far, as a predicate sees them: ``match["A"]`` is the tuple of the
    payloads bound to ``A``, in order (``()`` when none is yet). Valid during the call only."""

    __slots__ = ("_first", "_index", "_rows", "_syms")

    def __init__(self, index: dict[str, int], rows: list[Row], first: int,
                 syms: list[int]) -> None:
        self._index, self._rows, self._first, self._syms = index, rows, first, syms

    def __getitem__(self, name: str) -> tuple[Any, ...]:
        try:
            want = self._index[name]
        except KeyError:
            raise KeyError(f"match[{name!r}]: the pattern has no symbol {name!r}; its symbols "
                           f"are {', '.join(self._index)}") from None
        rows, first = self._rows, self._first
        return tuple(rows[first + k][_PAYLOAD] for k, s in enumerate(self._syms) if s == want)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __repr__(self) -> str:
        return f"Match({dict(self)!r})"


class Detect(Processor):
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
        #: the symbols bound to the rows of a match, by the masks of its rows
        self._bound: dict[tuple[int, ...], list[int]] = {}
        self._opens: dict[int, bool] = {}

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
                None if pred is None or sym >= _DECIDED_MOST else _payload_only(pred)
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

    # -- the column mode (operators/detect_columns.py) ------------------------------------------
    def automaton(self) -> Automaton | None:
        """The automaton of the pattern over symbol masks, or None (a repetition of what can
        match no row, or too many states)."""
        if self._automaton is None:
            try:
                self._automaton = (Automaton(self.program) if self.program.registers == 0
                                   else False)
            except TooLarge:
                self._automaton = False
        return self._automaton if isinstance(self._automaton, Automaton) else None

    def _columns(self, msg: Columns, decided: np.ndarray | None, out: list[Message]) -> bool:
        """A column batch, when every predicate was decided for it and the key is a column
        of ints (False, nothing done, otherwise): the keys in the column mode whose rows come
        after their rows so far, in strictly increasing start order, stay in it (a key new
        to detect starts in it); the others go into rows and take their rows as rows."""
        auto = self.automaton()
        n = len(msg)
        if auto is None or not n:
            return False
        masks = np.zeros(n, dtype=np.int64)
        for sym, pred in enumerate(self.preds):
            if pred is None:
                masks |= 1 << sym
            elif decided is None or sym >= _DECIDED_MOST or not (decided[0] >> 2 * sym) & 1:
                return False  # (a batch is decided for a predicate or not at all)
            else:
                masks |= ((decided >> (2 * sym + 1)) & 1) << sym
        keys = None
        if self.key is not None:
            keys = apply_columns(self.key, msg)
            if not isinstance(keys, np.ndarray) or keys.shape != (n,) or \
                    keys.dtype.kind not in "iub":
                return False
        order, names, bounds, in_order = key_runs(keys, msg.starts)
        cols = self.cols
        starts = msg.starts[order].tolist()
        as_rows: list[int] = []
        for x, k in enumerate(names):
            ck = cols.keys.get(k)
            if k in self.keys or not in_order[x] or (
                    ck is not None and ck.starts[-1] >= starts[bounds[x]]):
                if ck is not None:
                    self._to_rows([k])
                as_rows.append(x)
        first = self.seq
        self.seq += n
        cols.add_batch(first, msg)
        masks_l = masks[order].tolist()
        # the rows an attempt may get past (the others read their own row and fail), found
        # for the whole batch at once where the symbols are few
        table = self._opening(auto)
        opening: list[int] | None = None
        if table is not None:
            found = np.flatnonzero(table[masks[order]])
            cuts = np.searchsorted(found, bounds).tolist()
            opening = found.tolist()
        seqs = (order + first).tolist()
        within, touched = self.within, self.touched
        if as_rows:
            self._rows_of(msg, decided, order, seqs, starts, names, bounds, as_rows, out)
        rowwise = set(as_rows)
        for x, k in enumerate(names):
            if x in rowwise:
                continue
            a, b = bounds[x], bounds[x + 1]
            ck = cols.keys.get(k)
            if ck is None:
                ck = cols.keys[k] = ColumnKey()
            touched.add(k)
            p = len(ck.starts)
            s_new = starts[a]
            for g in ck.open:  # the first attempt that wanted a row where the new ones are
                at = bisect_left(ck.seqs, g)
                if ck.starts[at] + within > s_new:
                    p = at
                    break
            ck.starts += starts[a:b]
            ck.masks += masks_l[a:b]
            ck.seqs += seqs[a:b]
            new = None
            if opening is not None:
                shift = len(ck.starts) - b
                new = [y + shift for y in opening[cuts[x]:cuts[x + 1]]]
            self._rerun(ck, p, auto, out, new, b - a)
        return True

    def _rows_of(self, msg: Columns, decided: np.ndarray | None, order: np.ndarray,
                 seqs: list[int], starts: list[int], names: list[Any], bounds: list[int],
                 which: list[int], out: list[Message]) -> None:
        """The runs ``which`` of a column batch (by key, see :func:`key_runs`) as rows."""
        bits = None if decided is None else decided[order].tolist()
        ids = msg.ids[order].tolist()
        rows = order.tolist()
        add = self._add
        news: dict[Hashable, list[tuple[Any, ...]]] = {}
        for x in which:
            for y in range(bounds[x], bounds[x + 1]):
                k, kk = add(ids[y], starts[y], msg.payload_at(rows[y]),
                            0 if bits is None else bits[y], seqs[y])
                news.setdefault(k, []).append(kk)
        for k, changed in news.items():
            ks = self.keys[k]
            changed.sort()
            self._change(ks, bisect_left(ks[0], changed[0]), changed, False, out)

    def _opening(self, auto: Automaton) -> np.ndarray | None:
        """Per symbol mask, whether an attempt gets past a row of it (None: too many
        symbols for a table)."""
        names = len(self.program.names)
        if names > 12:
            return None
        table = self._table
        if table is None:
            table = self._table = np.array(
                [auto.step(auto.start, m) != (0, False) for m in range(1 << names)])
        return table

    def _rerun(self, ck: ColumnKey, p: int, auto: Automaton, out: list[Message],
               new: list[int] | None = None, added: int = 0) -> None:
        """Run the attempts of a column key from row ``p`` (an attempt's first row) to its
        last row again; output the difference. ``new``: the rows an attempt gets past among
        the ``added`` rows just added (None: found here)."""
        starts, masks, seqs = ck.starts, ck.masks, ck.seqs
        attempts = ck.attempts
        g_p = seqs[p]
        cut = len(attempts)
        while cut and attempts[cut - 1][0] >= g_p:
            cut -= 1
        old = {r[0]: r[4] for r in attempts[cut:] if r[4] is not None}
        del attempts[cut:]
        opens, start_state, step, run = self._opens, auto.start, auto.step, auto.run
        within, final = self.within, self.final
        n, last = len(starts), starts[-1]
        still: list[int] = []
        # the rows an attempt gets past (at the others it reads its own row and fails: no
        # record)
        old_end = n if new is None else n - added
        candidates = []
        for x in range(p, old_end):
            m = masks[x]
            can = opens.get(m)
            if can is None:
                can = opens[m] = step(start_state, m) != (0, False)
            if can:
                candidates.append(x)
        if new is not None:
            candidates += new
        cover = -1
        for pos in candidates:
            if pos <= cover:
                continue
            j = bisect_left(starts, starts[pos] + within, pos)
            end, reach, wants = run(masks, pos, j)
            if end is None and reach == pos and not wants:
                continue
            g = seqs[pos]
            o = None if end is None else self._measured(ck, pos, end)
            rec = [g, None if end is None else seqs[end], seqs[reach], wants, o]
            if not final:
                prev = old.pop(g, None)
                if prev is not None:
                    if o is not None and _same(prev, o):
                        rec[4] = o = prev
                    else:
                        self._retract(prev, out)
                if o is not None and o is not prev:
                    oid = self._mint()
                    rec[4] = (*o[:3], oid)
                    out.append(_new(Insert, (oid, *o[:3])))
            attempts.append(rec)
            if wants and starts[pos] + within > last:
                still.append(g)
            if end is not None:
                cover = end
        if not final:
            for prev in old.values():
                self._retract(prev, out)
        ck.open = still

    def _measured(self, ck: ColumnKey, i: int, e: int) -> tuple[Any, ...]:
        """The output of the match of a column key's rows ``i .. e``: ``(start, end,
        payload, None)``."""
        # (the symbols bound depend on the match's masks only: matches repeat a few shapes)
        masks = tuple(ck.masks[i:e + 1])
        bound_syms = self._bound
        syms = bound_syms.get(masks)
        if syms is None:
            if len(bound_syms) >= _BOUND_MOST:
                bound_syms.clear()
            syms = bound_syms[masks] = bind(self.program, ck.masks, i, e)
        rows = self.cols.payloads(ck.seqs[i:e + 1])
        parts: list[list[Any]] = [[] for _ in self.index]
        for p, s in zip(rows, syms):
            parts[s].append(p)
        bound = {name: tuple(part) for name, part in zip(self.index, parts)}
        result = bound if self.measures is None else self.measures(bound)
        return (ck.starts[i], ck.starts[e] + 1, result, None)

    def _settle_columns(self, k: Hashable, ck: ColumnKey, time: int,
                        out: list[Message]) -> None:
        """:meth:`_settle` for a key in the column mode."""
        starts, seqs, attempts = ck.starts, ck.seqs, ck.attempts
        within = self.within
        pos, ai, n = 0, 0, len(starts)
        while pos < n:
            rp = bisect_left(seqs, attempts[ai][0], pos) if ai < len(attempts) else n
            if rp > pos:  # attempts that read only their own row
                q = bisect_left(starts, time, pos, rp)
                pos = q
                if q < rp or rp == n:
                    break
            rec = attempts[ai]
            if starts[bisect_left(seqs, rec[2], pos)] >= time or (
                    rec[3] and starts[pos] + within > time):
                break
            if rec[1] is None:
                pos += 1
            else:
                if self.final:
                    o = rec[4]
                    out.append(_new(Insert, (self._mint(), o[0], o[1], o[2])))
                pos = bisect_left(seqs, rec[1], pos) + 1
            ai += 1
        if pos:
            del starts[:pos], ck.masks[:pos], seqs[:pos], attempts[:ai]
            if seqs:
                ck.open = [g for g in ck.open if g >= seqs[0]]
        if not starts:
            del self.cols.keys[k]
            self.front_of.pop(k, None)
            self.woken.pop(k, None)
            return
        if attempts and attempts[0][0] == seqs[0]:
            rec = attempts[0]
            at = starts[bisect_left(seqs, rec[2])] + 1
            if rec[3] and starts[0] + within > at:
                at = starts[0] + within
        else:
            at = starts[0] + 1
        self._schedule(k, at, starts[0])

    def _to_rows(self, which: list[Hashable] | None = None) -> None:
        """Move the keys ``which`` (default: all) of the column mode into the per-row state
        (the rows as :data:`Row` s, each attempt's record, the ids)."""
        cols = self.cols
        named: list[tuple[int, Hashable, Hashable, tuple[Any, ...]]] = []
        decided = [(sym, pred is not None) for sym, pred in enumerate(self.preds)]
        for k in list(cols.keys) if which is None else which:
            ck = cols.keys.pop(k)
            rows: list[Row] = []
            for start, mask, g in zip(ck.starts, ck.masks, ck.seqs):
                p, eid = cols.payload(g), cols.id_of(g)
                tie = repr(p) if self.tie is None else (self.tie(p), repr(p))
                bits = 0
                for sym, has in decided:
                    if has:
                        bits |= ((mask >> sym & 1) << 1 | 1) << 2 * sym
                rows.append((start, tie, g, eid, p, bits))
                named.append((g, eid, k, rows[-1][:3]))
            seqs = ck.seqs
            recs: dict[int, list[Any]] = {}
            reaching: dict[int, tuple[Any, ...]] = {}
            pos, ai, n = 0, 0, len(rows)
            while pos < n:
                g = seqs[pos]
                if ai < len(ck.attempts) and ck.attempts[ai][0] == g:
                    rec = ck.attempts[ai]
                    ai += 1
                    end = None if rec[1] is None else bisect_left(seqs, rec[1], pos)
                    reach = bisect_left(seqs, rec[2], pos)
                    recs[g] = [None if end is None else rows[end][:3], rows[reach][:3],
                               rec[3], rec[4]]
                    if rec[3] or reach != pos:
                        reaching[g] = rows[pos][:3]
                    pos = pos + 1 if end is None else end + 1
                else:
                    recs[g] = [None, rows[pos][:3], False, None]
                    pos += 1
            self.keys[k] = [rows, recs, reaching]
        named.sort(key=lambda t: t[0])
        ids = self.ids
        for g, eid, k, kk in named:  # (an id names the row that came last with it)
            entry = ids.get(eid)
            if entry is None or entry[1][2] < g:
                ids[eid] = (k, kk)
        if not cols.keys:  # (no row is in a batch any more)
            cols.batches.clear()
            cols.firsts.clear()
            cols.lists.clear()

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
        rec = ks[1].pop(row[_SEQ], None)
        if rec is not None and rec[_OUT] is not None and not self.final:
            self._retract(rec[_OUT], out)
        self._change(ks, at, [row[:3]], True, out)
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
            self.cols.drop_batches()
        fronts, front_of = self.fronts, self.front_of
        while fronts and front_of.get(fronts[0][2]) != fronts[0][0]:
            heappop(fronts)  # (an entry of a key that moved on or went)
        front = time if not fronts or fronts[0][0] > time else fronts[0][0]
        out.extend(self.emit_cti(front))
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
            rec = recs[row[_SEQ]]
            if rec[_REACH][0] >= time or (rec[_WANTS] and row[_START] + within > time):
                break
            if rec[_END] is None:
                pos += 1
                continue
            if self.final:
                o = rec[_OUT]
                out.append(_new(Insert, (self._mint(), o[0], o[1], o[2])))
            pos = bisect_left(rows, rec[_END], pos) + 1
        if pos:
            for row in rows[:pos]:
                recs.pop(row[_SEQ], None)
                entry = ids.get(row[_ID])
                if entry is not None and entry[1][2] == row[_SEQ]:
                    del ids[row[_ID]]
            del rows[:pos]
        if not rows:
            del self.keys[k]
            self.front_of.pop(k, None)
            self.woken.pop(k, None)
            return
        first = rows[0]
        self._schedule(k, _final_at(recs[first[_SEQ]], first, within), first[_START])

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
        out.extend(self.emit_cti(self.in_cti))
        return out

    # -- matching -----------------------------------------------------------------------------
    def _change(self, ks: list[Any], at: int, news: list[tuple[Any, ...]], deleted: bool,
                out: list[Message]) -> None:
        """Rows of the order keys ``news`` (sorted) were inserted, the first at position
        ``at`` (or one was deleted from there): re-run the attempts they may change and
        output the difference."""
        rows, recs, reaching = ks
        kk, last_k = news[0], news[-1]
        s_k = kk[0]
        within = self.within
        # the earliest attempt that read the row's place or wanted a row there: one that
        # read past its first row or wanted more (the others read only their own row)
        p = at
        for seq, first in list(reaching.items()):
            rec = recs.get(seq)
            if rec is None or not (rec[_WANTS] or rec[_REACH] != first):
                del reaching[seq]  # (freed, covered by a match, or no longer reaching)
            elif first < kk and (kk <= rec[_REACH] or (
                    not deleted and rec[_WANTS] and s_k < first[0] + within)):
                q = bisect_left(rows, first, 0, p)
                if q < p:
                    p = q
        n = len(rows)
        pos = p
        while pos < n:
            r = rows[pos]
            rec = recs.get(r[_SEQ])
            if rec is not None:
                rk = r[:3]
                if rk > last_k:
                    break  # the old attempt sequence from here on is the new one
                # (the first change after the attempt's row is the one it may have read)
                c = news[bisect_right(news, rk)] if len(news) > 1 else kk
                if not (c <= rec[_REACH] or (
                        not deleted and rec[_WANTS] and c[0] < r[_START] + within)):
                    # before the change and did not read it: as it was
                    pos = pos + 1 if rec[_END] is None else bisect_left(rows, rec[_END], pos) + 1
                    continue
            new = self._attempt(rows, pos)
            old_out = None if rec is None else rec[_OUT]
            new_out = new[_OUT]
            if not self.final:
                if old_out is not None:
                    if new_out is not None and _same(old_out, new_out):
                        new[_OUT] = new_out = old_out
                    else:
                        self._retract(old_out, out)
                if new_out is not None and new_out is not old_out:
                    oid = self._mint()
                    new[_OUT] = (*new_out[:3], oid)
                    out.append(_new(Insert, (oid, *new_out[:3])))
            recs[r[_SEQ]] = new
            if new[_WANTS] or new[_REACH] != r[:3]:
                reaching[r[_SEQ]] = r[:3]
            if new[_END] is None:
                pos += 1
                continue
            last = pos + new[_LEN]
            for x in range(pos + 1, last + 1):
                covered = recs.pop(rows[x][_SEQ], None)
                if covered is not None and covered[_OUT] is not None and not self.final:
                    self._retract(covered[_OUT], out)
            pos = last + 1
            new.pop()  # (the length, needed only here)

    def _attempt(self, rows: list[Row], i: int) -> list[Any]:
        """The match attempt from ``rows[i]``: a record ``[end, reach, wants, out, length]``
        (``length``: rows after the first, a match only)."""
        first = rows[i]
        code, preds = self.program.code, self.preds
        if code[0][0] == SYM:  # most patterns open with a symbol: a row it refuses is done
            a = code[0][1]
            pred = preds[a]
            if pred is not None:
                b = first[_BITS] >> 2 * a
                if not (b & 2 if b & 1 else self._test(pred, a, first[_PAYLOAD], self.empty)):
                    return [None, first[:3], False, None]
        j = bisect_left(rows, (first[_START] + self.within,), i)
        syms: list[int] = []
        view = Match(self.index, rows, i, syms)
        stack: list[tuple[int, int, tuple[int, ...]]] = []
        regs: tuple[int, ...] = (-1,) * self.program.registers
        pc, pos, reach, wants = 0, i, i, False
        while True:
            op, a, b = code[pc]
            if op == SYM:
                if pos < j:
                    if pos > reach:
                        reach = pos
                    pred = preds[a]
                    if pred is None or (
                            (rows[pos][_BITS] >> 2 * a) & 2 if (rows[pos][_BITS] >> 2 * a) & 1
                            else self._test(pred, a, rows[pos][_PAYLOAD], view)):
                        syms.append(a)
                        pos += 1
                        pc += 1
                        continue
                else:
                    wants = True
            elif op == SPLIT:
                stack.append((b, pos, regs))
                pc = a
                continue
            elif op == JMP:
                pc = a
                continue
            elif op == SAVE:
                regs = (*regs[:a], pos, *regs[a + 1:])
                pc += 1
                continue
            elif op == PROGRESS:
                if regs[a] != pos:
                    pc += 1
                    continue
            elif op == MATCH and pos > i:
                last = rows[pos - 1]
                bound = {s: view[s] for s in self.index}
                payload = bound if self.measures is None else self.measures(bound)
                return [last[:3], rows[reach][:3], wants,
                        (first[_START], last[_START] + 1, payload, None), pos - 1 - i]
            if not stack:
                return [None, rows[reach][:3], wants, None]
            pc, pos, regs = stack.pop()
            del syms[pos - i:]

    def _test(self, pred: Callable[[Any, Any], Any], sym: int, payload: Any,
              view: Match) -> bool:
        try:
            return bool(pred(payload, view))
        except Exception as exc:
            name = self.program.names[sym]
            text = (f"detect({self.pattern!r}): define[{name!r}] "
                    f"({getattr(pred, '__name__', pred)!s}) raised on the payload {payload!r}: "
                    f"{exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}")
            # the same kind of error (a KeyError's message would be quoted: a LookupError)
            kind = LookupError if isinstance(exc, KeyError) else type(exc)
            try:
                wrapped = kind(text)
            except Exception:  # noqa: BLE001 - an exception class with other arguments
                wrapped = RuntimeError(text)
            raise wrapped from exc

    def _mint(self) -> FreshId:
        oid = FreshId(self.minted, 0)
        self.minted += 1
        return oid

    def _retract(self, o: tuple[Any, ...], out: list[Message]) -> None:
        out.append(_new(Retract, (o[3], o[0], o[1], o[0], o[2])))

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
                rec = recs.get(row[_SEQ])
                assert rec is not None, f"no attempt recorded at row {row!r}"
                again = self._attempt(rows, pos)
                assert rec[:3] == again[:3], f"attempt at {row!r}: {rec} != {again}"
                assert (rec[_OUT] is None) == (again[_OUT] is None)
                if rec[_OUT] is not None:
                    assert rec[_OUT][:2] == again[_OUT][:2] and _same(rec[_OUT], again[_OUT])
                    assert (rec[_OUT][3] is None) == self.final
                expected.add(row[_SEQ])
                if rec[_WANTS] or rec[_REACH] != row[:3]:
                    assert reaching.get(row[_SEQ]) == row[:3], \
                        f"attempt at {row!r} reads past its row, not indexed"
                pos += 1 if again[_END] is None else again[_LEN] + 1
            assert set(recs) == expected, "records at rows inside a match"
            held.update((k, row[:3]) for row in rows)
        for eid, entry in self.ids.items():
            assert entry in held, f"id {eid!r} names a row no key holds"
        for k, (rows, recs, _) in self.keys.items():
            if k in self.touched or not rows:
                continue
            first = rows[0]
            assert self.front_of.get(k) == first[_START], f"key {k!r}: front not scheduled"
            assert self.woken.get(k) == _final_at(recs[first[_SEQ]], first, self.within), \
                f"key {k!r}: its first open attempt is not scheduled"
            assert (self.woken[k], k) in {(t, kk) for t, _, kk in self.wake}


_LEN = 4


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


def _final_at(rec: list[Any], first: Row, within: int) -> int:
    """The first CTI at which the attempt ``rec`` from row ``first`` is final: past every row
    it read and, if it wanted more rows, past ``start + within``."""
    at = rec[_REACH][0] + 1
    if rec[_WANTS] and first[_START] + within > at:
        at = first[_START] + within
    return at


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Two outputs with the same lifetime and payload (a payload that cannot be compared is
    taken as changed)."""
    try:
        return a[0] == b[0] and a[1] == b[1] and bool(a[2] == b[2])
    except Exception:  # noqa: BLE001 - e.g. numpy arrays: retract and insert again
        return False
