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

from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable
from itertools import pairwise
from typing import Any

import numpy as np

from ..columns import Columns, apply_columns, map_columns
from ..errors import OperatorError
from ..events import MAX_TIME, MIN_TIME, FreshId, Insert, Message, Retract
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
from .keyed_columns import (
    SAFE,
    merged_batch,
    named_codes,
    number_columns,
    pane_ranges,
    retraction_error,
    window_groups,
)
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
                and max(abs(spec.size), abs(spec.hop), abs(spec.alignment)) < SAFE)
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
            and max(abs(spec.size), abs(spec.hop), abs(spec.alignment)) < SAFE)


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
        merged = merged_batch(msgs, self.in_cti)
        return super().process(msgs if merged is None else merged, port)

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
        raise retraction_error(msg, "keyed window aggregate")

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        starts = msg.starts
        if not len(starts):
            return []
        ends = None if msg.points or (msg.ends - starts == 1).all() else msg.ends
        if (int(starts.max()) >= SAFE or int(starts.min()) <= -SAFE or (ends is not None and (
                not self.intervals or int(ends.max()) >= SAFE))):
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
        ranged = None if ends is not None else pane_ranges(self.grid, starts, keys,
                                                         by_start=not self.incremental)
        if ranged is None:  # intervals, or keys or panes too far apart to code: a copy of a
            # row per window
            windows, group_keys, rows, bounds = window_groups(self.grid, starts, keys, ends)
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
        # the events themselves: rows sorted by (key, start) when ranged (see pane_ranges), so
        # each group's slice is in time order already
        payloads, at = msg.payloads(), starts.tolist()
        index = rows.tolist()
        ordered_starts = [at[i] for i in index]
        ordered = [payloads[i] for i in index]
        self._add_members(windows, group_keys, ordered_starts, ordered, lo, hi,
                          in_order=ranged is not None)
        return []

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
        cols = number_columns(list(by_key), results, self.keyed)
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
