"""Per-key progress of an :class:`~operators.ingress.Ingress` (``AdvanceTime(per_key=...)``,
docs/ctis.md): each key (a device) has its own CTI, its own latest start − ``delay`` on its own
``every`` / ``interval``, and the stream's CTI is the low watermark (the largest start seen −
``low_watermark``, or the lowest of the keys' CTIs without one).

An event is late when it starts behind its key's CTI or behind the stream's CTI. The keys whose
CTI moved during a push go out once, at its end, as one
:class:`~operators.events.KeyCtis` listing them (bounded by the events of the push, never a
message per key), after the events they cover; the stream's CTI goes out as a ``Cti`` where it
moves, as with one CTI.

    >>> from operators.ingress import AdvanceTime, Ingress
    >>> src = Ingress(start="t", advance=AdvanceTime(every=1, per_key="m", low_watermark=600))
    >>> out = src.push([{"m": "fast", "t": 1000}, {"m": "slow", "t": 450},
    ...                 {"m": "fast", "t": 1010}, {"m": "slow", "t": 460}])
    >>> [type(m).__name__ for m in out]
    ['Insert', 'Cti', 'Insert', 'Insert', 'Cti', 'Insert', 'KeyCtis']
    >>> out[1], out[4], out[-1]
    (Cti(time=400), Cti(time=410), KeyCtis(times=(('fast', 1010), ('slow', 460))))
    >>> src.push([{"m": "slow", "t": 455}, {"m": "fast", "t": 1005}]), len(src.late)
    ([], 2)
    >>> src.late[0].reason  # doctest: +ELLIPSIS
    "start 455 is behind the CTI 460 of key 'slow'; a point cannot be moved, ..."

**Column batches** (:meth:`IngressKeys._key_columns`) are decided with numpy when the key is a
column of ints or strings, each key's CTI moves after each of its events (``every=1``) or
never (``every=None``), there is a low watermark, ``delay >= 0`` and no event could be moved
(points, or ``policy='drop'``): the same rows are accepted and the same late records kept
as row by row, and the batch's events go out as one ``Columns``, then one ``Cti`` (the low
watermark at the batch's end) and one ``KeyCtis``: the promises the row path makes within the
batch, made at its end instead (later, so just as valid). Why the decision is exact: before
row ``i`` the stream's part of its CTI is ``max(cti, low, P_i − lag)`` with ``P_i`` the largest
start before it, and its key's part is ``max(key's CTI, Q_i − delay)`` with ``Q_i`` the
largest start of its key before it. Both maxima may run over the late rows too: a late row
never starts after ``P_i`` (checked), and a late row ``j`` of the key adds ``s_j − delay``,
which is below the CTI it missed, which row ``i`` is behind as well (both parts only grow).
The keys' state (latest start, CTI) is then read from the accepted rows only.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Any

from .columns import Columns, row_at
from .events import MAX_TIME, MIN_TIME, KeyCtis, Message
from .ingress_progress import IngressProgress
from .udm import field_getter

__all__ = ["IngressKeys"]

# a key's progress: [its latest start, accepted events since its last count-based CTI, its
# latest start at its last interval-based CTI (None: none yet), its CTI, the runtime's clock
# when its last event came (:attr:`IngressKeys.arrival`; None: not given)]
K_LATEST, K_COUNT, K_MARK, K_CTI, K_WALL = range(5)


class IngressKeys(IngressProgress):
    """The per-key CTIs of an ingress (see the module docstring)."""

    _key_of: Callable[[Any], Any] | None
    # the state (what a checkpoint stores, beside IngressProgress's)
    _keys: dict[Hashable, list[Any]]
    _lows: list[tuple[int, int, Hashable]]  # (CTI, n, key): the lowest CTI first
    _pushed: int  # entries ever pushed on _lows (its n: keys are never compared)
    _moved: dict[Hashable, int]  # keys whose CTI moved since the last KeyCtis
    _low: int  # the low watermark (the largest start seen − low_watermark, or the keys' lowest)
    _late_keys: dict[Hashable, int]  # late rows (dropped or adjusted) by key
    #: The runtime's clock (:attr:`Processor.clock`) when the rows being pushed came, set by
    #: the caller (:class:`~operators.sources.RowsSource`): each key's last arrival, a
    #: diagnostic for ``why`` (it decides nothing; None: not given)
    arrival: float | None = None

    def _init_keys(self) -> None:
        key = self.advance.per_key
        self._key_of = None if key is None else field_getter(key)
        self._keys = {}
        self._lows = []
        self._pushed = 0
        self._moved = {}
        self._low = MIN_TIME
        self._late_keys = {}

    def _key_cti(self, key: Hashable) -> int:
        """The CTI an event of ``key`` must not start behind: its key's or the stream's (the
        low watermark as it is now, which goes out as a CTI when a key's CTI does)."""
        progress = self._keys.get(key)
        cti = self.cti if self.cti > self._low else self._low
        return cti if progress is None or progress[K_CTI] < cti else progress[K_CTI]

    def _generate_key(self, key: Hashable, start: int, out: list[Message]) -> None:
        """After an accepted event of ``key`` that started at ``start`` (as read from the
        row): that key's count- and time-based CTIs, and the stream's low watermark."""
        adv = self.advance
        progress = self._keys.get(key)
        if progress is None:
            # a new key starts at the stream's CTI, and holds the lowest of the keys there
            cti = self.cti if self.cti > self._low else self._low
            progress = self._keys[key] = [start, 0, None, cti, self.arrival]
            self._push_low(key, cti)
        else:
            progress[K_WALL] = self.arrival
            if start > progress[K_LATEST]:
                progress[K_LATEST] = start
        fire = False
        if adv.every is not None:
            progress[K_COUNT] += 1
            if progress[K_COUNT] >= adv.every:
                progress[K_COUNT] = 0
                fire = True
        if adv.interval is not None:
            latest, mark = progress[K_LATEST], progress[K_MARK]
            if mark is None:
                progress[K_MARK] = latest
            elif latest - mark >= adv.interval:
                progress[K_MARK] = latest
                fire = True
        if fire:
            t = min(max(progress[K_LATEST] - adv.delay, MIN_TIME), MAX_TIME)
            if t > progress[K_CTI]:
                progress[K_CTI] = t
                self._moved[key] = t
                self._push_low(key, t)
        lag = adv.low_watermark
        low = self._latest - lag if lag is not None else self._lowest()
        if low > self._low:
            self._low = min(max(low, MIN_TIME), MAX_TIME)
        if fire and self._low > self.cti:  # the stream's CTI goes out on the keys' schedule
            self._emit(out, self._low)

    def _push_low(self, key: Hashable, t: int) -> None:
        """Record that ``key``'s CTI is now ``t``, for :meth:`_lowest` (without a low
        watermark only)."""
        if self.advance.low_watermark is not None:
            return
        lows = self._lows
        self._pushed += 1
        heapq.heappush(lows, (t, self._pushed, key))
        if len(lows) > 2 * len(self._keys) + 64:  # stale entries: keep the heap bounded
            self._lows = [(p[K_CTI], self._pushed + i, k)
                          for i, (k, p) in enumerate(self._keys.items(), 1)]
            self._pushed += len(self._lows)
            heapq.heapify(self._lows)

    def _lowest(self) -> int:
        """The lowest CTI of the keys seen (the stream's CTI without a low watermark)."""
        lows, keys = self._lows, self._keys
        while lows and keys[lows[0][2]][K_CTI] != lows[0][0]:
            heapq.heappop(lows)  # a key's older CTI
        return lows[0][0] if lows else MIN_TIME

    #: Whether :meth:`_key_ctis` sends the keys' CTIs (the planner turns it off where no step
    #: uses them: :mod:`topology.planning.key_progress`); they steer lateness either way.
    send_key_ctis = True

    def _key_ctis(self, out: list[Message]) -> None:
        """At the end of a push: one KeyCtis of the keys whose CTI moved past the stream's."""
        if self._moved and not self.send_key_ctis:
            self._moved = {}
        elif self._moved:
            cti = self.cti
            times = [(k, t) for k, t in self._moved.items() if t > cti]
            self._moved = {}
            if times:
                out.append(KeyCtis(times))  # type: ignore[arg-type]  # beside the messages

    # -- column batches ---------------------------------------------------------------------------
    def _keys_vectorisable(self) -> bool:
        """Whether per-key progress lets a column batch be decided with numpy (see the module
        docstring; the caller checks the rest: shape, minted ids, no ``interval``)."""
        adv = self.advance
        return (isinstance(adv.per_key, str) and adv.every in (None, 1)
                and adv.low_watermark is not None and adv.delay >= 0
                and (self.shape == "point" or adv.policy == "drop"))

    def _key_columns(self, columns: dict[str, Any], starts: Any, ends: Any,
                     now: float | None) -> list[Message] | None:
        """A column batch of ``len(starts) > 0`` rows (int64 ``starts``/``ends`` on the time
        axis) under per-key progress: the accepted rows as one Columns, then the stream's CTI
        and the keys' (see the module docstring); None when the batch must go row by row (a
        key column of other types, times too far apart for int64 arithmetic)."""
        import numpy as np

        adv = self.advance
        coded = _key_codes(columns.get(adv.per_key)) if isinstance(adv.per_key, str) else None
        lag, delay = adv.low_watermark, adv.delay
        floor = max(self.cti, self._low)  # the stream's CTI before the batch
        if coded is None or lag is None or floor + lag > MAX_TIME:
            return None
        keys, names = coded
        n = len(starts)
        # starts in order: the first row decides whether a row may be late (_keys_at_once)
        ordered = bool((starts[1:] >= starts[:-1]).all())
        met = self._keys_at_once(keys, names, starts, floor) if ordered else None
        if met is None:
            # the stream's part of each row's CTI: max(cti, low, largest start before it − lag)
            prior = np.empty(n, dtype=np.int64)  # the largest start before each row
            prior[0] = self._latest
            prior[1:] = starts[:-1]
            if ordered:
                np.maximum(prior, self._latest, out=prior)
            else:  # (a running max costs ~5 ns a row)
                np.maximum.accumulate(prior, out=prior)
            stream = np.maximum(prior, floor + lag) - lag
            if not ordered:
                met = self._keys_at_once(keys, names, starts, floor, prior, stream)
            if met is None:
                met = self._keys_one_by_one(columns, starts, ends, keys, names, prior, stream)
            if met is None:
                return None
        index, keyed = met
        out: list[Message] = []
        self.stats["received"] += n
        self._last_wall = now
        if index is not None and not len(index):  # every row late
            self._key_ctis(out)
            return out
        # the accepted events
        if index is None:
            index = slice(None)
        sent = starts[index]
        k = len(sent)
        ids = np.arange(self._next_id, self._next_id + k, dtype=np.int64)
        self._next_id += k
        out.append(Columns(ids, sent, None if self.shape == "point" else ends[index],  # type: ignore[arg-type]
                           {name: c[index] for name, c in columns.items()}))
        self.stats["processed"] += k
        top = int(sent.max())
        self._latest = max(self._latest, top)
        self._top = max(self._top, top)
        if self.shape == "point":  # (a point ends at its start + 1, below MAX_TIME)
            self._horizon = max(self._horizon, top + 1)
        else:
            end = ends[index]
            self._horizon = max(self._horizon,
                                int(np.where(end == MAX_TIME, sent + 1, end).max()))
        # each key's latest start and CTI (new keys in the order the row path meets them)
        progress, moved, wall, every = self._keys, self._moved, self.arrival, adv.every
        for key, t, cti, p in keyed:
            if p is None:  # a new key starts at the stream's CTI of its first event
                p = progress[key] = [t, 0, None, cti, wall]
            else:
                p[K_WALL] = wall
                if t > p[K_LATEST]:
                    p[K_LATEST] = t
            if every is not None:
                # (below MAX_TIME, as delay >= 0; below MIN_TIME it is below the key's CTI)
                t = p[K_LATEST] - delay
                if t > p[K_CTI]:
                    p[K_CTI] = moved[key] = t
        low = self._latest - lag
        if low > self._low:
            self._low = min(max(low, MIN_TIME), MAX_TIME)
        if every is not None:
            self._emit(out, self._low)
        self._key_ctis(out)
        return out

    def _keys_at_once(self, keys: Any, names: list[Any] | None, starts: Any, floor: int,
                      prior: Any = None, stream: Any = None
                      ) -> tuple[None, list[tuple[Any, int, int, Any]]] | None:
        """The common batch, decided without sorting: no row can be late, because each row
        starts at or after the stream's part of its CTI (``stream``, from ``floor``, the
        stream's CTI before the batch, and ``prior``, the largest start before each row), the
        highest CTI of the batch's keys and the largest start before it − delay (above its
        key's latest start − delay); for starts in order (``prior`` None) the first row doing
        so is enough. Then (None: every row accepted, [(key, its latest start, the stream's
        CTI at its first row, its progress or None for a new key)]); None when some row may
        be late or the keys span too much for a table of them."""
        import numpy as np

        n = len(starts)
        low_key = int(keys.min())
        span = int(keys.max()) - low_key + 1
        if span > 4 * n + 1024:
            return None
        codes = keys - low_key if low_key else keys
        top = np.full(span, np.iinfo(np.int64).min, dtype=np.int64)  # below MIN_TIME
        np.maximum.at(top, codes, starts)
        present = np.flatnonzero(top != np.iinfo(np.int64).min)
        distinct = (present + low_key).tolist() if names is None else [
            names[c] for c in present.tolist()]
        get = self._keys.get
        highest = MIN_TIME
        fresh = []  # the new keys' codes
        ps = [get(key) for key in distinct]  # (None: a new key)
        for p, code in zip(ps, present.tolist()):
            if p is None:
                fresh.append(code)
            elif p[K_CTI] > highest:
                highest = p[K_CTI]
        delay, lag, latest_before = self.advance.delay, self.advance.low_watermark, self._latest
        assert lag is not None  # (_keys_vectorisable)
        if highest + delay > MAX_TIME:
            return None
        if prior is None:  # in order: rows after the first start at or after it
            if int(starts[0]) < max(floor, latest_before - lag, highest, latest_before - delay):
                return None
        else:
            bound = np.maximum(prior, highest + delay) - delay
            if not (starts >= np.maximum(bound, stream, out=bound)).all():
                return None
        latest = top[present].tolist()
        # (the stream's CTI at its first row is read for a new key only)
        keyed = list(zip(distinct, latest, latest, ps))
        if fresh:
            keyed = [item for item in keyed if item[3] is not None]
            first = np.full(span, n, dtype=np.int64)
            np.minimum.at(first, codes, np.arange(n, dtype=np.int64))
            rows = first[fresh]
            meet = np.argsort(rows, kind="stable")
            rows = rows[meet]
            if stream is None:  # in order: the largest start before row j is that of j − 1
                before = np.maximum(starts[rows - 1], latest_before)
                before[rows == 0] = latest_before
                at = (np.maximum(before, floor + lag) - lag).tolist()
            else:
                at = stream[rows].tolist()
            new = np.asarray(fresh)[meet]
            keyed += [(distinct[j], t, cti, None) for j, t, cti in zip(
                np.searchsorted(present, new).tolist(), top[new].tolist(), at)]
        return None, keyed

    def _keys_one_by_one(self, columns: dict[str, Any], starts: Any, ends: Any, keys: Any,
                         names: list[Any] | None, prior: Any, stream: Any
                         ) -> tuple[Any, list[tuple[Any, int, int, Any]]] | None:
        """A batch where rows may be late: each row's CTI from the running maxima over its
        key's rows (sorted by key), the late rows recorded; then (the accepted rows' index,
        None: all, and [(key, latest accepted start, the stream's CTI at its first accepted
        row, its progress or None)], in the order of those rows), or None (times too far
        apart: row by row)."""
        import numpy as np

        adv = self.advance
        delay, n = adv.delay, len(starts)
        # the rows by key (stable: each key's rows in batch order), each key a run
        low_key = int(keys.min())
        if int(keys.max()) - low_key < 2**16:  # numpy's stable sort of 16-bit ints: a radix sort
            order = np.argsort((keys - low_key).astype(np.uint16), kind="stable")
        else:
            order = np.argsort(keys, kind="stable")
        by_key = keys[order]
        first = np.empty(n, dtype=bool)
        first[0] = True
        np.not_equal(by_key[1:], by_key[:-1], out=first[1:])
        heads = np.flatnonzero(first)
        run = np.cumsum(first) - 1  # each sorted row's key number
        distinct = by_key[heads].tolist()
        if names is not None:
            distinct = [names[c] for c in distinct]
        ps = [self._keys.get(k) for k in distinct]  # (None: a new key)
        before = [MIN_TIME if p is None else p[K_CTI] for p in ps]
        if max(before) + delay > MAX_TIME:
            return None
        # the key's part: max(its CTI before the batch, its largest start before it − delay)
        sorted_starts = starts[order]
        key_floor = (np.array(before, dtype=np.int64) + delay)[run]
        if adv.every == 1:
            lo = int(sorted_starts.min())
            span = int(sorted_starts.max()) - lo + 1
            if span * len(heads) >= 2**62:
                return None
            shift = run * span  # a running max per key: one running max of shifted runs
            running = np.maximum.accumulate(sorted_starts - lo + shift) - shift + lo
            key_floor[1:] = np.maximum(key_floor[1:], np.where(first[1:], MIN_TIME,
                                                               running[:-1]))
        threshold = np.empty(n, dtype=np.int64)
        threshold[order] = key_floor - delay
        np.maximum(threshold, stream, out=threshold)
        late = starts < threshold
        if not late.any():
            index, kept = None, None
        elif (starts[late] > prior[late]).any():
            return None  # (a late row after every accepted start: not seen, but not assumed)
        else:
            self._late_key_rows(columns, starts, ends, np.flatnonzero(late), stream, threshold)
            accepted = ~late
            index = np.flatnonzero(accepted)
            if not len(index):
                return index, []
            kept = np.flatnonzero(accepted[order])
        # each key's latest accepted start, in the order of its first accepted row
        rows = run if kept is None else run[kept]
        at = sorted_starts if kept is None else sorted_starts[kept]
        change = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        first_row = order[change if kept is None else kept[change]]
        latest = np.maximum.reduceat(at, change)
        meet = np.argsort(first_row, kind="stable")
        return index, [(distinct[j], t, cti, ps[j]) for j, t, cti in zip(
            rows[change][meet].tolist(), latest[meet].tolist(), stream[first_row[meet]].tolist())]

    def _late_key_rows(self, columns: dict[str, Any], starts: Any, ends: Any, rows: Any,
                       stream: Any, threshold: Any) -> None:
        """Record the late ``rows`` of a column batch as the row path does, each against the
        CTI it missed (``threshold``) and the stream's CTI of its time (``stream``)."""
        field, low, late_keys = self.advance.per_key, self._low, self._late_keys
        try:
            for r in rows.tolist():
                row = row_at(columns, r)
                key = row[field]
                late_keys[key] = late_keys.get(key, 0) + 1
                self._low = int(stream[r])  # the low watermark as it stood at that row
                self.late.append(self._late_start(int(starts[r]), int(ends[r]),
                                                  int(threshold[r]), row, key))
        finally:
            self._low = low

    def slowest_keys(self, n: int = 10, asked: Any = None, table: int = 0,
                     now: float | None = None) -> dict[str, Any]:
        """What ``why`` and the web view show of per-key progress: the stream's CTI (the low
        watermark), the keys' highest CTI, and the ``n`` keys whose CTI is lowest, each with
        its CTI, its latest start, how many seconds before ``now`` its last event came
        (``ago_s``, by the clock of :attr:`arrival`; None without one) and its late rows;
        then the ``n`` keys with
        the most late rows; with ``asked``, that key's row (``"asked"``; None: never seen);
        with ``table``, every key's row when there are at most that many (``"table"``: what
        a finished inline run keeps, to answer about any key later). Read on request:
        O(keys).

        >>> from operators.ingress import AdvanceTime, Ingress
        >>> src = Ingress(start="t", advance=AdvanceTime(every=1, per_key="m", low_watermark=60))
        >>> src.arrival = 7.0  # (what the source's runtime sets: its clock)
        >>> _ = src.push([{"m": "a", "t": 50}, {"m": "b", "t": 10}, {"m": "a", "t": 40}])
        >>> view = src.slowest_keys(1, now=9.5)
        >>> view["cti"], view["top"], view["slowest"]
        (-10, 50, [{'key': 'b', 'cti': 10, 'latest': 10, 'ago_s': 2.5, 'late': 0}])
        >>> view["most_late"]
        [{'key': 'a', 'cti': 50, 'latest': 50, 'ago_s': 2.5, 'late': 1}]
        """
        keys, late = self._keys, self._late_keys

        def row(k: Hashable) -> dict[str, Any]:  # (a key with every row late has none)
            p = keys.get(k) or [None, 0, None, None, None]
            wall = p[K_WALL]
            return {"key": k, "cti": p[K_CTI], "latest": p[K_LATEST],
                    "ago_s": None if wall is None or now is None else max(0.0, now - wall),
                    "late": late.get(k, 0)}

        slowest = heapq.nsmallest(n, keys, key=lambda k: keys[k][K_CTI])
        worst = heapq.nlargest(n, late, key=late.__getitem__)
        view = {"cti": max(self.cti, self._low),
                "top": max((p[K_CTI] for p in keys.values()), default=MIN_TIME),
                "keys": len(keys), "slowest": [row(k) for k in slowest],
                "most_late": [row(k) for k in worst]}
        if asked is not None:
            view["asked"] = row(asked) if asked in keys or asked in late else None
        if 0 < len(keys) <= table:
            view["table"] = {k: row(k) for k in keys}
        return view


def _key_codes(column: Any) -> tuple[Any, list[Any] | None] | None:
    """A key column as numbers the batch is sorted by: an int column as it is (no names), a
    column of strings as int codes and the distinct strings (in order of first appearance);
    None for anything else (floats, None, mixed objects: the row path decides those rows)."""
    import numpy as np

    kind = getattr(getattr(column, "dtype", None), "kind", "")
    if not kind:
        return None
    if kind in "iu":  # (codes in int64: a uint64 column's keys from 2**63 go row by row)
        return None if kind == "u" and int(column.max()) >= 2**63 else (column, None)
    if kind not in "OU":
        return None
    values = column.tolist()
    if kind == "O" and set(map(type, values)) != {str}:
        return None
    index: dict[Any, int] = {}
    code = index.setdefault
    codes = np.fromiter((code(v, len(index)) for v in values), dtype=np.int64,
                        count=len(values))
    return codes, list(index)
