"""The column mode of :class:`operators.detect.Detect` (a base class of it): while every
predicate is decided column-wise and each key's rows come in start order, the rows stay
columns and attempts run the automaton of :mod:`operators.detect_columns` over symbol masks.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from .columns import Columns, apply_columns
from .detect_columns import (
    Automaton,
    ColumnKey,
    ColumnState,
    TooLarge,
    bind,
    key_runs,
    shape,
)
from .detect_matching import Matching
from .detect_rows import BOUND_MOST, DECIDED_MOST, Row, new_tuple, same_output
from .detect_seeing import EndedRuns
from .events import Insert, Message


class ColumnMode(Matching):
    """The column mode's methods, on the operator's state."""

    # (the operator's state: declared on Matching, made by Detect.__init__)
    cols: ColumnState
    _automaton: Automaton | bool | None
    _table: np.ndarray | None
    _bound: dict[tuple[int, ...], list[slice | list[int]]]
    _opens: dict[int, bool]
    ended: EndedRuns
    front_of: dict[Hashable, int]
    woken: dict[Hashable, int]

    if TYPE_CHECKING:  # (the operator's own)
        def _add(self, eid: Hashable, start: int, payload: Any, bits: int,
                 seq: int | None = None) -> tuple[Hashable, tuple[Any, ...]]: ...

        def _schedule(self, k: Hashable, at: int, front: int) -> None: ...

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
            elif decided is None or sym >= DECIDED_MOST or not (decided[0] >> 2 * sym) & 1:
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
        masks = masks[order]  # (from here on in key order, as ``starts``)
        masks_l = masks.tolist()
        # the rows an attempt may get past (the others read their own row and fail), found
        # for the whole batch at once where the symbols are few
        table = self._opening(auto)
        opening: list[int] | None = None
        if table is not None:
            found = np.flatnonzero(table[masks])
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
                ck = cols.new_key(k)
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
        firsts, ends, reach, wants = ck.firsts, ck.ends, ck.reach, ck.wants
        results, oids = ck.results, ck.oids
        final = self.final
        cut = bisect_left(firsts, seqs[p])
        old: dict[int, tuple[Any, ...]] = {}
        if cut < len(firsts):  # (the outputs of the attempts run again, by their first row)
            if not final:
                old = {firsts[a]: ck.output(a) for a in range(cut, len(firsts))
                       if ends[a] is not None}
            ck.cut(cut)
        opens, start_state, step, run = self._opens, auto.start, auto.step, auto.run
        within = self.within
        n, last = len(starts), starts[-1]
        # (the list of open attempts filled again, not a new one: one object fewer per key
        # and batch for the cyclic collector)
        still = ck.open
        still.clear()
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
            end, read, wanted = run(masks, pos, j)
            if end is None and read == pos and not wanted:
                continue
            g = seqs[pos]
            firsts.append(g)
            reach.append(seqs[read])
            wants.append(wanted)
            prev = None if final else old.pop(g, None)
            if end is None:
                ends.append(None)
                results.append(None)
                oids.append(None)
                if prev is not None:
                    self._retract(prev, out)
            else:
                cover = end
                ends.append(seqs[end])
                result, oid = self._measured(ck, pos, end), None
                if not final:
                    start, stop = starts[pos], starts[end] + 1
                    if prev is not None:
                        if same_output(prev, (start, stop, result)):
                            result, oid = prev[2], prev[3]
                        else:
                            self._retract(prev, out)
                    if oid is None:
                        oid = self._mint()
                        out.append(new_tuple(Insert, (oid, start, stop, result)))
                results.append(result)
                oids.append(oid)
            if wanted and starts[pos] + within > last:
                still.append(g)
        for prev in old.values():
            self._retract(prev, out)

    def _measured(self, ck: ColumnKey, i: int, e: int) -> Any:
        """The payload of the match of a column key's rows ``i .. e`` (what ``measures``
        gives)."""
        # (the rows bound to each symbol depend on the match's masks only: matches repeat a
        # few shapes)
        masks = tuple(ck.masks[i:e + 1])
        shapes = self._bound
        at = shapes.get(masks)
        if at is None:
            if len(shapes) >= BOUND_MOST:
                shapes.clear()
            at = shapes[masks] = shape(bind(self.program, ck.masks, i, e), len(self.index))
        rows = self.cols.payloads(ck.seqs[i:e + 1])
        bound = {name: tuple(rows[x]) if type(x) is slice else tuple([rows[y] for y in x])
                 for name, x in zip(self.index, at)}
        return bound if self.measures is None else self.measures(bound)

    def _settle_columns(self, k: Hashable, ck: ColumnKey, time: int,
                        out: list[Message]) -> None:
        """:meth:`_settle` for a key in the column mode."""
        starts, seqs = ck.starts, ck.seqs
        firsts, ends, reach, wants = ck.firsts, ck.ends, ck.reach, ck.wants
        within, ended, final = self.within, self.ended.runs, self.final
        pos, ai, n, held = 0, 0, len(starts), len(firsts)
        # the rows from ``late`` on start at or after the CTI: an attempt that read one of
        # them (its last row read came at or after ``late_seq``) is not final
        late = bisect_left(starts, time)
        late_seq = seqs[late] if late < n else self.seq
        while pos < n:
            rp = bisect_left(seqs, firsts[ai], pos) if ai < held else n
            if rp > pos:  # attempts that read only their own row
                pos = min(late, rp)
                if pos < rp or rp == n:
                    break
            if reach[ai] >= late_seq or (wants[ai] and starts[pos] + within > time):
                break
            e = ends[ai]
            if e is None:  # a candidate ends: its record and key, read at the CTI's end
                ended.append((firsts[ai], reach[ai], wants[ai], k))
                pos += 1
            else:
                end = bisect_left(seqs, e, pos)
                if final:
                    out.append(new_tuple(Insert, (self._mint(), starts[pos], starts[end] + 1,
                                                  ck.results[ai])))
                pos = end + 1
            ai += 1
        if pos:
            ck.drop(pos, ai)
        if not starts:
            self.cols.free_key(k)
            self.front_of.pop(k, None)
            self.woken.pop(k, None)
            return
        if firsts and firsts[0] == seqs[0]:
            at = starts[bisect_left(seqs, reach[0])] + 1
            if wants[0] and starts[0] + within > at:
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
            seqs, firsts = ck.seqs, ck.firsts
            recs: dict[int, list[Any]] = {}
            reaching: dict[int, tuple[Any, ...]] = {}
            pos, ai, n = 0, 0, len(rows)
            while pos < n:
                g = seqs[pos]
                if ai < len(firsts) and firsts[ai] == g:
                    e = ck.ends[ai]
                    end = None if e is None else bisect_left(seqs, e, pos)
                    reach = bisect_left(seqs, ck.reach[ai], pos)
                    recs[g] = [None if end is None else rows[end][:3], rows[reach][:3],
                               ck.wants[ai], None if end is None else ck.output(ai)]
                    if ck.wants[ai] or reach != pos:
                        reaching[g] = rows[pos][:3]
                    ai += 1
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
            cols.readers.clear()
