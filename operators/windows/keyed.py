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

The operator is built of parts along these concerns, its methods all on it (no call more per
event): the per-key state and the frontiers (:mod:`~operators.windows.keyed_state`), the
column path (:mod:`~operators.windows.keyed_column_path`) and the results and rows
(:mod:`~operators.windows.keyed_output`); this module holds the row path, the CTIs and the
configuration.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable
from itertools import islice
from operator import itemgetter
from typing import Any

from ..events import MAX_TIME, MIN_TIME, Insert, KeyCtis, Message, Retract
from ..group_apply import group_key
from ..udm import (
    Aggregate,
    ColumnAggregate,
    IncrementalAggregate,
    Operator,
    TimeSensitiveAggregate,
    TimeSensitiveOperator,
    field_getter,
    resolve,
)
from .evaluate import Ids, WindowUdm
from .index import Grid
from .keyed_column_path import KeyedColumnPath
from .keyed_columns import SAFE, inserts_as_columns, merged_batch, retraction_error
from .keyed_output import KeyedWindowOutput
from .keyed_state import EVERY_KEY
from .keyed_table import TablePlan
from .spec import DEFAULT_POLICY, HoppingWindow, PolicyArg

__all__ = ["KeyedWindowAggregate", "supports"]

_time = itemgetter(1)  # of a (key, CTI) pair


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


class KeyedWindowAggregate(KeyedColumnPath, KeyedWindowOutput):
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
        #: a built-in of number parts: its states per window kept column-wise
        #: (:mod:`~operators.windows.keyed_table`)
        self.table_plan = TablePlan.of(self.udm) if self.add_ranges is not None else None
        #: how results become rows
        self.output = resolved.output
        #: window number -> key -> UDM state (incremental) or its events (:class:`_Members`),
        #: or the window's KeyTable (:attr:`table_plan`)
        self.open: dict[int, Any] = {}
        self.ids = Ids(self.name)
        #: speculative: window number -> key -> (id, payload) of the row sent for it (a UDO:
        #: the list of its rows' (id, payload))
        self.sent: dict[int, dict[Hashable, Any]] = {}
        #: speculative: the (window number, key) groups this batch changed
        self.touched: set[tuple[int, Hashable]] = set()
        #: speculative: the keys of a window a column batch changed, as ``(n, [key, ...])``
        #: (no tuple per group; a key may be in several)
        self.touched_runs: list[tuple[int, list[Hashable]]] = []
        #: intervals: the last input CTI, and per key the latest start + 1 where it is later;
        #: a key's windows are produced once they start before its frontier, the larger of
        #: the two (what the general operator of each group does)
        self.cti = MIN_TIME
        self.latest: dict[Hashable, int] = {}

    # -- input ------------------------------------------------------------------------------
    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        """A batch of Columns, CTIs and KeyCtis is added all at once, then its CTIs close
        windows: an event after a CTI (or its key's CTI) starts at or after it, so it never
        falls in a window that CTI closes, and grouping once per batch costs one UDM call per
        group instead of one per group and CTI. For a built-in aggregate, runs of inserts are
        taken as column batches first (:func:`~.keyed_columns.inserts_as_columns`). Anything
        else takes the message-by-message path."""
        msgs = batch if isinstance(batch, list) else list(batch)
        if self.add_ranges is not None:  # a built-in: runs of rows added column-wise
            msgs = inserts_as_columns(msgs, self.in_cti) or msgs
        merged = merged_batch(msgs, self.in_cti, key_ctis=True)
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

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        raise retraction_error(msg, "keyed window aggregate")

    # -- CTIs and output --------------------------------------------------------------------
    def end_batch(self) -> list[Message]:
        return [] if self.final else self._correct()

    def on_cti(self, time: int, port: int) -> list[Message]:
        if self.intervals and time > self.cti:
            self._reached(self.cti, time, EVERY_KEY)
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

    #: Set by the planner when the input's :class:`~operators.events.KeyCtis` are by this
    #: step's key (``AdvanceTime(per_key=...)``): a key's windows are final, and freed, once
    #: its own CTI passes their end (over points; over intervals the stream's CTI decides).
    per_key = False

    def on_key_ctis(self, msg: KeyCtis, port: int) -> list[Message]:
        if not self.per_key or self.intervals:
            return []
        out = [] if self.final else self._correct()
        # the keys by their CTI, oldest first: a window closes for the keys whose CTI is at or
        # after its end, a suffix of them, shorter for each later window (each (window, key)
        # closed costs one step; one result pass and one output batch per window, as a CTI
        # closes it)
        in_cti, end_of = self.in_cti, self.grid.end
        moved = sorted(((group_key(k), t) for k, t in msg.times if t > in_cti), key=_time)
        times = [t for _, t in moved]
        open_, closed = self.open, []
        for n in sorted(open_):
            at = bisect_left(times, end_of(n))
            if at == len(times):
                break  # (no key's CTI reaches this window's end, nor a later one's)
            by_key = self._plain(n) or {}
            done = {k: by_key.pop(k) for k, _ in islice(moved, at, None) if k in by_key}
            if not by_key:
                del open_[n]
            if done:
                closed.append((n, done))
        for n, done in closed:
            if self.final:
                out += self._emit(n, done)
            else:
                sent = self.sent.get(n, {})
                for key in done:
                    sent.pop(key, None)
        return out

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
            if self.intervals:
                self._plain(n)
            by_key = self.open.pop(n)
            if self.intervals:  # (the others start after every input: they never appear)
                by_key = {k: state for k, state in by_key.items() if self._produced(n, k)}
            if by_key:
                out += self._emit(n, by_key)
        return out

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

    def keep_keys(self, keep: Callable[[Hashable], bool]) -> None:
        """Keep only the windows of the keys ``keep`` keeps (rescaling:
        :mod:`operators.key_groups`)."""
        self._plain_all()
        self.open = {n: kept for n, by_key in self.open.items()
                     if (kept := {k: v for k, v in by_key.items() if keep(k)})}
        self.sent = {n: kept for n, by_key in self.sent.items()
                     if (kept := {k: v for k, v in by_key.items() if keep(k)})}
        self.latest = {k: t for k, t in self.latest.items() if keep(k)}

    def add_keys(self, other: KeyedWindowAggregate) -> None:
        """Take in ``other``'s windows (of keys this one has none of); fresh ids go on from
        the higher counter."""
        self._plain_all()
        other._plain_all()
        for mine, theirs in ((self.open, other.open), (self.sent, other.sent)):
            for n, by_key in theirs.items():
                mine.setdefault(n, {}).update(by_key)
        self.latest.update(other.latest)
        self.ids.next_id = max(self.ids.next_id, other.ids.next_id)
        self.out_cti = min(self.out_cti, other.out_cti)

    def restore(self, state: dict[str, Any]) -> None:
        name = self.ids.name  # (fresh ids are minted under this operator's own name)
        super().restore(state)
        self.ids.name = name
        # a NaN key read back from a checkpoint is another NaN object: make it NAN_KEY again
        self.open = {n: {group_key(k): v for k, v in by_key.items()}
                     for n, by_key in self.open.items()}
        self.sent = {n: {group_key(k): v for k, v in by_key.items()}
                     for n, by_key in self.sent.items()}
        self.latest = {group_key(k): v for k, v in self.latest.items()}

    def _check(self) -> None:
        limit = self.grid.first_ending_after(self.in_cti)
        assert all(n >= limit for n in self.open), "a final window was not emitted"
