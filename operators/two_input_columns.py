"""The column-wise state of the two-input temporal operators: live events as arrays.

While a temporal join receives only :class:`~operators.columns.Columns` batches, each input's
live events are parallel numpy arrays (:class:`ColumnEvents`: sequence number, key code,
start, end, id and the payload columns), and the matches of a new batch are found for all its
events at once by :func:`overlapping_pairs`: both sides ordered by ``(key code, start)``, two
``searchsorted`` calls per batch give each new event the range of partners with its key that
start before its end, and one vectorised filter keeps those that end after its start::

    other input, by (code, start)   code 0: [0 ── 4) [2 ───── 9)   code 1: [1 ─ 3) [5 ── 8)
    new event  code 0, [3 ─── 7)    candidates: both of code 0 (start < 7); partners: both
                                    (end > 3)

Keys become small integer codes by Python's own equality and hashing (:class:`KeyCodes`:
``1``, ``1.0`` and ``True`` are one key, as in a dict), so a key means what it means on the
per-event path. Anything these arrays cannot hold exactly (a key column with NaN or values
that do not hash, payload columns whose form or dtypes change between batches) is declined
with None, and the operator goes on event by event (:mod:`operators.join`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from .columns import FreshIds, map_columns
from .events import MAX_TIME

_EMPTY = np.zeros(0, dtype=np.int64)


class KeyCodes:
    """Keys as dense int64 codes, equal keys (by ``==`` and ``hash``) one code.

    >>> kc = KeyCodes()
    >>> kc.encode(np.array([3, 1, 3])).tolist(), kc.encode(np.array([1.0, 2.5])).tolist()
    ([1, 0, 1], [0, 2])
    >>> kc.keys
    [1, 3, 2.5]
    >>> kc.encode(np.array(["a", 3, "a", True], dtype=object)).tolist()  # True == 1
    [3, 1, 3, 0]
    >>> kc.encode(np.array(["a", float("nan")], dtype=object)) is None  # NaN: per event
    True
    """

    __slots__ = ("base", "codes", "keys", "lookup")

    #: integer keys are looked up in an array while they span at most this many values
    SPAN = 1 << 22

    def __init__(self) -> None:
        self.codes: dict[Hashable, int] = {}
        self.keys: list[Hashable] = []
        #: the codes of integer keys base, base + 1, ... (-1: not coded yet), a cache of
        #: ``codes`` so that an integer column is coded without a Python call per key
        self.base = 0
        self.lookup = np.zeros(0, dtype=np.int64)

    def _code(self, key: Hashable) -> int:
        code = self.codes.get(key)
        if code is None:
            code = self.codes[key] = len(self.keys)
            self.keys.append(key)
        return code

    def encode(self, column: np.ndarray) -> np.ndarray | None:
        """The codes of a key column, or None when it cannot be coded exactly (NaN, which a
        dict tells apart by identity; values that do not hash)."""
        kind = column.dtype.kind
        if kind in "iu" and len(column):
            codes = self._integers(column)
            if codes is not None:
                return codes
        if kind == "f" and np.isnan(column).any():
            return None
        if kind in "iubfUS":
            uniq, inverse = np.unique(column, return_inverse=True)
            codes = np.array(self._codes_of(uniq.tolist()), dtype=np.int64)
            return codes[inverse.reshape(-1)]
        values = column.tolist()
        try:
            # the keys seen before are looked up without a Python call each (a string key
            # column of a few meters, joined batch after batch), the others coded one by one
            found = list(map(self.codes.get, values))
            if None in found:
                for i in [i for i, c in enumerate(found) if c is None]:
                    v = values[i]
                    if type(v) is float and v != v:  # (a NaN is never coded: never found)
                        return None
                    found[i] = self._code(v)
        except TypeError:  # an unhashable key: the per-event path raises it
            return None
        return np.array(found, dtype=np.int64)


    def _integers(self, column: np.ndarray) -> np.ndarray | None:
        lo, hi = int(column.min()), int(column.max())
        if lo < -(2**62) or hi > 2**62:  # (offsets must not wrap in int64)
            return None
        table = self.lookup
        if not len(table):
            self.base = lo
        base = self.base
        new_lo, new_hi = min(lo, base), max(hi, base + len(table) - 1)
        if new_hi - new_lo >= self.SPAN:
            return None
        if new_lo < base or new_hi >= base + len(table):
            # widen the table, upwards with as much room again (keys that grow batch after
            # batch, such as Nexmark's person ids, copied the whole table at every batch)
            top = max(new_hi, min(new_lo + self.SPAN - 1, new_hi + len(table)))
            wider = np.full(top - new_lo + 1, -1, dtype=np.int64)
            wider[base - new_lo:base - new_lo + len(table)] = table
            self.base, self.lookup, base, table = new_lo, wider, new_lo, wider
        offsets = column.astype(np.int64) - base
        codes = table[offsets]
        missing = codes < 0
        if missing.any():
            values = np.unique(column[missing])
            table[values - base] = self._codes_of(values.tolist())
            codes = table[offsets]
        return codes

    def _codes_of(self, values: list[Hashable]) -> list[int]:
        """:meth:`_code` of each of ``values`` (distinct), the new ones coded in bulk: no
        Python call per key (half a million new person ids cost 1.9 s one call each)."""
        found = list(map(self.codes.get, values))
        if None in found:
            fresh = [v for v, c in zip(values, found) if c is None]
            if len(set(fresh)) < len(fresh):  # equal keys among them: one code, in order
                return list(map(self._code, values))
            first = len(self.keys)
            self.keys.extend(fresh)
            self.codes.update(zip(fresh, range(first, first + len(fresh))))
            found = list(map(self.codes.__getitem__, values))
        return found  # type: ignore[return-value]  # (every value is coded now)


def concat_payload(a: Any, b: Any) -> Any:
    """Payload columns ``a`` then ``b`` (same form, names and dtypes), or None when they
    differ: concatenating an int column with a float one would change its values."""
    if a is None:
        return b
    if isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            return None
        parts = [(a[k], b[k]) for k in a]
    elif isinstance(a, tuple):
        if not isinstance(b, tuple) or len(a) != len(b):
            return None
        parts = list(zip(a, b))
    else:
        if isinstance(b, (dict, tuple)):
            return None
        parts = [(a, b)]
    if any(x.dtype != y.dtype for x, y in parts):
        return None
    joined = [np.concatenate(p) for p in parts]
    if isinstance(a, dict):
        return dict(zip(a, joined))
    return tuple(joined) if isinstance(a, tuple) else joined[0]


def payload_parts(payload: Any) -> list[np.ndarray]:
    """The columns of payload columns, in order."""
    if payload is None:
        return []
    if isinstance(payload, dict):
        return list(payload.values())
    return list(payload) if isinstance(payload, tuple) else [payload]


def payload_like(payload: Any, cols: list[np.ndarray]) -> Any:
    """``cols`` in the form of ``payload`` (a dict of the same names, a tuple, one column)."""
    if payload is None:
        return None
    if isinstance(payload, dict):
        return dict(zip(payload, cols))
    return tuple(cols) if isinstance(payload, tuple) else cols[0]


def same_form(a: Any, b: Any) -> bool:
    """Whether payload columns ``b`` can follow ``a``: the same form, names and dtypes
    (an int column followed by a float one would change its values)."""
    if (a is None) != (b is None):
        return False
    if isinstance(a, dict) != isinstance(b, dict) or isinstance(a, tuple) != isinstance(b, tuple):
        return False
    if isinstance(a, dict) and list(a) != list(b):
        return False
    pa, pb = payload_parts(a), payload_parts(b)
    return len(pa) == len(pb) and all(x.dtype == y.dtype for x, y in zip(pa, pb))


def put_rows(buf: np.ndarray, n: int, more: np.ndarray) -> np.ndarray:
    """``buf`` (its first ``n`` rows held) with ``more`` written after them: in place while
    it has room, else in a buffer twice as large, so that appending costs O(batch)."""
    m = len(more)
    if len(buf) < n + m or buf.dtype != more.dtype:
        grown = np.empty(max(2 * (n + m), 1024), dtype=more.dtype)
        grown[:n] = buf[:n]
        buf = grown
    buf[n:n + m] = more
    return buf


class ColumnEvents:
    """One input's live events as parallel arrays; ``ids`` also as a set (unique ids), or,
    while every event held came in an unminted :class:`~operators.columns.FreshIds` column of
    one origin, as the numbers ``n`` of their ids (``fresh``: that origin and the largest
    ``n`` added since): a window's ids, minted in increasing order, are told apart from the
    ones held by that number alone, with no Python object or hash per id. Anything else (another
    origin, numbers not above the largest, ordinary ids) mints the ids held first.

    The arrays are views of the first ``len(self)`` rows of buffers with room to spare
    (``_bufs``): an append writes its rows after them, amortised O(batch) instead of copying
    every live event (a side that only grows, such as bids stretched to 100 years, holds
    hundreds of thousands); a view handed out earlier keeps its rows (nothing is written over
    them; :meth:`keep` makes new arrays)."""

    __slots__ = ("_bufs", "_ids", "_least_end", "_order", "code", "end", "fresh", "idset",
                 "payload", "seq", "start")

    def __init__(self) -> None:
        self.seq, self.code, self.start, self.end = _EMPTY, _EMPTY, _EMPTY, _EMPTY
        #: the ids (an object array), or while ``fresh``, their numbers (int64)
        self._ids: np.ndarray = np.zeros(0, dtype=object)
        self.idset: set[Hashable] = set()
        self.fresh: tuple[str, int] | None = None
        self.payload: Any = None
        self._order: tuple[np.ndarray, ...] | None = None
        #: the buffers behind seq, code, start, end, ids and the payload columns
        self._bufs: list[np.ndarray] | None = None
        #: the smallest end held, kept through appends (None: not known)
        self._least_end: int | None = None

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def ids(self) -> np.ndarray:
        """The ids held, as an object array (minted if ``fresh``)."""
        if self.fresh is None:
            return self._ids
        return FreshIds(self.fresh[0], self._ids).minted()

    def append(self, seq: np.ndarray, code: np.ndarray, start: np.ndarray, end: np.ndarray,
               ids: np.ndarray | FreshIds, payload: Any) -> bool:
        """Add events; False (and nothing changes but how the ids held are kept) when their
        payload columns do not match the ones held or an id is live already (the per-event
        path says why)."""
        n = len(self)
        if n and not same_form(self.payload, payload):
            return False
        if not len(ids):
            return True
        numbers = self._numbers(ids)
        if numbers is not None:
            column = numbers
            self.fresh = (ids.origin, int(numbers[-1]))  # type: ignore[union-attr]
        else:
            if type(ids) is FreshIds:
                ids = ids.minted()
            if n and self.fresh is not None:
                self._mint_held()
            # one hash per id: a set's own operations with another set reuse the hashes it
            # stores (a FreshId hashes in Python, ~0.2 µs)
            new_ids = set(ids.tolist())  # type: ignore[union-attr]
            if len(new_ids) != len(ids) or not self.idset.isdisjoint(new_ids):
                return False
            self.fresh = None
            self.idset.update(new_ids)
            column = ids.astype(object)  # type: ignore[union-attr]
        form = payload if n == 0 else self.payload
        mores = [seq.astype(np.int64), code.astype(np.int64), start.astype(np.int64),
                 end.astype(np.int64), column, *payload_parts(payload)]
        bufs = self._bufs
        if bufs is None or n == 0 or len(bufs) != len(mores):
            bufs = [np.zeros(0, dtype=m.dtype) for m in mores]
        bufs = [put_rows(b, n, m) for b, m in zip(bufs, mores)]
        self._view(bufs, n + len(ids), form)
        least = getattr(self, "_least_end", None) if n else MAX_TIME  # (None: not known)
        if least is not None:
            self._least_end = min(least, int(mores[3].min()))
        if self._order is not None and n:  # the index kept: the new events merged into it
            self._order = merged_index(self._order, n, *mores[1:4])
        else:
            self._order = None
        return True

    def _numbers(self, ids: np.ndarray | FreshIds) -> np.ndarray | None:
        """The numbers of unminted ``ids`` when the side may keep them as numbers: it holds
        nothing or only numbers of their origin, and they increase, from above the largest
        added (so none is held: equal FreshIds are those of equal numbers); else None."""
        if type(ids) is not FreshIds:
            return None
        ns = ids.ns
        if len(self):
            if self.fresh is None or self.fresh[0] != ids.origin:
                return None
            if len(ns) and int(ns[0]) <= self.fresh[1]:
                return None
        if len(ns) > 1 and not bool((ns[1:] > ns[:-1]).all()):
            return None
        return ns.astype(np.int64)

    def _mint_held(self) -> None:
        """Keep the ids held as FreshId objects and in ``idset``, as ordinary ids are."""
        assert self.fresh is not None and self._bufs is not None
        ids = FreshIds(self.fresh[0], self._ids).minted()
        self.fresh = None
        self.idset = set(ids.tolist())
        bufs = list(self._bufs)
        bufs[4] = ids
        self._view(bufs, len(self), self.payload)

    def _view(self, bufs: list[np.ndarray], n: int, form: Any) -> None:
        """The arrays as the first ``n`` rows of ``bufs`` (payload in the form of ``form``)."""
        self._bufs = bufs
        self.seq, self.code, self.start, self.end, self._ids = (b[:n] for b in bufs[:5])
        self.payload = payload_like(form, [b[:n] for b in bufs[5:]])

    def keep(self, mask: np.ndarray) -> np.ndarray:
        """Keep the events where ``mask`` is true (the others are freed); returns the sequence
        numbers of the freed ones."""
        if mask.all():
            return _EMPTY
        freed = self.seq[~mask]
        self._least_end = None
        if self.fresh is None:  # (numbers are in no set)
            self.idset.difference_update(self._ids[~mask].tolist())
        self.seq, self.code = self.seq[mask], self.code[mask]
        self.start, self.end, self._ids = self.start[mask], self.end[mask], self._ids[mask]
        self.payload = map_columns(self.payload, lambda c: c[mask]) if len(self.seq) else None
        self._bufs = ([self.seq, self.code, self.start, self.end, self._ids,
                       *payload_parts(self.payload)] if len(self.seq) else None)
        if self._order is not None:  # still sorted once the freed events are taken out
            order, code, start, end = self._order
            kept = mask[order]
            position = np.cumsum(mask) - 1  # old position -> new position
            self._order = (position[order[kept]], code[kept], start[kept], end[kept])
        return freed

    def least_end(self) -> int:
        """The smallest end held (``MAX_TIME`` when empty): whether any event ended before a
        time is known without a pass over a side that only grows (bids stretched to 100
        years: a pass at every CTI was 15 % of Nexmark Q4's join)."""
        least = getattr(self, "_least_end", None)  # (a state saved before it was kept)
        if least is None:
            least = self._least_end = int(self.end.min()) if len(self.end) else MAX_TIME
        return least

    def by_key_and_start(self) -> tuple[np.ndarray, ...]:
        """``(order, code, start, end)``: the events' positions sorted by (code, start) and
        their columns in that order (cached until the events change)."""
        if self._order is None:
            self._order = by_key_and_start(self.code, self.start, self.end)
        return self._order

    def with_codes(self, codes: np.ndarray) -> tuple[np.ndarray, ...]:
        """The index of :meth:`by_key_and_start` restricted to the events whose code is in
        ``codes``: all :func:`overlapping_pairs` needs to match a batch with these codes.
        Without the cached order, this costs one pass over the events and a sort of the
        candidates instead of a sort of every event: a side that only grows (a join's
        :data:`FOREVER`-long bids, probed by each batch of a small other side) would otherwise
        be sorted again, whole, after every batch it received."""
        if self._order is not None or 8 * len(codes) >= len(self.code):
            return self.by_key_and_start()
        top = int(max(self.code.max(), codes.max())) + 1
        wanted = np.zeros(top, dtype=bool)
        wanted[codes] = True
        pos = np.flatnonzero(wanted[self.code])
        order, code, start, end = by_key_and_start(self.code[pos], self.start[pos],
                                                   self.end[pos])
        return pos[order], code, start, end

    def check(self) -> None:
        n = len(self.seq)
        assert len(self.code) == len(self.start) == len(self.end) == len(self._ids) == n
        assert (self.end > self.start).all()
        if self.fresh is not None:
            assert not self.idset and len(np.unique(self._ids)) == n
            assert n == 0 or int(self._ids.max()) <= self.fresh[1]
        else:
            assert self.idset == set(self._ids.tolist()) and len(self.idset) == n
        assert len(np.unique(self.seq)) == n


def by_key_and_start(code: np.ndarray, start: np.ndarray, end: np.ndarray
                     ) -> tuple[np.ndarray, ...]:
    """``(order, code, start, end)``: positions sorted by (code, start) and the columns in that
    order, the index :func:`overlapping_pairs` searches."""
    order = np.lexsort((start, code))
    return order, code[order], start[order], end[order]


def merged_index(index: tuple[np.ndarray, ...], first: int, code: np.ndarray,
                 start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """:func:`by_key_and_start` of ``first`` events indexed by ``index`` and of new ones
    (``code``, ``start``, ``end``, at positions ``first`` on): the new ones sorted alone and
    merged in by a stable sort of the two sorted runs (one merge: W3's join sorted its whole
    side again after every batch, 40 % of its time), the same index as sorting them all;
    None (sorted again when asked) when the combined key would overflow int64."""
    order, ocode, ostart, oend = index
    norder, ncode, nstart, nend = by_key_and_start(code, start, end)
    if not len(order):
        return norder + first, ncode, nstart, nend
    lo = min(int(ostart.min()), int(nstart.min()))
    span = max(int(ostart.max()), int(nstart.max())) - lo + 1
    if (max(int(ocode.max()), int(ncode.max())) + 1) * span >= 2**62 or min(
            int(ocode.min()), int(ncode.min())) < 0:
        return None
    keys = np.concatenate((ocode * span + (ostart - lo), ncode * span + (nstart - lo)))
    merge = np.argsort(keys, kind="stable")  # (ties: the earlier events first, as a sort)
    return (np.concatenate((order, norder + first))[merge],
            np.concatenate((ocode, ncode))[merge], np.concatenate((ostart, nstart))[merge],
            np.concatenate((oend, nend))[merge])


def overlapping_pairs(other: ColumnEvents | tuple[np.ndarray, ...], code: np.ndarray,
                      start: np.ndarray, end: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(i, j)``: every new event ``i`` (``code``, ``start``, ``end``) and position ``j`` in
    ``other`` with the same code whose lifetimes overlap; None when the combined sort key
    would overflow int64 (then the caller goes event by event). ``other`` is a
    :class:`ColumnEvents` or any spans indexed by :func:`by_key_and_start`.

    >>> side = ColumnEvents()
    >>> _ = side.append(np.arange(4), np.array([0, 0, 1, 1]), np.array([0, 2, 1, 5]),
    ...                 np.array([4, 9, 3, 8]), np.array(list("abcd"), dtype=object), None)
    >>> i, j = overlapping_pairs(side, np.array([0, 1]), np.array([3, 3]), np.array([7, 4]))
    >>> sorted(zip(i.tolist(), side.ids[j].tolist()))
    [(0, 'a'), (0, 'b')]
    """
    if isinstance(other, ColumnEvents):
        if not len(other) or not len(code):
            return _EMPTY, _EMPTY
        other = other.with_codes(code)
    if not len(other[0]) or not len(code):
        return _EMPTY, _EMPTY
    order, ocode, ostart, oend = other
    lo_t, hi_t = int(ostart.min()), int(ostart.max())
    span = hi_t - lo_t + 2  # start offsets lie in [0, span - 2]; an end clipped to span - 1
    if (int(max(ocode[-1], code.max())) + 1) * span >= 2**62:
        return None
    key = ocode * span + (ostart - lo_t)  # ascending: sorted by (code, start)
    base = code * span
    # partners start after (new start - the longest lifetime there): skip those that ended
    # long ago (lifetimes capped at hi_t + 2, past every clipped start, so nothing wraps)
    longest = int((np.minimum(oend, min(hi_t + 2, 2**63 - 1)) - ostart).max())
    lo = np.searchsorted(key, base + np.maximum(
        np.clip(start, lo_t, hi_t + 1) - lo_t - longest + 1, 0), side="left")
    hi = np.searchsorted(key, base + (np.clip(end, lo_t, hi_t + 1) - lo_t), side="left")
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        return _EMPTY, _EMPTY
    i = np.repeat(np.arange(len(code)), counts)
    first = np.cumsum(counts) - counts
    cand = lo[i] + (np.arange(total) - first[i])  # candidates start before the new end
    hit = oend[cand] > start[i]  # ... and end after the new start
    return i[hit], order[cand[hit]]


def uncovered(start: np.ndarray, end: np.ndarray, owner: np.ndarray, hole_start: np.ndarray,
              hole_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(g, s, e)``: the maximal pieces ``[s, e)`` of each span ``g`` (``[start[g], end[g])``)
    that none of its holes covers; hole ``h`` belongs to span ``owner[h]`` and overlaps it.
    Sorted by span, then time: the anti-join's fragments, for all spans at once.

    Per span the holes are sorted by start; the running maximum of their ends (taken over
    the codes ``span * R + rank of the end``, so that one cumulative maximum restarts at
    every span) is how far the span is covered; a piece is uncovered between that cover and
    the next hole's start, and from the last cover to the span's end::

        span 0  [0 ──────────────────── 20)      holes [3 ─ 6) [5 ── 9)   [14 ─ 16)
        pieces  [0 ─ 3)          [9 ─── 14)  [16 ─ 20)

    >>> g, s, e = uncovered(np.array([0, 30]), np.array([20, 40]), np.array([0, 0, 0]),
    ...                     np.array([14, 3, 5]), np.array([16, 6, 9]))
    >>> list(zip(g.tolist(), s.tolist(), e.tolist()))
    [(0, 0, 3), (0, 9, 14), (0, 16, 20), (1, 30, 40)]
    """
    n = len(start)
    if not len(owner):
        return np.arange(n), start, end
    order = np.lexsort((hole_start, owner))
    owner, hs, he = owner[order], hole_start[order], np.minimum(hole_end[order], end[owner[order]])
    ends, rank = np.unique(he, return_inverse=True)
    shift = owner * len(ends)
    cover = ends[np.maximum.accumulate(shift + rank.reshape(-1)) - shift]
    first = np.empty(len(owner), dtype=bool)
    first[0] = True
    np.not_equal(owner[1:], owner[:-1], out=first[1:])
    before = np.empty_like(cover)  # the cover just before each hole
    before[1:] = cover[:-1]
    before[first] = start[owner[first]]
    gap = hs > before
    last = np.empty_like(first)
    last[-1] = True
    last[:-1] = first[1:]
    tail_g = owner[last]
    tail_s = cover[last]
    tail = tail_s < end[tail_g]
    untouched = np.ones(n, dtype=bool)
    untouched[owner] = False
    whole = np.flatnonzero(untouched)
    g = np.concatenate([owner[gap], tail_g[tail], whole])
    s = np.concatenate([before[gap], tail_s[tail], start[whole]])
    e = np.concatenate([hs[gap], end[tail_g[tail]], end[whole]])
    order = np.lexsort((s, g))
    return g[order], s[order], e[order]
