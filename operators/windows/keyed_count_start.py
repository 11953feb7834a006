"""``group_apply(key, count_window(n) → aggregate(Min or Max))`` over inserts, for all keys at
once: the planner's fast path for "per key, the extreme of every ``n`` consecutive readings"
(the demo's ``peaks``), equal in CHT to the general :class:`~operators.group_apply.GroupApply`
of a :class:`~operators.windows.count.CountWindowOperator` per key.

By start, a count window of a key spans ``n`` consecutive distinct start times of the key's
events and its result is the point at its last time (count.py's module doc). Min and Max are
time-insensitive, so an event's end does not matter, and over an input that never retracts
(what the planner proves, :meth:`~topology.building.nodes.Node.lengths`) the events of one distinct
time only ever matter through their extreme. So the operator keeps, per key, four lists in
step: the distinct times held, the extreme value at each, and the output of the window
*ending* at each (its id number and result; None while fewer than ``n`` times precede it)::

    n = 2, Max       a·1 @1   a·4 @3   b·2 @4   a·3 @6   a·9 @3 (late)   CTI 7
    key a: times [1, 3, 6], extremes [1, 9, 3]: windows ending at 3 and 6
    output ('a', 9) @ [3, 4)   ('a', 9) @ [6, 7)   then CTI 7

    >>> from operators.aggregates import Max
    >>> from operators.events import Insert, Cti
    >>> from operators.windows import CountWindow
    >>> op = KeyedCountExtreme(lambda p: p[0], CountWindow(2), Max(lambda p: p[1]), name="pk")
    >>> out = op.process([Insert(1, 1, 2, ("a", 1)), Insert(2, 3, 4, ("a", 4)),
    ...                   Insert(3, 4, 5, ("b", 2)), Insert(4, 6, 7, ("a", 3)),
    ...                   Insert(5, 3, 4, ("a", 9)), Cti(7)])
    >>> from operators.columns import expand  # the new windows of a batch: one column batch
    >>> sorted((m.start, m.payload) for m in expand(out) if isinstance(m, Insert))
    [(3, ('a', 9)), (6, ('a', 9))]

Every message only merges its events into these lists and notes, per key, the times it
changed; once per batch (at its end and before each CTI) the windows holding a changed time
are computed again and their output corrected: the row sent before retracted and the new one
inserted under a fresh id, nothing when the result stayed the same (as count.py compares
them). A time at or before a key's latest one (disorder, ties) changes at most the ``n``
windows ending at it and the ``n - 1`` times after it; new times after the latest complete
the windows ending at them.

**Column-wise.** On a :class:`~operators.columns.Columns` batch the key and the field run
once on the columns when they can (:func:`~operators.columns.apply_columns`); the rows are
sorted by (key, start) once, and each run of one key and time reduced to its extreme by
numpy. When the field is an int column, or a float column without NaN or ``-0.0`` (where
numpy's order is the order of Min's and Max's keys, :func:`~operators.aggregates.extreme_key`,
and equal values are the same value), the windows of every key whose held extremes are all
such numbers of the same kind are computed together: one array of each affected run's values
(with the ``n - 1`` before it), and a sliding extreme over it in O(length) numpy steps (van
Herk / Gil-Werman: prefix and suffix extremes of blocks of ``n``). Any other value (NaN,
signed zeros, bools, mixed types, objects) takes the per-key Python path over the values'
order keys, whose rules (NaN above every number, the first of equal keys wins) are the UDM's.
The windows a batch adds (in-order input) leave as one column batch of ``(key, result)``
rows when the keys are strings or ints and the results numbers of one kind, so that the sink
stores them as columns (13k of the demo's rows: ~0.15 s of the sink's CPU as inserts).

**CTIs**, as in count.py: after ``Cti(c)`` a key keeps the ``n - 1`` distinct times before
``c`` and every later one; the output CTI is ``c + max(0, n - 1 - r)`` with ``r`` the most
distinct times any key holds before ``c`` (at most ``n - 1``): the least of the per-key
operators' output CTIs (a key not seen yet would give ``c + n - 1``), which is what
``group_apply`` sends.

Only Min and Max (exactly those built-ins) with ``on_error="raise"`` and the default
``emit="speculative"`` qualify (:func:`supports`); a retraction is a planner bug and fails
loudly. A value that does not order (None, a string beside numbers) fails the query as on the
general path, when it is compared with another value of its window's times.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from ..aggregates import Max, Min, extreme_key
from ..columns import Columns, apply_columns
from ..errors import DeadLetter
from ..events import FreshId, Insert, Message, Retract, add_time
from ..expr import evaluate, trace
from ..group_apply import group_key
from ..key_groups import ByKey
from ..payloads import equal
from ..processor import Processor
from ..udm import field_getter, resolve
from .evaluate import Ids
from .keyed_columns import number_column
from .spec import DEFAULT_POLICY, CountWindow, PolicyArg

__all__ = ["KeyedCountExtreme", "supports"]

_new = tuple.__new__
_I64 = 2**63


def supports(spec: Any, udm: Any, kind: str, policy: PolicyArg, on_error: str) -> bool:
    """Whether :class:`KeyedCountExtreme` computes ``count_window(spec).aggregate(udm)`` per
    key over an insert-only stream: by start, Min or Max, failing loudly, speculative (with
    ``emit="final"`` the general path holds each row until a CTI makes it final and never
    retracts it, which the planner counts on downstream). The signature of every keyed
    ``supports`` (:mod:`topology.planning.rules`)."""
    if policy.resolve(spec).final:
        return False
    try:
        resolved = resolve(udm)
    except Exception:  # noqa: BLE001 (the general path reports a bad UDM)
        return False
    return (isinstance(spec, CountWindow) and spec.by == "start" and kind == "aggregate"
            and on_error == "raise" and type(resolved) in (Max, Min))


def _kind(v: Any) -> str:
    """``"f"`` for a float numpy orders as Max and Min do (not NaN, not ``-0.0``), ``"i"``
    for an int within int64, else ``""``."""
    t = type(v)
    if t is float:
        return "f" if v == v and (v != 0 or math.copysign(1.0, v) > 0) else ""
    if t is int:
        return "i" if -_I64 <= v < _I64 else ""
    return ""


def _kind_of(values: list[Any]) -> str:
    if not values:
        return ""
    k = _kind(values[0])
    if k and all(_kind(v) == k for v in values):
        return k
    return ""


class _Key:
    """One key's state: its distinct times held, the extreme value at each, and per time the
    output of the window ending there (``wid``: id number, or the whole id of a row another
    partition sent before a rescale, :meth:`KeyedCountExtreme.restore`; ``wres``: result;
    None while the window is incomplete). ``base`` counts the times freed before
    ``times[0]``; ``kind`` is ``"f"`` or ``"i"`` when every extreme held is such a number
    (:func:`_kind`), else ``""``."""

    __slots__ = ("base", "key", "kind", "times", "vals", "wid", "wres")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.times: list[int] = []
        self.vals: list[Any] = []
        self.wid: list[int | FreshId | None] = []
        self.wres: list[Any] = []
        self.base = 0
        self.kind = ""


class KeyedCountExtreme(ByKey, Processor):
    """Min or Max over the count windows by start of each value of ``key(payload)``; output
    payloads ``(key, result)``, each the point at its window's last time."""

    _state_fields = ("keys", "ids", "dead_letters")
    by_key = "keys"  # (rescaling: operators/key_groups.py)

    def __init__(self, key: Callable[[Any], Hashable] | str, spec: CountWindow, udm: Any, *,
                 name: str | None = None, **_: Any) -> None:
        super().__init__(name or f"keyed count_window({spec.n})")
        if not supports(spec, udm, "aggregate", DEFAULT_POLICY, "raise"):
            raise TypeError(f"KeyedCountExtreme needs count_window(n, by='start') and Min or "
                            f"Max, got {spec!r} and {udm!r}; use group_apply with count_window")
        self.key = field_getter(key)
        self.spec = spec
        self.n = spec.n
        resolved: Any = resolve(udm)
        self.udm = resolved
        self.largest = type(resolved) is Max
        self._get = resolved._get
        self._field = trace(self._get)
        self.keys: dict[Hashable, _Key] = {}
        self.ids = Ids(self.name)
        #: no window fails (on_error="raise"); kept for the runtime, as every window has it
        self.dead_letters: list[DeadLetter] = []
        #: per key touched in this batch: [the first time appended after its latest (all
        #: later times are new too) or None, the other times changed]
        self._dirty: dict[Hashable, list[Any]] = {}
        #: a flush's new windows (first id, their end times, key, results): :meth:`_new_rows`
        self._new: list[tuple[int, list[int], Hashable, list[Any]]] = []

    # -- merging events ---------------------------------------------------------------------
    def _state(self, key: Hashable) -> _Key:
        try:
            rec = self.keys.get(key)
        except TypeError:
            raise TypeError(f"the key function returned the unhashable {key!r}; return a "
                            f"hashable value (a tuple rather than a list, ...)") from None
        if rec is None:
            rec = self.keys[key] = _Key(key)
        return rec

    def _better(self, v: Any, old: Any) -> bool:
        """Whether ``v`` replaces ``old`` as the extreme of a time (the first of equal keys
        stays)."""
        if v is None or old is None:
            raise TypeError(f"{self.udm.udm_name}: cannot order None (a missing value) among "
                            f"the window's values; drop missing values first (where(...)) or "
                            f"pass a field (a key, attribute or function) that reads "
                            f"comparable values")
        a, b = extreme_key(v), extreme_key(old)
        try:
            return bool(a > b) if self.largest else bool(a < b)
        except TypeError as e:
            raise TypeError(f"{self.udm.udm_name}: cannot order {v!r} ({type(v).__name__}) "
                            f"against the window's other values ({e}); pass a field (a key, "
                            f"attribute or function) that reads comparable values") from None

    def _merge(self, rec: _Key, ts: list[int], vs: list[Any], kind: str,
               distinct: bool) -> None:
        """Merge events at times ``ts`` (ascending; ``distinct``: no time twice, each value
        already its time's extreme) with values ``vs`` into ``rec``; ``kind`` is the values'
        :func:`_kind` when all share it, else ``""``."""
        times, vals = rec.times, rec.vals
        rec.kind = kind if kind and (not times or rec.kind == kind) else ""
        dirty = self._dirty.get(rec.key)
        if dirty is None:
            dirty = self._dirty[rec.key] = [None, set()]
        changed = dirty[1]
        latest = times[-1] if times else None
        k = 0
        if latest is not None:
            k = bisect_left(ts, latest + 1)
            better = self._better
            wid, wres = rec.wid, rec.wres
            for t, v in zip(ts[:k], vs[:k]):  # at or before the latest time
                i = bisect_left(times, t)
                if i < len(times) and times[i] == t:
                    if better(v, vals[i]):
                        vals[i] = v
                        changed.add(t)
                else:
                    times.insert(i, t)
                    vals.insert(i, v)
                    wid.insert(i, None)
                    wres.insert(i, None)
                    changed.add(t)
        if k == len(ts):
            return
        if dirty[0] is None:
            dirty[0] = ts[k]
        if distinct:
            m = len(ts) - k
            times.extend(ts[k:] if k else ts)
            vals.extend(vs[k:] if k else vs)
            rec.wid.extend([None] * m)
            rec.wres.extend([None] * m)
            return
        better = self._better
        for t, v in zip(ts[k:], vs[k:]):
            if times and times[-1] == t:
                if better(v, vals[-1]):
                    vals[-1] = v
            else:
                times.append(t)
                vals.append(v)
                rec.wid.append(None)
                rec.wres.append(None)

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        rec = self._state(group_key(self.key(msg.payload)))
        v = self._get(msg.payload)
        self._merge(rec, [msg.start], [v], _kind(v), True)
        return []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        raise ValueError(f"{self.name}: the keyed count window takes only inserts (the "
                         f"planner chose it for a stream that never retracts), got {msg!r}; "
                         f"this is a planner bug: please report it")

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        n = len(msg)
        if not n:
            return []
        starts = msg.starts.astype(np.int64, copy=False)
        named = self._codes(msg)
        if named is None:  # the per-event path names the bad key
            return super().on_columns(msg, port)
        names, codes = named
        order = np.lexsort((starts, codes))  # stable: arrival order within a (key, time)
        codes, starts = codes[order], starts[order]
        got = evaluate(self._field, msg.payload, n)
        kind = ""
        if isinstance(got, np.ndarray) and got.shape == (n,):
            dk = got.dtype.kind
            if dk == "i" or (dk == "u" and got.dtype.itemsize < 8):
                kind = "i"
            elif dk == "f" and not (np.isnan(got).any() or (np.signbit(got) & (got == 0)).any()):
                kind = "f"
        new_key = np.empty(n, dtype=bool)
        new_key[0] = True
        np.not_equal(codes[1:], codes[:-1], out=new_key[1:])
        key_starts = np.flatnonzero(new_key)
        key_ends = np.append(key_starts[1:], n)
        if kind:  # each (key, time) reduced to its extreme
            values = got[order]
            new_run = new_key.copy()
            new_run[1:] |= starts[1:] != starts[:-1]
            run_starts = np.flatnonzero(new_run)
            reduce = np.maximum if self.largest else np.minimum
            ext = reduce.reduceat(values, run_starts).tolist()
            ts = starts[run_starts].tolist()
            bounds = np.searchsorted(run_starts, key_starts).tolist()
            bounds.append(len(ts))
            merge, state = self._merge, self._state
            for j, code in enumerate(codes[key_starts].tolist()):
                a, b = bounds[j], bounds[j + 1]
                merge(state(names[code]), ts[a:b], ext[a:b], kind, True)
            return []
        if isinstance(got, np.ndarray) and got.shape == (n,):
            vs = got[order].tolist()
        else:
            payloads = msg.payloads()
            get = self._get
            vs = [get(payloads[i]) for i in order.tolist()]
        ts = starts.tolist()
        for code, a, b in zip(codes[key_starts].tolist(), key_starts.tolist(),
                              key_ends.tolist()):
            part = vs[a:b]
            self._merge(self._state(names[code]), ts[a:b], part, _kind_of(part), False)
        return []

    def _codes(self, msg: Columns) -> tuple[list[Any], np.ndarray] | None:
        """The group keys of the batch as the distinct keys and each row's index among
        them; None for an unhashable key."""
        n = len(msg)
        keys = apply_columns(self.key, msg)
        if isinstance(keys, np.ndarray) and keys.shape == (n,) and keys.dtype.kind in "biuf":
            distinct, which = np.unique(keys, return_inverse=True)
            return [group_key(k) for k in distinct.tolist()], which.reshape(-1)
        if isinstance(keys, np.ndarray) and keys.shape == (n,):
            values = keys.tolist()
        else:
            key = self.key
            values = [key(p) for p in msg.payloads()]
        index: dict[Any, int] = {}
        code = index.setdefault
        try:
            codes = [code(group_key(k), len(index)) for k in values]
        except TypeError:
            return None
        return list(index), np.array(codes, dtype=np.int64)

    # -- windows ----------------------------------------------------------------------------
    def end_batch(self) -> list[Message]:
        return self._flush() if self._dirty else []

    def _flush(self) -> list[Message]:
        """Compute every window holding a time this batch changed, and correct its output."""
        dirty, self._dirty = self._dirty, {}
        n = self.n
        numeric: dict[str, list[tuple[_Key, int, int]]] = {"f": [], "i": []}
        out: list[Message] = []
        for key, (first_new, changed) in dirty.items():
            rec = self.keys[key]
            times = rec.times
            size = len(times)
            lo = max(0, n - 1 - rec.base)  # the first time a complete window ends at
            spans = [(i, i + n - 1) for i in sorted(bisect_left(times, t) for t in changed)]
            if first_new is not None:
                spans.append((bisect_left(times, first_new), size - 1))
                spans.sort()
            runs: list[tuple[int, int]] = []
            for a, b in spans:
                a, b = max(a, lo), min(b, size - 1)
                if a > b:
                    continue
                if runs and a <= runs[-1][1] + 1:
                    if b > runs[-1][1]:
                        runs[-1] = (runs[-1][0], b)
                else:
                    runs.append((a, b))
            if not runs:
                continue
            if rec.kind:
                numeric[rec.kind].extend((rec, a, b) for a, b in runs)
            else:
                for a, b in runs:
                    out.extend(self._emit(rec, a, self._by_keys(rec.vals[a - n + 1:b + 1])))
        for kind, jobs in numeric.items():
            if jobs:
                out.extend(self._numeric(jobs, kind))
        return out + self._new_rows()

    def _numeric(self, jobs: list[tuple[_Key, int, int]], kind: str) -> list[Message]:
        """The windows of the runs ``jobs`` (a key's windows ending at ``a..b``) whose values
        are all numbers of ``kind``: one sliding extreme over all of them."""
        n = self.n
        flat: list[Any] = []
        offsets = []
        for rec, a, b in jobs:
            offsets.append(len(flat))
            flat.extend(rec.vals[a - n + 1:b + 1])
        x = np.array(flat, dtype=np.float64 if kind == "f" else np.int64)
        ext = _sliding_extreme(x, n, self.largest).tolist()
        out: list[Message] = []
        for (rec, a, b), o in zip(jobs, offsets):  # (a - n + 1 >= 0: see on_cti)
            out.extend(self._emit(rec, a, ext[o:o + b - a + 1]))
        return out

    def _by_keys(self, values: list[Any]) -> list[Any]:
        """The results of the windows of ``n`` consecutive ``values``, by the values' order
        keys (NaN above every number, the first of equal keys wins): a monotonic deque."""
        n, largest, result = self.n, self.largest, self.udm.result
        keys = []
        for v in values:
            if v is None:
                self._better(v, v)  # raises the UDM's error
            keys.append(extreme_key(v))
        found = []
        deque: list[int] = []
        head = 0
        try:
            for j, key in enumerate(keys):
                while len(deque) > head and (keys[deque[-1]] < key if largest
                                             else key < keys[deque[-1]]):
                    deque.pop()
                deque.append(j)
                w = j - n + 1
                if w < 0:
                    continue
                if deque[head] < w:
                    head += 1
                found.append(result([keys[deque[head]]]))
        except TypeError:
            for a, b in itertools.pairwise(values):
                self._better(a, b)  # names the value that does not order
            raise
        return found

    def _emit(self, rec: _Key, a: int, results: list[Any]) -> list[Message]:
        """Correct the outputs of ``rec``'s windows ending at ``a, a + 1, ...`` to
        ``results``."""
        wid, wres, times, key = rec.wid, rec.wres, rec.times, rec.key
        ids = self.ids
        name = ids.name
        b = a + len(results)
        if wid[a:b].count(None) == len(results):  # new windows only (in-order input)
            first = ids.next_id
            ids.next_id = first + len(results)
            wid[a:b] = range(first, first + len(results))
            wres[a:b] = results
            self._new.append((first, times[a:b], key, results))  # sent by _new_rows
            return []
        out: list[Message] = []
        for j, r in zip(range(a, b), results):
            old = wid[j]
            t = times[j]
            if old is not None:
                if equal([wres[j]], [r]):
                    continue
                out.append(Retract(FreshId(name, old) if type(old) is int else old, t, t + 1,
                                   t, (key, wres[j])))
            oid = ids.next_id
            ids.next_id = oid + 1
            wid[j] = oid
            wres[j] = r
            out.append(_new(Insert, (FreshId(name, oid), t, t + 1, (key, r))))
        return out

    def _new_rows(self) -> list[Message]:
        """The new windows of a flush (:meth:`_emit`): one column batch when every key is a
        string or every key an int, and every result a float or every result an int (so
        that a join or the sink after it stays column-wise), else one insert per window."""
        new, self._new = self._new, []
        if not new:
            return []
        keys = [k for _, ts, k, _ in new for _ in ts]
        results = [r for *_, rs in new for r in rs]
        res = number_column(results)
        kinds = {type(k) for k in keys}
        if res is None or (kinds != {str} and kinds != {int}):
            name = self.ids.name
            return [_new(Insert, (FreshId(name, first + j), t, t + 1, (key, r)))
                    for first, ts, key, rs in new for j, (t, r) in enumerate(zip(ts, rs))]
        key_col = np.empty(len(keys), dtype=object) if kinds == {str} else None
        if key_col is not None:
            key_col[:] = keys
        else:
            key_col = number_column(keys)
            if key_col is None:  # ints beyond int64
                key_col = np.empty(len(keys), dtype=object)
                key_col[:] = keys
        ids = np.empty(len(keys), dtype=object)
        ids[:] = [FreshId(self.ids.name, first + j) for first, ts, *_ in new
                  for j in range(len(ts))]
        starts = np.fromiter((t for _, ts, *_ in new for t in ts), dtype=np.int64,
                             count=len(keys))
        return [Columns(ids, starts, None, (key_col, res))]  # type: ignore[list-item]

    # -- CTIs -------------------------------------------------------------------------------
    def on_cti(self, time: int, port: int) -> list[Message]:
        out = self._flush() if self._dirty else []
        n = self.n
        most = 0  # the most distinct times a key holds before the CTI (up to n - 1)
        for rec in self.keys.values():
            times = rec.times
            before = bisect_left(times, time)
            cut = before - (n - 1)
            if cut > 0:  # windows ending before times[cut] are final: freed
                del times[:cut], rec.vals[:cut], rec.wid[:cut], rec.wres[:cut]
                rec.base += cut
                before = n - 1
                if not rec.kind:
                    rec.kind = _kind_of(rec.vals)
            if before > most:
                most = before
        return out + self.emit_cti(add_time(time, max(0, n - 1 - most)))

    # -- introspection -----------------------------------------------------------------------
    def key_functions(self) -> tuple[Callable[[Any], Any], ...]:
        return (self.key,)

    def keyed_output(self) -> bool:
        return True

    def state_size(self) -> int:
        """Distinct times held plus windows held, over all keys."""
        return sum(len(r.times) + len(r.wid) - r.wid.count(None) for r in self.keys.values())

    def restore(self, state: dict[str, Any]) -> None:
        """The state of ``state``; when another operator (another partition, before a
        rescale) minted its ids, under its name, the id numbers its windows keep become those
        whole ids, so that a correction retracts a row under the id it was sent with (the
        rows minted from now on are numbered under this operator's name)."""
        super().restore(state)
        minted = state["ids"].name
        keys = {}
        for k, rec in self.keys.items():  # NaN keys: one group again after unpickling
            rec.key = group_key(rec.key)
            if minted != self.ids.name:
                rec.wid = [FreshId(minted, w) if type(w) is int else w for w in rec.wid]
            keys[group_key(k)] = rec
        self.keys = keys

    def _check(self) -> None:
        assert not self._dirty, "windows left uncomputed after a batch"
        n = self.n
        for k, rec in self.keys.items():
            times = rec.times
            assert times == sorted(set(times)), f"times of {k!r} not distinct and sorted"
            assert len(rec.vals) == len(rec.wid) == len(rec.wres) == len(times)
            lo = max(0, n - 1 - rec.base)
            assert all(w is None for w in rec.wid[:lo]), "an incomplete window has output"
            assert all(w is not None for w in rec.wid[lo:]), "a complete window lacks output"
            assert not rec.kind or not times or _kind_of(rec.vals) == rec.kind, (
                f"kind of {k!r} is wrong")


def _sliding_extreme(x: np.ndarray, n: int, largest: bool) -> np.ndarray:
    """The extreme of every ``n`` consecutive values of ``x`` (``len(x) - n + 1`` of them),
    in O(len(x)): the block prefix and suffix extremes of van Herk and Gil-Werman (a window
    is a suffix of one block of ``n`` and a prefix of the next)."""
    m = len(x)
    if n == 1 or m < n:
        return x if n == 1 else x[:0]
    pad = (-m) % n
    xp = np.concatenate([x, np.full(pad, x[-1], dtype=x.dtype)]) if pad else x
    blocks = xp.reshape(-1, n)
    op = np.maximum if largest else np.minimum
    prefix = op.accumulate(blocks, axis=1).ravel()
    suffix = op.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()
    return op(suffix[:m - n + 1], prefix[n - 1:m])
