"""``group_apply(key, hopping/tumbling window → aggregate)`` over point (or interval) inserts,
for all keys at once: the planner's fast path for the most common streaming query (a windowed
aggregate per key), equal in CHT to the general :class:`~operators.group_apply.GroupApply` of a
:class:`~operators.windows.hopping.HoppingWindowOperator`.

A point event ``[s, s + 1)`` belongs to the windows ``n`` with ``W(n).start <= s < W(n).end``,
so no later message can move it into or out of a window, and a window is final once the input
CTI reaches its end. The operator therefore keeps, per window number and key, only the UDM's
incremental state (or, for a non-incremental aggregate, the window's values).

With ``emit="speculative"`` (the default, as on the general path) every (window, key) a batch
touched gets its current result at the end of the batch: the row sent before is retracted and
the new one inserted. With ``emit="final"`` each window's result is sent once, when a CTI
passes the window's end, and never retracted; at the end of input, :meth:`finish` sends the
windows no CTI has closed, as they stand::

    time      0    2    4    6    8   10   12        key = p[0], tumbling_window(5), Count
    input     a·   a·        b·   a·        CTI 12
    output    ('a', 2) [0 ─── 5)   ('b', 1) ('a', 1) [5 ─── 10)     then CTI 10

    >>> from operators.aggregates import Count
    >>> from operators.events import Insert, Cti
    >>> from operators.windows import WindowPolicy, tumbling_window
    >>> op = KeyedWindowAggregate(lambda p: p[0], tumbling_window(5), Count(),
    ...                           WindowPolicy(emit="final"), name="keyed_window")
    >>> op.process([Insert(1, 0, 1, ("a",)), Insert(2, 2, 3, ("a",)), Insert(3, 6, 7, ("b",)),
    ...             Insert(4, 8, 9, ("a",)), Cti(12)])  # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=FreshId('keyed_window', 0), start=0, end=5, payload=('a', 2)),
     Insert(id=FreshId('keyed_window', 1), start=5, end=10, payload=('b', 1)),
     Insert(id=FreshId('keyed_window', 2), start=5, end=10, payload=('a', 1)), Cti(time=10)]

**Intervals** (``intervals=True``: what the planner runs over a stream of bounded lifetimes
that never retracts, e.g. ``alter_lifetime(duration=d)`` of points; incremental,
time-insensitive aggregates only). An interval ``[s, e)`` belongs to every window it
overlaps, ``W(n).start < e`` and ``W(n).end > s``, and is added to all of them at once; as
on the general path (one window operator per group), a window of a key is *produced* (has
output) only once it starts before that key's frontier ``max(input CTI, latest start of the
key + 1)``, so a long event's later windows appear as time reaches them. Each event of a
batch is copied once per window it overlaps (an event spans few windows: the planner bounds
it). An edge event (end ∞) or a retraction is a planner bug and fails loudly.

**UDOs** (``kind="apply"``, over points: an :class:`~operators.udm.Operator`, a function
returning a list, or a :class:`~operators.udm.TimeSensitiveOperator` whose stamps the
``window``/``point_end`` output drops). As for a non-incremental aggregate, a window keeps its
events' starts and payloads per key, in the order the general path gives them to the UDM (by
start, equal starts in arrival order); each (window, key) a batch touched is computed once at
the batch's end, and its rows replace the rows sent before by the smallest difference
(:func:`~operators.windows.evaluate.diff`, as the general window operator corrects its
output). With ``emit="final"`` a window's rows are sent once, at the CTI that closes it.

On a :class:`~operators.columns.Columns` batch the key function runs once on the columns when
it can (see :func:`~operators.columns.apply_columns`) and the events are grouped by (window,
key) with numpy: sorted once by key and pane (``gcd(size, hop)`` ticks, so a window is a run
of whole panes), each (window, key) group is a range of consecutive rows, and the ranges of
a hopping window's groups overlap instead of each row being copied once per window. A
built-in adds the ranges column-wise (``add_ranges``: prefix sums); any other UDM gets one
``add`` per group and batch. Output CTI after input
``Cti(c)``: the start of the first window ending after ``c`` (``c`` itself for
``output="point_end"``): every later output row belongs to a window ending after ``c``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable
from itertools import pairwise
from typing import Any

import numpy as np

from ..columns import Columns, apply_columns, concat, map_columns
from ..errors import OperatorError
from ..events import MAX_TIME, MIN_TIME, Cti, FreshId, Insert, Message, Retract
from ..group_apply import group_key
from ..payloads import identical
from ..processor import Processor
from ..udm import (
    Aggregate,
    ColumnAggregate,
    IncrementalAggregate,
    Operator,
    TimeSensitiveAggregate,
    TimeSensitiveOperator,
    Window,
    field_getter,
    resolve,
)
from .evaluate import Ids, WindowUdm, diff
from .index import Grid
from .spec import DEFAULT_POLICY, HoppingWindow, PolicyArg

__all__ = ["KeyedWindowAggregate", "supports"]

_new = tuple.__new__
#: :meth:`KeyedWindowAggregate._reached` of every key
_EVERY = object()


class _Members:
    """A window's events for a non-incremental UDM, as it is given them: their starts and
    payloads in time order, ties in arrival order (what the general window operator passes:
    members sorted by ``(start, end)``, stably). A batch's events are added at once; the lists
    are sorted again only when they arrive out of order."""

    __slots__ = ("payloads", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.payloads: list[Any] = []

    def add(self, starts: list[int], payloads: list[Any], in_order: bool = False) -> None:
        """Add events in arrival order (``in_order``: already sorted by start)."""
        old = self.starts
        if not starts:
            return
        if (old and starts[0] < old[-1]) or (not in_order and any(
                b < a for a, b in pairwise(starts))):
            if 8 * len(starts) < len(old):  # a few late events (one at a time): insert them
                at, held = bisect_right, self.payloads
                for s, p in zip(starts, payloads):
                    i = at(old, s)  # after the equal starts: they arrived before it
                    old.insert(i, s)
                    held.insert(i, p)
                return
            every = old + starts
            order = sorted(range(len(every)), key=every.__getitem__)  # stable: arrival order
            payloads = self.payloads + payloads
            self.starts = [every[i] for i in order]
            self.payloads = [payloads[i] for i in order]
        else:
            old += starts
            self.payloads += payloads

    def __getstate__(self) -> tuple[list[int], list[Any]]:
        return self.starts, self.payloads

    def __setstate__(self, state: tuple[list[int], list[Any]]) -> None:
        self.starts, self.payloads = state

    def __len__(self) -> int:
        return len(self.starts)


#: Starts within ±2**61 ticks keep the window arithmetic inside int64 (else: Python ints).
_SAFE = 2**61


def supports(spec: Any, udm: Any, kind: str, policy: PolicyArg, on_error: str,
             intervals: bool = False) -> bool:
    """Whether :class:`KeyedWindowAggregate` computes ``window(spec).aggregate(udm)`` (an
    aggregate, on a hopping or tumbling window, failing loudly, ``policy`` -- resolved for
    the spec -- with output ``window`` or ``point_end``) over points, or with
    ``intervals`` over interval inserts. Over points time-sensitive aggregates qualify too: a
    point lies inside each of its windows, so every clipping policy gives it the lifetime
    ``[s, s + 1)``. Over intervals only incremental, time-insensitive ones do (every built-in
    but TimeWeightedAverage): what they see does not depend on clipping or on the order of
    the members.

    ``kind="apply"`` (a UDO: an :class:`~operators.udm.Operator`, a plain function returning
    a list, or a :class:`~operators.udm.TimeSensitiveOperator`, whose own stamps the
    ``window``/``point_end`` output drops) qualifies over points only, under the same
    conditions."""
    if not isinstance(spec, HoppingWindow):
        return False
    resolved = policy.resolve(spec)
    if kind == "apply":
        if intervals:
            return False
        try:
            call = WindowUdm(udm, "apply", resolved)
        except Exception:  # noqa: BLE001 (the general path reports a bad UDM)
            return False
        return (on_error == "raise" and resolved.window_rows and not call.incremental
                and isinstance(call.udm, (Operator, TimeSensitiveOperator))
                and max(abs(spec.size), abs(spec.hop), abs(spec.alignment)) < _SAFE)
    try:
        u = resolve(udm)
    except Exception:  # noqa: BLE001 (the general path reports a bad UDM)
        return False
    kinds: tuple[type, ...] = (IncrementalAggregate, Aggregate, TimeSensitiveAggregate)
    if intervals:
        if getattr(u, "time_sensitive", False):
            return False
        kinds = (IncrementalAggregate,)
    return (kind == "aggregate" and on_error == "raise"
            and resolved.window_rows
            and isinstance(u, kinds)
            and max(abs(spec.size), abs(spec.hop), abs(spec.alignment)) < _SAFE)


def _number_column(values: list[Any]) -> np.ndarray | None:
    """``values`` as an int64 or float64 column holding exactly them (``tolist()`` gives them
    back), or None (other types, mixed types, ints beyond int64)."""
    kinds = {type(v) for v in values}
    if kinds == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            return None
    if kinds == {float}:
        return np.array(values, dtype=np.float64)
    return None


def _number_columns(keys: list[Any], results: list[Any], keyed: bool) -> Any:
    """The payload columns of final rows ``(key, result)`` (or ``result``) when keys and
    results are plain numbers, else None (the rows go out as ``Insert`` messages)."""
    res = _number_column(results)
    if res is None or not keyed:
        return res
    if {type(k) for k in keys} != {int}:  # (a float key may be the one NaN group key)
        return None
    ks = _number_column(keys)
    return None if ks is None else (ks, res)


def _group_order(ns: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """The permutation sorting by (window number, key), stable (arrival order within a
    group): one stable argsort of a combined int64 key when the keys are small integers,
    else a lexsort."""
    if ks.dtype.kind in "iub" and len(ks):
        k0, k1 = int(ks.min()), int(ks.max())
        n0, n1 = int(ns.min()), int(ns.max())
        span = k1 - k0 + 1
        size = (n1 - n0 + 1) * span
        if size < 2**62:
            combined = (ns - n0) * span + (ks.astype(np.int64) - k0)
            if size <= 2**16:  # numpy's stable sort of 16-bit ints is a radix sort: O(n)
                combined = combined.astype(np.uint16)
            return np.argsort(combined, kind="stable")
    return np.lexsort((np.arange(len(ks)), ks, ns))


def _codes(keys: np.ndarray) -> tuple[list[Any], np.ndarray] | None:
    """Keys that are not numbers (strings, objects) as int codes: the distinct keys, in order
    of first appearance, and each row's code. Keys are told apart as a dict tells them (the
    first of equal keys names the group, as on the per-event path); None for an unhashable
    key (the per-event path then reports it).

    >>> names, codes = _codes(np.array(["b", "a", "b"], dtype=object))
    >>> names, codes.tolist()
    (['b', 'a'], [0, 1, 0])
    >>> names, codes = _codes(np.array([float("nan"), "a", float("nan")], dtype=object))
    >>> names, codes.tolist()
    ([nan, 'a'], [0, 1, 0])
    """
    index: dict[Any, int] = {}
    code = index.setdefault
    try:
        codes = np.array([code(k, len(index)) for k in keys.tolist()], dtype=np.int64)
    except TypeError:
        return None
    names = list(index)
    canonical = [group_key(k) for k in names]  # once per distinct key, not per row
    if any(c is not k for c, k in zip(canonical, names)):  # NaN keys: one group
        merged: dict[Any, int] = {}
        remap = np.array([merged.setdefault(c, len(merged)) for c in canonical],
                         dtype=np.int64)
        return list(merged), remap[codes]
    return names, codes


def _float_codes(keys: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """Float keys holding NaN as int codes, as :func:`_codes` gives them: every NaN is one
    group (:func:`~operators.group_apply.group_key`), and the first of equal keys names the
    group.

    >>> names, codes = _float_codes(np.array([np.nan, 1.5, np.nan]))
    >>> names, codes.tolist()
    ([nan, 1.5], [0, 1, 0])
    """
    # np.unique puts every NaN in one group (equal_nan); ``first`` is each group's first row
    _, first, which = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # groups in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    names = [group_key(k) for k in keys[first[order]].tolist()]
    return names, rank[which.reshape(-1)].astype(np.int64, copy=False)


def named_codes(keys: Any) -> tuple[list[Any], np.ndarray] | None:
    """A batch's key column as the distinct keys and each row's int code where the keys are
    not plain numbers — strings and other objects (:func:`_codes`), or floats holding NaN,
    which are one group as on the per-event path (:func:`_float_codes`) — else None (the
    column's numbers are the codes themselves, or the keys are not a column)."""
    if not isinstance(keys, np.ndarray):
        return None
    if keys.dtype.kind in "OUS":
        return _codes(keys)
    if keys.dtype.kind == "f" and np.isnan(keys).any():
        return _float_codes(keys)
    return None


def _recorder(by_key: dict[Hashable, list[tuple[FreshId, Any]]]
              ) -> Callable[[Hashable, tuple[Any, int, int, Any]], None]:
    """The ``sent`` callback of :func:`~operators.windows.evaluate.diff` for a UDO's rows of
    one window: a row ``(id, start, end, payload)`` that stands for key ``k`` is kept in
    ``by_key[k]`` as ``(id, payload)``."""
    def sent(k: Hashable, row: tuple[Any, int, int, Any]) -> None:
        by_key.setdefault(k, []).append((row[0], row[3]))
    return sent


class KeyedWindowAggregate(Processor):
    """One hopping (or tumbling) window aggregate per value of ``key(payload)``, over point
    events; payloads become ``(key, result)``, as ``group_apply`` gives them (with
    ``keyed=False``, one group and the bare result: a window aggregate without group_apply)."""

    _state_fields = ("open", "ids", "sent", "cti", "latest")

    def __init__(self, key: Callable[[Any], Hashable] | str, spec: HoppingWindow, udm: Any,
                 policy: PolicyArg = DEFAULT_POLICY, keyed: bool = True,
                 intervals: bool = False, name: str | None = None,
                 kind: str = "aggregate") -> None:
        super().__init__(name)
        self.keyed = keyed
        resolved = policy.resolve(spec)
        if kind == "apply" and not supports(spec, udm, kind, resolved, "raise", intervals):
            raise ValueError(
                f"KeyedWindowAggregate(kind='apply') takes a UDO (an Operator, a function "
                f"returning a list, or a TimeSensitiveOperator under output 'window' or "
                f"'point_end') over points, got {udm!r}; use the general window operator")
        #: a UDO (``kind="apply"``): zero or more rows per window and key
        self.apply = kind == "apply"
        if intervals and not supports(spec, udm, "aggregate", resolved, "raise",
                                      intervals=True):
            raise ValueError(
                f"KeyedWindowAggregate(intervals=True) takes an incremental, time-insensitive "
                f"aggregate (a built-in but TimeWeightedAverage), got {udm!r}; use the general "
                f"window operator")
        #: whether finite interval inserts are taken (else points only)
        self.intervals = intervals
        self.policy = resolved
        self.final = resolved.final
        self.key = field_getter(key)
        self.spec = spec
        self.grid = Grid(spec.size, spec.hop, spec.alignment)
        self.call = WindowUdm(udm, kind, resolved)
        self.udm = self.call.udm
        self.incremental = self.call.incremental
        self.time_sensitive = self.call.time_sensitive
        #: the UDM's column-wise add (built-in aggregates; see operators.aggregates): the
        #: insert-only one where it has it (no state here ever sees a remove, so Min and Max
        #: keep only the extreme)
        self.add_ranges = (getattr(self.udm, "add_insert_only_ranges", self.udm.add_ranges)
                           if self.incremental and isinstance(self.udm, ColumnAggregate)
                           else None)
        #: how results become rows
        self.output = resolved.output
        #: window number -> key -> UDM state (incremental) or its events (:class:`_Members`)
        self.open: dict[int, dict[Hashable, Any]] = {}
        self.ids = Ids(self.name)
        #: speculative: window number -> key -> (id, payload) of the row sent for it (a UDO:
        #: the list of its rows' (id, payload))
        self.sent: dict[int, dict[Hashable, Any]] = {}
        #: speculative: the (window number, key) groups this batch changed
        self.touched: set[tuple[int, Hashable]] = set()
        #: intervals: the last input CTI, and per key the latest start + 1 where it is later;
        #: a key's windows are produced once they start before its frontier, the larger of
        #: the two (what the general operator of each group does)
        self.cti = MIN_TIME
        self.latest: dict[Hashable, int] = {}

    # -- input ------------------------------------------------------------------------------
    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        """A batch of Columns and CTIs is added all at once, then its CTIs close windows: an
        event after a CTI starts at or after it, so it never falls in a window that CTI
        closes, and grouping once per batch costs one UDM call per group instead of one per
        group and CTI. Anything else takes the message-by-message path."""
        msgs = batch if isinstance(batch, list) else list(batch)
        parts: list[Columns] = []
        ctis: list[Message] = []
        for msg in msgs:
            kind = type(msg)
            if kind is Columns:
                parts.append(msg)  # type: ignore[arg-type]
            elif kind is Cti:
                ctis.append(msg)
            else:
                return super().process(msgs, port)
        if len(parts) < 2:
            return super().process(msgs, port)
        merged = concat(parts)
        if merged is None or not self._before_ctis(msgs):
            return super().process(msgs, port)
        return super().process([merged, *ctis], port)  # type: ignore[list-item]  # a Columns stands for its inserts

    def _before_ctis(self, msgs: list[Message]) -> bool:
        """Whether every event of ``msgs`` starts at or after the CTIs before it (then the
        batch can be reordered: events first)."""
        cti = self.in_cti
        for msg in msgs:
            if type(msg) is Cti:
                cti = max(cti, msg.time)
            elif len(msg) and int(msg.starts.min()) < cti:  # type: ignore[union-attr]
                return False
        return True

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        s, e = msg.start, msg.end
        self._check_lifetime(s, e, msg)
        key = group_key(self.key(msg.payload))
        [value] = self._values([s], [msg.payload])
        self._add({(n, key): [value] for n in self.grid.span(s, e)})
        if self.intervals:
            self._advance(key, s + 1)
        return []

    def _values(self, starts: list[int], payloads: list[Any]) -> list[Any]:
        """What a window keeps of each event: the payload for an incremental UDM (the clipped
        point ``(s, s + 1, payload)`` for a time-sensitive one); ``(s, payload)`` for the
        others, which are computed at the end over the window's events in time order."""
        if not self.incremental:
            return list(zip(starts, payloads))
        if self.time_sensitive:
            return [(s, s + 1, p) for s, p in zip(starts, payloads)]
        return payloads

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        raise ValueError(
            f"a retraction ({msg!r}) reached the keyed window aggregate, which takes only "
            f"inserts; the planner chose it for a source that never retracts, so this is a bug: "
            f"report it")

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        starts = msg.starts
        if not len(starts):
            return []
        ends = None if msg.points or (msg.ends - starts == 1).all() else msg.ends
        if (int(starts.max()) >= _SAFE or int(starts.min()) <= -_SAFE or (ends is not None and (
                not self.intervals or int(ends.max()) >= _SAFE))):
            return super().on_columns(msg, port)  # the per-event path names the culprit
        keys = apply_columns(self.key, msg)
        named = named_codes(keys)
        if named is not None:  # strings, other objects, NaN: grouped by their int codes
            names, keys = named
        if not (isinstance(keys, np.ndarray) and keys.dtype.kind in "biuf"):
            self._add(self._groups_per_event(msg))
            return []
        if self.intervals:
            distinct, which = np.unique(keys, return_inverse=True)
            top = np.full(len(distinct), MIN_TIME, dtype=np.int64)
            np.maximum.at(top, which.reshape(-1), starts)
            distinct_keys = distinct.tolist()
            if named is not None:
                distinct_keys = [names[c] for c in distinct_keys]
            for k, t in zip(distinct_keys, top.tolist()):
                self._advance(k, t + 1)
        ranged = None if ends is not None else self._ranges(starts, keys,
                                                            by_start=not self.incremental)
        if ranged is None:  # intervals, or keys or panes too far apart to code: a copy of a
            # row per window
            windows, group_keys, rows, bounds = self._sorted(starts, keys, ends)
            lo, hi = bounds[:-1], bounds[1:]
        else:
            windows, group_keys, rows, lo, hi = ranged
        if not windows:
            return []
        if named is not None:
            group_keys = [names[c] for c in group_keys]
        if self.add_ranges is not None:  # a built-in: add column-wise, no payload objects
            by_group = [self.open.get(n, {}).get(k) for n, k in zip(windows, group_keys)]
            states = self.add_ranges(by_group, map_columns(msg.payload, lambda c: c[rows]),
                                     len(rows), lo, hi)
            if states is not None:
                open_ = self.open
                by_key: dict[Hashable, Any] = {}
                last = None
                for n, k, state in zip(windows, group_keys, states):
                    if n != last:
                        by_key = open_.get(n)  # type: ignore[assignment]
                        if by_key is None:
                            by_key = open_[n] = {}
                        last = n
                    by_key[k] = state
                if not self.final:
                    self.touched.update(zip(windows, group_keys))
                return []
        if self.incremental:
            values = self._values(starts.tolist(), msg.payloads())
            ordered = [values[i] for i in rows.tolist()]
            self._add({(n, k): ordered[a:b] for n, k, a, b in
                       zip(windows, group_keys, lo, hi)})
            return []
        # the events themselves: rows sorted by (key, start) when ranged (see _ranges), so
        # each group's slice is in time order already
        payloads, at = msg.payloads(), starts.tolist()
        index = rows.tolist()
        ordered_starts = [at[i] for i in index]
        ordered = [payloads[i] for i in index]
        self._add_members(windows, group_keys, ordered_starts, ordered, lo, hi,
                          in_order=ranged is not None)
        return []

    def _ranges(self, starts: np.ndarray, keys: np.ndarray, by_start: bool = False
                ) -> tuple[list[int], list[Any], np.ndarray, list[int], list[int]] | None:
        """The (window number, key) groups of a batch as ranges of one ordering of its rows.

        The time axis is cut into panes of ``gcd(size, hop)`` ticks, so that every window is
        a run of whole panes; rows sorted by (key, pane), arrival order within a pane, put
        each (window, key) group in consecutive rows: group ``j`` is rows ``lo[j]:hi[j]`` of
        ``rows`` (an event of several hopping windows lies in several ranges, never copied).
        Returns the groups' window numbers and keys (sorted by window, then key), ``rows``,
        ``lo`` and ``hi``; None when the keys or panes span too much to code in an int64.
        ``by_start``: rows sorted by (key, start), arrival order within equal starts (a
        pane's rows in time order, as a non-incremental UDM is given them)."""
        g = self.grid
        pane = math.gcd(g.size, g.hop)
        h, z = g.hop // pane, g.size // pane
        if keys.dtype.kind in "iub":
            as_int = keys.astype(np.int64, copy=False)
            k0 = int(as_int.min())
            if int(as_int.max()) - k0 >= 2**40:
                return None
            codes = as_int - k0
        else:  # floats (no NaN here): code them by rank
            _, codes = np.unique(keys, return_inverse=True)
            codes = codes.reshape(-1).astype(np.int64, copy=False)
        span_k = int(codes.max()) + 1
        panes = (starts - g.alignment) // pane
        j0 = int(panes.min())
        span_j = int(panes.max()) - j0 + 1
        if span_k * span_j >= 2**61:
            return None
        combined = codes * span_j + (panes - j0)
        size = span_k * span_j
        if by_start:  # (key, start) order is (key, pane) order too: panes grow with starts
            order = np.lexsort((starts, codes))  # stable
        else:
            order = np.argsort(combined.astype(np.uint16) if size <= 2**16 else combined,
                               kind="stable")  # a 16-bit stable sort is a radix sort: O(n)
        combined = combined[order]
        first = np.flatnonzero(np.r_[True, combined[1:] != combined[:-1]])
        group_code, group_pane = np.divmod(combined[first], span_j)
        group_pane += j0
        # pane j lies in the windows n with n·h <= j < n·h + z
        last_n = group_pane // h
        first_n = (group_pane - z) // h + 1
        width = int((last_n - first_n).max()) + 1
        if width <= 0:  # every row in a gap between windows (size < hop)
            return [], [], order, [], []
        ns = (last_n[:, None] - np.arange(width)[None, :]).ravel()
        cs = np.repeat(group_code, width)
        keep = ns >= np.repeat(first_n, width)
        ns, cs = ns[keep], cs[keep]
        if not len(ns):
            return [], [], order, [], []
        n0 = int(ns.min())
        span_n = int(ns.max()) - n0 + 1
        if span_n * span_k >= 2**62:
            return None
        groups = np.unique((ns - n0) * span_k + cs)  # sorted by window, then key
        ns, cs = np.divmod(groups, span_k)
        ns += n0
        # window n's panes n·h .. n·h + z - 1 of key c, clipped to the panes of the batch
        base = cs * span_j
        lo = np.searchsorted(combined, base + np.clip(ns * h - j0, 0, span_j), "left")
        hi = np.searchsorted(combined, base + np.clip(ns * h + z - j0, 0, span_j), "left")
        group_keys = keys[order[lo]].tolist()
        return ns.tolist(), group_keys, order, lo.tolist(), hi.tolist()

    def _groups_per_event(self, msg: Columns) -> dict[tuple[int, Hashable], list[Any]]:
        """The events grouped by (window number, key) with the key function per event."""
        payloads = msg.payloads()
        starts = msg.starts.tolist()
        values = self._values(starts, payloads)
        key, span = self.key, self.grid.span
        groups: dict[tuple[int, Hashable], list[Any]] = {}
        for s, e, p, v in zip(starts, msg.ends.tolist(), payloads, values):
            k = group_key(key(p))
            for n in span(s, e):
                groups.setdefault((n, k), []).append(v)
            if self.intervals:
                self._advance(k, s + 1)
        return groups

    def _sorted(self, starts: np.ndarray, keys: np.ndarray, ends: np.ndarray | None
                ) -> tuple[list[int], list[Any], np.ndarray, list[int]]:
        """The (window number, key) groups of a batch of points (``ends`` None) or intervals:
        their window numbers and keys, the batch rows sorted by group (arrival order within a
        group; an event of several windows appears once per window) and the group bounds in
        that order."""
        g = self.grid
        last = starts if ends is None else ends - 1
        hi = (last - g.alignment) // g.hop  # the last window starting at or before e - 1
        lo = (starts - g.alignment - g.size) // g.hop + 1  # the first ending after s
        counts = np.maximum(hi - lo + 1, 0)  # none: in a gap between windows (size < hop)
        total = int(counts.sum())
        if not total:
            return [], [], np.empty(0, dtype=np.int64), [0]
        # each event in counts[i] windows: hi, hi - 1, ..., lo
        idx = np.repeat(np.arange(len(starts)), counts)
        ns = hi[idx] - (np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts))
        ks = keys[idx]
        order = _group_order(ns, ks)
        ns, ks, idx = ns[order], ks[order], idx[order]
        first = np.flatnonzero(np.r_[True, (ns[1:] != ns[:-1]) | (ks[1:] != ks[:-1])])
        return (ns[first].tolist(), ks[first].tolist(), idx,
                [*first.tolist(), len(ns)])

    def _add(self, groups: dict[tuple[int, Hashable], list[Any]]) -> None:
        """Add each group's values to its window's state: payloads to an incremental UDM's
        state; ``(start, payload)`` (in arrival order) to a non-incremental one's
        :class:`_Members`, which the UDM sees in time order, ties in arrival order."""
        udm, open_ = self.udm, self.open
        if not self.final:
            self.touched.update(groups)
        for (n, k), values in groups.items():
            by_key = open_.get(n)
            if by_key is None:
                by_key = open_[n] = {}
            if self.incremental:
                state = by_key.get(k)
                try:
                    if state is None:
                        state = udm.initial_state()  # type: ignore[attr-defined]
                    by_key[k] = udm.add(state, values)  # type: ignore[attr-defined]
                except Exception as exc:
                    raise self._error(n, k, "add", exc) from exc
            else:
                members = by_key.get(k)
                if members is None:
                    members = by_key[k] = _Members()
                members.add([s for s, _ in values], [p for _, p in values])

    def _add_members(self, windows: list[int], keys: list[Hashable], starts: list[int],
                     payloads: list[Any], lo: list[int], hi: list[int],
                     in_order: bool) -> None:
        """A non-incremental UDM: group ``j`` (window ``windows[j]``, key ``keys[j]``) gets
        the events ``lo[j]:hi[j]`` of ``starts`` and ``payloads`` (``in_order``: each such
        range is sorted by start, arrival order within equal starts)."""
        open_ = self.open
        by_key: dict[Hashable, Any] = {}
        last = None
        for n, k, a, b in zip(windows, keys, lo, hi):
            if n != last:
                by_key = open_.get(n)  # type: ignore[assignment]
                if by_key is None:
                    by_key = open_[n] = {}
                last = n
            members = by_key.get(k)
            if members is None:
                members = by_key[k] = _Members()
            members.add(starts[a:b], payloads[a:b], in_order)
        if not self.final:
            self.touched.update(zip(windows, keys))

    # -- CTIs and output --------------------------------------------------------------------
    def end_batch(self) -> list[Message]:
        return [] if self.final else self._correct()

    def _advance(self, key: Hashable, frontier: int) -> None:
        """Intervals: ``key``'s frontier moves to ``frontier`` (the start of one of its events
        + 1): its windows starting before it are produced."""
        old = max(self.cti, self.latest.get(key, MIN_TIME))
        if frontier > old:
            self.latest[key] = frontier
            self._reached(old, frontier, key)

    def _reached(self, lo: int, hi: int, key: Any) -> None:
        """Speculative: the windows starting in ``[lo, hi)`` are produced now, for ``key`` (or
        every key, ``_EVERY``): touched, so that the batch's end sends their rows (a row
        already sent and unchanged is not sent again)."""
        if self.final:
            return
        g = self.grid
        na, nb = g.first_starting_at(lo), g.first_starting_at(hi)
        open_ = self.open
        reached = range(na, nb) if nb - na <= len(open_) else [n for n in open_ if na <= n < nb]
        touched = self.touched
        for n in reached:
            by_key = open_.get(n)
            if not by_key:
                continue
            if key is _EVERY:
                touched.update((n, k) for k in by_key)
            elif key in by_key:
                touched.add((n, key))

    def _produced(self, n: int, key: Hashable) -> bool:
        """Whether window ``n`` of ``key`` is produced: over points always (a point's windows
        start before it); over intervals once it starts before the key's frontier (a window
        of an interval that starts later waits until the frontier reaches it, as the general
        operator's windows do)."""
        return not self.intervals or self.grid.start(n) < max(
            self.cti, self.latest.get(key, MIN_TIME))

    def _correct(self) -> list[Message]:
        """Speculative: each touched group's current result replaces the row sent before."""
        if not self.touched:
            return []
        out: list[Message] = []
        sent = self.sent
        produced = self._produced if self.intervals else None
        per_window: dict[int, list[Hashable]] = {}
        for n, k in self.touched:
            if produced is not None and not produced(n, k):  # touched again when its
                continue  # frontier reaches it
            per_window.setdefault(n, []).append(k)
        self.touched.clear()
        keyed, ids = self.keyed, self.ids
        if self.apply:
            return self._correct_rows(per_window)
        for n in sorted(per_window):  # the window, its states and its rows sent: once each
            keys = per_window[n]
            s, e = self._row_lifetime(n)
            states = self.open[n]
            by_key = sent.setdefault(n, {})
            results = self._results(n, {k: states[k] for k in keys})
            for k, result in zip(keys, results):
                payload = (k, result) if keyed else result
                before = by_key.get(k)
                if before is not None:
                    if identical(before[1], payload):  # 2 -> 2.0 is a change: correct it
                        continue
                    out.append(_new(Retract, (before[0], s, e, s, before[1])))
                oid = ids.mint()
                out.append(_new(Insert, (oid, s, e, payload)))
                by_key[k] = (oid, payload)
        return out

    def _correct_rows(self, per_window: dict[int, list[Hashable]]) -> list[Message]:
        """Speculative, a UDO: each touched group's rows now replace the rows sent before,
        by the smallest difference (:func:`~operators.windows.evaluate.diff`, as the general
        window operator corrects its output): a row that stays is not touched."""
        out: list[Message] = []
        keyed, ids, sent = self.keyed, self.ids, self.sent
        for n in sorted(per_window):
            keys = per_window[n]
            s, e = self._row_lifetime(n)
            states = self.open[n]
            by_key = sent.setdefault(n, {})
            results = self._results(n, {k: states[k] for k in keys})
            pool: list[tuple[Any, int, int, Any, Hashable]] = []
            new: list[tuple[Hashable, tuple[int, int, Any]]] = []
            for k, rows in zip(keys, results):
                before = by_key.pop(k, None)
                if before:
                    pool += [(oid, s, e, p, k) for oid, p in before]
                new += [(k, (s, e, (k, r) if keyed else r)) for r in rows]
            if pool or new:
                out += [msg for msg, _ in diff(pool, new, ids, _recorder(by_key))]
        return out

    def _results(self, n: int, by_key: dict[Hashable, Any]) -> list[Any]:
        """Window ``n``'s results of the groups ``by_key`` (key -> state), in its order: an
        incremental aggregate's in one call (``window_results`` where the UDM has it: the
        built-ins answer part by part), else one call per group; a failing group is found
        again by :meth:`_result`, which names it."""
        window = self._window(n)
        if self.incremental:
            udm: Any = self.udm
            try:
                many = getattr(udm, "window_results", None)
                if many is not None:
                    return many(list(by_key.values()), window)
                window_result = udm.window_result
                return [window_result(state, window) for state in by_key.values()]
            except Exception:  # noqa: BLE001 (raised again below, naming the group)
                pass
        return [self._result(n, k, state, window) for k, state in by_key.items()]

    def _row_lifetime(self, n: int) -> tuple[int, int]:
        g = self.grid
        ws, we = max(g.start(n), MIN_TIME), min(g.end(n), MAX_TIME)
        return self.output.row_start(ws, we), we

    def on_cti(self, time: int, port: int) -> list[Message]:
        if self.intervals and time > self.cti:
            self._reached(self.cti, time, _EVERY)
            self.cti = time
            self.latest = {k: t for k, t in self.latest.items() if t > time}
        g = self.grid
        limit = g.first_ending_after(time)  # windows numbered below it end at or before time
        out: list[Message] = []
        if not self.final:  # the rows sent are the windows' results: just forget them
            out = self._correct()
            for n in sorted(n for n in self.open if n < limit):
                del self.open[n]
                self.sent.pop(n, None)
        for n in sorted(n for n in self.open if n < limit):
            out += self._emit(n, self.open.pop(n))
        cti = min(time, self.output.row_start(max(g.start(limit), MIN_TIME), g.end(limit)))
        return out + self.emit_cti(min(cti, MAX_TIME))

    def finish(self) -> list[Message]:
        """End of input: with ``emit="final"``, the windows no CTI has closed yet, as they
        stand (speculative rows are up to date already)."""
        out: list[Message]
        if not self.final:
            out = self._correct()
            self.open.clear()
            self.sent.clear()
            return out
        out = []
        for n in sorted(self.open):
            by_key = self.open.pop(n)
            if self.intervals:  # (the others start after every input: they never appear)
                by_key = {k: state for k, state in by_key.items() if self._produced(n, k)}
            if by_key:
                out += self._emit(n, by_key)
        return out

    def _emit(self, n: int, by_key: dict[Hashable, Any]) -> list[Message]:
        """Window ``n``'s rows, one per key: the window is built once, an incremental
        aggregate's results are taken in one pass (a failing key is found again by
        :meth:`_result`, which names it)."""
        s, e = self._row_lifetime(n)
        results = self._results(n, by_key)
        ids = self.ids
        if self.apply:  # a UDO: each of its payloads is one row
            mint = ids.mint
            if self.keyed:
                return [_new(Insert, (mint(), s, e, (k, r)))
                        for k, rows in zip(by_key, results) for r in rows]
            return [_new(Insert, (mint(), s, e, r)) for rows in results for r in rows]
        first = ids.next_id
        ids.next_id = first + len(results)
        name = ids.name
        cols = _number_columns(list(by_key), results, self.keyed)
        if cols is not None:  # one column batch: a join after it stays column-wise
            m = len(results)
            oids = np.empty(m, dtype=object)
            oids[:] = [FreshId(name, first + j) for j in range(m)]
            return [Columns(oids, np.full(m, s, dtype=np.int64),  # type: ignore[list-item]
                            np.full(m, e, dtype=np.int64), cols)]
        if self.keyed:
            return [_new(Insert, (FreshId(name, first + j), s, e, (k, result)))
                    for j, (k, result) in enumerate(zip(by_key, results))]
        return [_new(Insert, (FreshId(name, first + j), s, e, result))
                for j, result in enumerate(results)]

    def _result(self, n: int, k: Hashable, state: Any, window: Window | None = None) -> Any:
        if window is None:
            window = self._window(n)
        call = self.call
        try:
            if self.incremental:
                return call.result(state, window)[0]
            if self.time_sensitive:
                results = call.compute([(s, s + 1, p) for s, p in
                                        zip(state.starts, state.payloads)], window)
            else:
                results = call.compute(list(state.payloads), window)
        except Exception as exc:
            raise self._error(n, k, "result" if self.incremental else "compute", exc) from exc
        if not self.apply:
            return results[0]
        if call.stamped:  # a time-sensitive UDO's events: window rows keep the payloads
            return [p for _, _, p in results]
        return results

    def _window(self, n: int) -> Window:
        g = self.grid
        return Window(max(g.start(n), MIN_TIME), min(g.end(n), MAX_TIME))

    def _error(self, n: int, k: Hashable, what: str, exc: Exception) -> OperatorError:
        return self.call.error(self.name, what, self._window(n), f"of group {k!r}", exc)

    def _check_lifetime(self, s: int, e: int, msg: Message) -> None:
        """(An event behind the input CTI is rejected by ``Processor.process``.)"""
        if e != s + 1 and not self.intervals:
            raise ValueError(
                f"{msg!r} is not a point event; the keyed window aggregate takes only points "
                f"(the planner chose it for a point source, so this is a bug: report it)")
        if e == MAX_TIME and e != s + 1:  # (a point at the last instant ends at MAX_TIME)
            raise ValueError(
                f"{msg!r} is an edge event (its end is ∞); the keyed window aggregate takes "
                f"only finite intervals (the planner chose it for a stream of bounded "
                f"lifetimes, so this is a bug: report it)")

    def key_functions(self) -> tuple[Callable[[Any], Any], ...]:
        return (self.key,)

    def keyed_output(self) -> bool:
        return self.keyed

    def state_size(self) -> int:
        return sum(len(by_key) for by_key in self.open.values())

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        # a NaN key read back from a checkpoint is another NaN object: make it NAN_KEY again
        self.open = {n: {group_key(k): v for k, v in by_key.items()}
                     for n, by_key in self.open.items()}
        self.sent = {n: {group_key(k): v for k, v in by_key.items()}
                     for n, by_key in self.sent.items()}
        self.latest = {group_key(k): v for k, v in self.latest.items()}

    def _check(self) -> None:
        limit = self.grid.first_ending_after(self.in_cti)
        assert all(n >= limit for n in self.open), "a final window was not emitted"
