"""``hopping_window`` / ``tumbling_window`` / ``snapshot_window``: a UDM applied to every window
of the time axis (docs/windows.md, the paper's section V).

:func:`make_window` builds the operator for a window spec of :mod:`operators.windows`. The
WindowIndex holds the active windows (a sorted dict), each with its member events, its
incremental UDM state and the output events it emitted; for every insert or retraction the
operator finds only the affected windows and updates the index (snapshot windows split, merge
or vanish); once per batch (at its end, and before each CTI) it evaluates the windows the
batch touched, retracts the part of their output that changed and emits the new output::

    time     0    2    4    6    8   10   12   14   16   18   20
    e1       [------)                                             payload "a"
    e2                 [-----------------)                        payload "b"
    len      [2 ------------------------)[1 -----------------)    tumbling_window(10)

    >>> from operators.events import Insert, Cti
    >>> from operators.cht import to_cht
    >>> op = make_window(HoppingWindow(10, 10), len)
    >>> to_cht(op.process([Insert("e1", 0, 5, "a"), Insert("e2", 4, 12, "b"), Cti(20)]))
    [(0, 10, 2), (10, 20, 1)]

Which windows exist. Hopping window ``n`` is ``[a + n·hop, a + n·hop + size)``; it is produced
when it holds an event and starts before the *frontier* ``max(latest CTI, latest start + 1)``
(the paper's watermark): every window that starts at or before the latest event start already
has (speculative) output, and a window over an edge event that is never closed appears only as
the CTI reaches it — a never-closed edge costs a bounded amount of work and memory per CTI.
Snapshot windows lie between consecutive distinct endpoints of the live events, so an open
edge makes one window to ∞.

Policies. ``clip`` (``none``/``left``/``right``/``full``) cuts member lifetimes to the window
before a time-sensitive UDM sees them. ``output``: ``window`` stamps each result
``[W.start, W.end)``, ``point_end`` ``[W.end − 1, W.end)``; time-sensitive UDOs may keep their
own timestamps, cut to the window (``clip``) or as they are (``keep``, which rejects an event
starting before ``W.start``); ``compressed`` (hopping only, time-insensitive UDMs) gives
window W the interval ``[W.end − hop, W.end)`` and lets a run of consecutive windows with the
same member events share one output row — it is evaluated as snapshot windows over the events'
"altered" lifetimes (from the first owned interval of their first window to the last of their
last window), so an open edge yields one row to ∞.

UDM calls. A UDM sees the members of a window ordered by ``(start, end)`` (ties in arrival
order); write results that do not depend on the order. An incremental UDM gets ``add`` /
``remove`` with the events whose view changed (a new window, or a snapshot window split or
merged under a time-sensitive UDM, starts from ``initial_state`` plus its members), then
``window_result(state, window)``; any other UDM is called once per affected window and batch.

Output and CTIs. A change of a window's output is emitted once per batch, as the smallest
difference from its earlier output: rows that stay the same are not touched, a row that only
changes its end is shortened or lengthened by one retraction, the rest is retracted fully and
inserted anew (fresh ids, never reused).
After input ``Cti(c)`` the operator emits the largest CTI no later output can contradict:

=====================================  =====================================================
window, UDM                            output CTI after input ``Cti(c)``
=====================================  =====================================================
hopping, ``window``/``clip``           start of the first window ending after ``c``, or of
                                       the first window still held, if earlier (held: a
                                       member's end, visible to an unclipped time-sensitive
                                       UDM, can still be retracted)
hopping, ``point_end``                 the same with ``W.end − 1``
snapshot, time-insensitive UDM         ``c`` (``point_end``: ``c − 1``): a change at ``t ≥ c``
                                       splits the window holding ``t`` and only shortens or
                                       lengthens the row before ``t``
snapshot, time-sensitive UDM           ``min(c, first held W.start)`` (``point_end``:
                                       ``min(c − 1, first held W.end − 1)``)
``keep`` (time-bound UDOs)             ``c``; an output change behind it is an error
``compressed``                         ``min(a(c), b(c))``: the start of the altered lifetime
                                       of an event starting at ``c`` and the altered end of an
                                       event ending at ``c``
=====================================  =====================================================

A window is freed by the first CTI after which no input can change it: hopping windows when
``c ≥ W.end``, snapshot windows when ``c > W.end``, and under an unclipped time-sensitive UDM
(``clip`` ``none``/``left``) only once every member has ended before ``c`` — an edge that is
never closed then keeps every window holding it, and the output CTI, at its start (the paper's
advice: clip the right end of long-lived events).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any, Literal

from sortedcontainers import SortedDict, SortedKeyList, SortedList

from .base import Processor
from .cht import freeze
from .errors import DeadLetter, OperatorError
from .events import MAX_TIME, MIN_TIME, FreshId, Insert, Message, Retract, fmt_time
from .udm import UDM, FunctionAggregate, Operator, Window, resolve
from .window_index import REBUILD, Grid, Win
from .windows import CountWindow, HoppingWindow, SnapshotWindow, WindowSpec, check_policies

Rec = tuple[int, int, Any]

__all__ = ["HoppingWindowOperator", "SnapshotWindowOperator", "make_window"]


def make_window(spec: WindowSpec, udm: Any, *, kind: Literal["aggregate", "apply"] = "aggregate",
                clip: str | None = None, output: str | None = None, name: str | None = None,
                on_error: Literal["raise", "dead_letter"] = "raise") -> Processor:
    """The operator applying ``udm`` to every window of ``spec``.

    ``kind="aggregate"``: one output event per non-empty window, payload = the UDM's result.
    ``kind="apply"``: the UDM is a UDO; each payload it returns is one event (a plain function
    returning an iterable is accepted), and a time-sensitive UDO stamps its own events.
    ``clip`` defaults to ``"full"``, ``output`` to ``"window"`` (``"point_end"`` for count
    windows). With ``on_error="dead_letter"`` a window whose UDM raises produces no output
    instead of failing the query, and is recorded in the operator's ``dead_letters`` list once,
    when it is final (a CTI frees it, or the input ends: ``finish()``) — not at all if a later
    change (its bad event retracted) lets the UDM succeed first.
    """
    if isinstance(spec, CountWindow):
        check_policies(spec, clip or "full", output or "point_end")
        from .count_window import CountWindowOperator  # another engineer's module: lazy import

        return CountWindowOperator(spec, udm, kind=kind, name=name, on_error=on_error)
    clip = clip or "full"
    output = output or "window"
    check_policies(spec, clip, output)
    if isinstance(spec, HoppingWindow) and output != "compressed":
        return HoppingWindowOperator(spec, udm, kind=kind, clip=clip, output=output, name=name,
                                     on_error=on_error)
    if isinstance(spec, (HoppingWindow, SnapshotWindow)):
        return SnapshotWindowOperator(spec, udm, kind=kind, clip=clip, output=output, name=name,
                                      on_error=on_error)
    raise TypeError(f"make_window: expected a HoppingWindow, SnapshotWindow or CountWindow from "
                    f"operators.windows, got {spec!r}")


class _FunctionOperator(Operator):
    """A plain function of a list of payloads returning an iterable of payloads, as a UDO."""

    def __init__(self, fn: Callable[[list[Any]], Iterable[Any]]) -> None:
        self.fn = fn

    def compute(self, values: list[Any]) -> Iterable[Any]:
        return self.fn(values)

    @property
    def udm_name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


def _by_time(rec: Rec) -> tuple[int, int]:
    return rec[0], rec[1]


class _WindowBase(Processor):
    """What hopping and snapshot windows share: UDM calls, per-window membership updates
    (incremental deltas), the output diff with retraction of earlier output, and cleanup."""

    _state_fields: tuple[str, ...] = ("windows", "closing", "next_id", "in_cti", "dead_letters")

    def __init__(self, spec: WindowSpec, udm: Any, kind: str, clip: str, output: str,
                 name: str | None, on_error: str) -> None:
        super().__init__(name)
        if kind not in ("aggregate", "apply"):
            raise ValueError(f"kind={kind!r}: use 'aggregate' (one result per window) or "
                             f"'apply' (a UDO: one event per returned payload)")
        if on_error not in ("raise", "dead_letter"):
            raise ValueError(f"on_error={on_error!r}: use 'raise' or 'dead_letter'")
        u: UDM = resolve(udm)
        if kind == "aggregate" and u.is_operator:
            raise ValueError(f"{u.udm_name} is a user-defined operator (zero or more events per "
                             f"window); use .apply(...) (kind='apply') instead of .aggregate")
        if kind == "apply" and not u.is_operator:
            if type(u) is FunctionAggregate:
                u = _FunctionOperator(u.fn)
            else:
                raise ValueError(f"{u.udm_name} is an aggregate (one result per window); use "
                                 f".aggregate(...) (kind='aggregate') instead of .apply")
        if output in ("clip", "keep") and not (u.is_operator and u.time_sensitive):
            raise ValueError(f"output={output!r} keeps the timestamps a time-sensitive UDO "
                             f"stamps on its events, but {u.udm_name} is not a "
                             f"TimeSensitiveOperator; use output='window' or 'point_end'")
        if output == "compressed" and u.time_sensitive:
            raise ValueError(f"output='compressed' lets consecutive windows with the same member "
                             f"events share one row, which needs a time-insensitive UDM; "
                             f"{u.udm_name} is time-sensitive: use output='window' or "
                             f"'point_end'")
        self.spec = spec
        self.udm = u
        self.kind = kind
        self.clip = clip
        self.output = output
        self.on_error = on_error
        self.ts = u.time_sensitive
        self.ts_operator = u.time_sensitive and u.is_operator
        self.incremental = u.incremental
        self.clip_left = clip in ("left", "full")
        self.clip_right = clip in ("right", "full")
        #: the UDM sees true member ends, so any retraction of a member changes the window
        self.unclipped = self.ts and not self.clip_right
        #: the WindowIndex: key -> Win (hopping: the window number; snapshot: its start)
        self.windows: SortedDict = SortedDict()
        #: (close time, key) of every window: a CTI at or after close frees it
        self.closing: SortedList = SortedList()
        self.next_id = 0
        self.in_cti = MIN_TIME
        #: windows on which the UDM raised, with ``on_error="dead_letter"``
        self.dead_letters: list[DeadLetter] = []
        self._touched: dict[int, Win] = {}
        self._pool: list[tuple[Any, int, int, Any, Win]] = []

    # -- what the UDM sees -------------------------------------------------------------------
    def _view(self, w: Win, rec: Rec) -> Any:
        if not self.ts:
            return rec[2]
        s, e, p = rec
        if self.clip_left and s < w.start:
            s = w.start
        if self.clip_right and e > w.end:
            e = w.end
        return (s, e, p)

    def _members(self, w: Win) -> list[Rec]:
        return sorted(w.members.values(), key=_by_time)

    # -- errors ----------------------------------------------------------------------------------
    def _reason(self, w: Win, what: str, problem: str) -> str:
        return (f"window operator {self.name!r}: UDM {self.udm.udm_name!r} failed in {what} "
                f"on window [{fmt_time(w.start)}, {fmt_time(w.end)}) holding "
                f"{len(w.members)} events: {problem}")

    def _failed(self, w: Win, exc: Exception, what: str) -> None:
        """The UDM raised on ``w``: fail the query, or keep the failure with the window until
        it is final (a later evaluation replaces or clears it; see :meth:`_free`)."""
        problem = f"{type(exc).__name__}: {exc}"
        if self.on_error == "raise":
            raise OperatorError(self._reason(w, what, problem) + " (fix the UDM, or pass "
                                "on_error='dead_letter' to record failing windows in "
                                "dead_letters)") from exc
        w.failure = (what, problem)

    def _dead_letter(self, w: Win) -> None:
        """Record the failure of a window that is final (or at the end of the input)."""
        if w.failure is not None:
            self.dead_letters.append(DeadLetter(
                where=self.name, reason=self._reason(w, *w.failure),
                item=(Window(w.start, w.end), self._members(w))))
            w.failure = None

    # -- the runtime's entry point ------------------------------------------------------------
    def end_batch(self) -> list[Message]:
        """Inserts and retractions only update the windows; the change of their output is
        emitted once per batch: before each CTI (which must follow the output it covers) and
        here, at the end. A window touched by ten events of one batch is evaluated once and
        its output corrected once."""
        return self._flush() if self._touched else []

    # -- membership --------------------------------------------------------------------------
    def _touch(self, w: Win) -> None:
        """Mark ``w`` as changing in this step; its earlier output goes to the diff pool."""
        if id(w) not in self._touched:
            self._touched[id(w)] = w
            for rec in w.outputs:
                self._pool.append((*rec, w))
            w.outputs = []

    def _kill(self, w: Win, key: Any) -> None:
        """Remove ``w`` from the index; its output will be retracted."""
        self._touch(w)
        w.dead = True
        if w.close is not None:
            self.closing.remove((w.close, key))
            w.close = None
        if self.windows.get(key) is w:
            del self.windows[key]

    def _put(self, key: Any, w: Win) -> Win:
        self.windows[key] = w
        self._touch(w)
        return w

    def _set_member(self, w: Win, eid: Any, rec: Rec | None) -> None:
        """Make event ``eid`` a member of ``w`` with lifetime ``rec`` (None: not a member);
        feeds the incremental state the delta when what the UDM sees changes."""
        old = w.members.get(eid)
        if old is None and rec is None:
            return
        ov = None if old is None else self._view(w, old)
        nv = None if rec is None else self._view(w, rec)
        if old is not None and rec is not None and (not self.ts or ov == nv):
            w.members[eid] = rec
            return
        self._touch(w)
        w.dirty = True
        if rec is None:
            del w.members[eid]
        else:
            w.members[eid] = rec
        if self.incremental and w.state is not REBUILD:
            try:
                if old is not None:
                    w.state = self.udm.remove(w.state, [ov])  # type: ignore[attr-defined]
                if rec is not None:
                    w.state = self.udm.add(w.state, [nv])  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 -- reported with the window
                w.state = REBUILD
                self._failed(w, exc, "add/remove")

    # -- evaluation ----------------------------------------------------------------------------
    def _evaluate(self, w: Win) -> None:
        udm: Any = self.udm
        window = Window(w.start, w.end)
        # incremental UDMs keep their state: the (sorted) members are needed only to rebuild it
        members = [] if self.incremental and w.state is not REBUILD else self._members(w)
        try:
            if self.incremental:
                if w.state is REBUILD:
                    state = udm.initial_state()
                    if members:
                        state = udm.add(state, [self._view(w, r) for r in members])
                    w.state = state
                result = [udm.window_result(w.state, window)]
            elif not self.ts:
                values = [r[2] for r in members]
                result = list(udm.compute(values)) if udm.is_operator else [udm.compute(values)]
            elif not udm.is_operator:
                result = [udm.compute([self._view(w, r) for r in members], window)]
            else:
                result = self._stamped(w, udm.compute([self._view(w, r) for r in members],
                                                      window))
        except Exception as exc:  # noqa: BLE001 -- reported with the window
            if self.incremental:
                w.state = REBUILD
            result = []
            w.result, w.dirty = result, False
            self._failed(w, exc, "compute")
            return
        w.result, w.dirty, w.failure = result, False, None

    def _stamped(self, w: Win, events: Iterable[Any]) -> list[Rec]:
        out = []
        for ev in events:
            try:
                s, e, p = ev
            except (TypeError, ValueError):
                raise TypeError(f"a TimeSensitiveOperator must return (start, end, payload) "
                                f"tuples, got {ev!r}") from None
            if not (isinstance(s, int) and isinstance(e, int)) or e <= s:
                raise ValueError(f"the UDO returned the event {ev!r}; it needs int ticks with "
                                 f"end > start")
            if self.output == "keep" and s < w.start:
                raise ValueError(f"output='keep' rejects the event [{fmt_time(s)}, "
                                 f"{fmt_time(e)}) {p!r}: it starts before its window's start "
                                 f"{fmt_time(w.start)} and could contradict an output CTI; "
                                 f"stamp events at or after the window start, or use "
                                 f"output='clip'")
            out.append((s, e, p))
        return out

    def _rows(self, w: Win) -> list[Rec]:
        ws, we, output = w.start, w.end, self.output
        if self.ts_operator:
            if output == "keep":
                return list(w.result)
            if output == "clip":
                return [(max(s, ws), min(e, we), p) for s, e, p in w.result
                        if max(s, ws) < min(e, we)]
            payloads = [p for _, _, p in w.result]
        else:
            payloads = w.result
        if output == "point_end":
            return [(we - 1, we, p) for p in payloads]
        return [(ws, we, p) for p in payloads]

    # -- output ----------------------------------------------------------------------------------
    def _close_time(self, w: Win) -> int:
        raise NotImplementedError

    def _key(self, w: Win) -> Any:
        raise NotImplementedError

    def _flush(self) -> list[Message]:
        """Evaluate the windows touched by this step and emit the difference between their
        earlier and their new output."""
        touched, pool = self._touched, self._pool
        if not touched:
            return []
        self._touched, self._pool = {}, []
        new: list[tuple[Win, Rec]] = []
        for w in touched.values():
            if w.dead:
                continue
            if w.dirty:
                self._evaluate(w)
            new.extend((w, row) for row in self._rows(w))
            key = self._key(w)
            if w.close is not None:
                self.closing.remove((w.close, key))
            w.close = self._close_time(w)
            self.closing.add((w.close, key))
        return self._diff(pool, new)

    def _diff(self, pool: list[tuple[Any, int, int, Any, Win]],
              new: list[tuple[Win, Rec]]) -> list[Message]:
        if not pool:  # new windows only: nothing to compare with
            return [self._insert_row(w, row) for w, row in new]
        exact: dict[Any, list[int]] = defaultdict(list)
        for i, (_, s, e, p, _w) in enumerate(pool):
            exact[(s, e, freeze(p))].append(i)
        used = [False] * len(pool)
        rest: list[tuple[Win, Rec, Any]] = []
        for w, (s, e, p) in new:
            fp = freeze(p)
            hits = exact.get((s, e, fp))
            if hits:
                i = hits.pop()
                used[i] = True
                w.outputs.append(pool[i][:4])
            else:
                rest.append((w, (s, e, p), fp))
        by_start: dict[Any, list[int]] = defaultdict(list)
        for i, (_, s, _e, p, _w) in enumerate(pool):
            if not used[i]:
                by_start[(s, freeze(p))].append(i)
        partial: list[Message] = []
        inserts: list[tuple[Win, Rec]] = []
        for w, (s, e, p), fp in rest:
            hits = by_start.get((s, fp))
            if hits:
                i = hits.pop()
                used[i] = True
                oid, _, oe, op, _ow = pool[i]
                partial.append(self._checked(Retract(oid, s, oe, e, op), w))
                w.outputs.append((oid, s, e, op))
            else:
                inserts.append((w, (s, e, p)))
        out: list[Message] = [self._checked(Retract(oid, s, e, s, p), w)
                              for i, (oid, s, e, p, w) in enumerate(pool) if not used[i]]
        out.extend(partial)
        out.extend(self._insert_row(w, row) for w, row in inserts)
        return out

    def _insert_row(self, w: Win, row: Rec) -> Message:
        oid = FreshId(self.name, self.next_id)
        self.next_id += 1
        s, e, p = row
        w.outputs.append((oid, s, e, p))
        return self._checked(Insert(oid, s, e, p), w)

    def _checked(self, msg: Message, w: Win) -> Message:
        if msg.sync_time < self.out_cti:
            hint = ("output='keep' needs a time-bound UDO: the events it returns for a window "
                    "may change only at or after the time of the input change"
                    if self.output == "keep" else
                    "the UDM must be deterministic (the same input gives the same result)")
            raise OperatorError(
                f"window operator {self.name!r}: UDM {self.udm.udm_name!r} changed the output "
                f"of window [{fmt_time(w.start)}, {fmt_time(w.end)}) at {fmt_time(msg.sync_time)}"
                f", behind the output CTI {fmt_time(self.out_cti)} ({msg!r}); {hint}")
        return msg

    def _free(self, c: int) -> None:
        closing, windows = self.closing, self.windows
        while closing and closing[0][0] <= c:
            _, key = closing.pop(0)
            w = windows.pop(key)
            w.close = None
            if w.failure is not None:  # final: no later input can make the UDM succeed
                self._dead_letter(w)

    def finish(self) -> list[Message]:
        """End of input: the windows still held are as final as they will get, so the ones
        the UDM fails on go to the dead letters now (their input is in no output row)."""
        for w in self.windows.values():
            self._dead_letter(w)
        return []

    def snapshot(self) -> dict[str, Any]:
        assert not self._touched, "snapshot taken in the middle of a step"
        return super().snapshot()

    def _check(self) -> None:
        assert not self._touched and not self._pool
        assert len(self.closing) == len(self.windows)
        for key, w in self.windows.items():
            assert not w.dead and w.members, (key, w)
            assert (w.close, key) in self.closing, (key, w)
            assert self._key(w) == key
            for s, e, _ in w.members.values():
                assert s < w.end and e > w.start, (w, s, e)
            if self.incremental:
                assert not w.dirty


class HoppingWindowOperator(_WindowBase):
    """A UDM over the hopping (or tumbling) windows of ``spec``; see the module docstring.

    Besides the WindowIndex it keeps an EventIndex of the events that cross the frontier
    (end after it): they are the members of the windows the frontier will reach next.

    Cost per insert or retraction: ``O(log W)`` index work plus, for each affected window
    (``(length + size) / hop`` of them, only those before the frontier), one incremental
    delta or one UDM call over the window's events.
    """

    _state_fields = _WindowBase._state_fields + ("frontier", "crossing", "crossing_by_end")

    def __init__(self, spec: HoppingWindow, udm: Any, *,
                 kind: Literal["aggregate", "apply"] = "aggregate", clip: str = "full",
                 output: str = "window", name: str | None = None,
                 on_error: Literal["raise", "dead_letter"] = "raise") -> None:
        if not isinstance(spec, HoppingWindow):
            raise TypeError(f"HoppingWindowOperator needs an operators.windows.HoppingWindow, "
                            f"got {spec!r}")
        check_policies(spec, clip, output)
        if output == "compressed":
            raise ValueError("output='compressed' is evaluated by SnapshotWindowOperator; build "
                             "the operator with operators.window.make_window")
        super().__init__(spec, udm, kind, clip, output,
                         name or f"{spec.kind}_window({spec.size}, {spec.hop})", on_error)
        self.grid = Grid(spec.size, spec.hop, spec.alignment)
        #: windows starting before the frontier exist (if non-empty): max(CTI, latest start+1)
        self.frontier = MIN_TIME
        #: the EventIndex: events ending after the frontier, id -> (start, end, payload)
        self.crossing: dict[Any, Rec] = {}
        self.crossing_by_end: SortedKeyList = SortedKeyList(key=itemgetter(0))

    def _key(self, w: Win) -> int:
        g = self.grid
        if w.start == MIN_TIME:  # maybe cut to the axis (see _window): the end is exact
            return (w.end - g.size - g.alignment) // g.hop
        return (w.start - g.alignment) // g.hop

    def _close_time(self, w: Win) -> int:
        if self.unclipped:
            return max(w.end, max(e for _, e, _ in w.members.values()) + 1)
        return w.end

    def _window(self, n: int) -> Win:
        w = self.windows.get(n)
        if w is None:
            # the first and last windows of the time axis are cut to it: an event near
            # MIN_TIME or MAX_TIME is valid, its window's output must be too
            g = self.grid
            w = self._put(n, Win(max(g.start(n), MIN_TIME), min(g.end(n), MAX_TIME)))
        return w

    def _cross(self, eid: Any, rec: Rec | None, old_end: int | None) -> None:
        if old_end is not None and eid in self.crossing:
            del self.crossing[eid]
            self.crossing_by_end.remove((old_end, eid))
        if rec is not None and rec[1] > self.frontier:
            self.crossing[eid] = rec
            self.crossing_by_end.add((rec[1], eid))

    def _advance(self, frontier: int) -> None:
        """Move the frontier: windows starting in [old, new) that hold a crossing event appear."""
        old = self.frontier
        if frontier <= old:
            return
        g = self.grid
        na, nb = g.first_starting_at(old), g.first_starting_at(frontier)
        if na < nb and self.crossing:
            if frontier == MAX_TIME and any(e == MAX_TIME for _, e, _ in self.crossing.values()):
                raise OperatorError(
                    f"window operator {self.name!r}: time reached ∞ (a CTI or a start there) "
                    f"while an edge event was never closed; under output={self.output!r} it "
                    f"lies in infinitely many hopping "
                    f"windows. Close the edge (a retraction to its end) before the final CTI, "
                    f"or use output='compressed'")
            for eid, rec in list(self.crossing.items()):
                for n in range(max(na, g.first_ending_after(rec[0])),
                               min(nb, g.last_starting_before(rec[1]) + 1)):
                    self._set_member(self._window(n), eid, rec)
        self.frontier = frontier
        by_end = self.crossing_by_end
        while by_end and by_end[0][0] <= frontier:
            _, eid = by_end.pop(0)
            del self.crossing[eid]

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        self._advance(msg.start + 1)
        rec = (msg.start, msg.end, msg.payload)
        g = self.grid
        last = min(g.last_starting_before(msg.end), g.last_starting_before(self.frontier))
        for n in range(g.first_ending_after(msg.start), last + 1):
            self._set_member(self._window(n), msg.id, rec)
        self._cross(msg.id, rec, None)
        return []  # the batch's changes are emitted at its end (see process)

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        s, e1, e2 = msg.start, msg.end, msg.new_end
        new = (s, e2, msg.payload) if e2 > s else None
        g = self.grid
        lo, hi = (e1, e2) if e1 < e2 else (e2, e1)
        # windows whose members change: those overlapping [lo, hi); an unclipped
        # time-sensitive UDM also sees the new end in every window holding the event
        first = g.first_ending_after(s if self.unclipped and new is not None else lo)
        last = min(g.last_starting_before(hi), g.last_starting_before(self.frontier))
        if e2 > e1:
            for n in range(first, last + 1):
                self._set_member(self._window(n), msg.id, new)
        else:
            for n in list(self.windows.irange(first, last)):
                w = self.windows[n]
                inside = new is not None and w.start < e2 and w.end > s
                self._set_member(w, msg.id, new if inside else None)
                if not w.members:
                    self._kill(w, n)
        self._cross(msg.id, new, e1)
        return []

    def on_cti(self, time: int, port: int) -> list[Message]:
        self.in_cti = max(self.in_cti, time)
        self._advance(time)
        out = self._flush()
        self._free(time)
        return out + self.emit_cti(self._out_cti(time))

    def _out_cti(self, c: int) -> int:
        if self.output == "keep":
            return c
        g = self.grid
        n0 = g.first_ending_after(c)
        point = self.output == "point_end"
        t = g.end(n0) - 1 if point else g.start(n0)
        if self.windows:
            w = self.windows.peekitem(0)[1]
            t = min(t, w.end - 1 if point else w.start)
        return min(t, MAX_TIME)

    def state_size(self) -> int:
        return len(self.windows) + len(self.crossing)

    def _check(self) -> None:
        super()._check()
        assert len(self.crossing) == len(self.crossing_by_end)
        for eid, (s, e, _) in self.crossing.items():
            assert e > self.frontier and (e, eid) in self.crossing_by_end
        for w in self.windows.values():
            assert w.start < self.frontier


class SnapshotWindowOperator(_WindowBase):
    """A UDM over snapshot windows (between consecutive distinct event endpoints), or — for a
    hopping spec with ``output="compressed"`` — over the snapshot windows of the events'
    altered lifetimes (see the module docstring).

    The windows carry their member events, so a change only touches the windows it overlaps:
    a new endpoint splits the window holding it, a vanished endpoint merges its two neighbours
    (``endpoints`` counts the endpoints at each time), a window losing its last event vanishes.

    Cost per insert or retraction: ``O(log W)`` plus one delta or UDM call per window the
    changed part of the lifetime overlaps (for an unclipped time-sensitive UDM: every window
    holding the event).
    """

    _state_fields = _WindowBase._state_fields + ("endpoints",)

    def __init__(self, spec: HoppingWindow | SnapshotWindow, udm: Any, *,
                 kind: Literal["aggregate", "apply"] = "aggregate", clip: str = "full",
                 output: str = "window", name: str | None = None,
                 on_error: Literal["raise", "dead_letter"] = "raise") -> None:
        check_policies(spec, clip, output)
        self.grid: Grid | None = None
        if isinstance(spec, HoppingWindow):
            if output != "compressed":
                raise ValueError("SnapshotWindowOperator takes a hopping spec only with "
                                 "output='compressed'; use HoppingWindowOperator")
            self.grid = Grid(spec.size, spec.hop, spec.alignment)
            default = f"{spec.kind}_window({spec.size}, {spec.hop}, compressed)"
        elif isinstance(spec, SnapshotWindow):
            default = "snapshot_window"
        else:
            raise TypeError(f"SnapshotWindowOperator needs a SnapshotWindow, got {spec!r}")
        super().__init__(spec, udm, kind, clip, output, name or default, on_error)
        #: time -> number of live event endpoints there (times before the CTI are dropped)
        self.endpoints: SortedDict = SortedDict()

    def _key(self, w: Win) -> int:
        return w.start

    def _close_time(self, w: Win) -> int:
        # the window ending at the CTI can still merge with the next one
        if self.unclipped:
            return max(w.end, max(e for _, e, _ in w.members.values())) + 1
        return w.end + 1

    # -- compressed: altered lifetimes ---------------------------------------------------------
    def _alter(self, s: int, e: int) -> tuple[int, int] | None:
        """The lifetime covering the owned intervals ``[W.end − hop, W.end)`` of the windows
        ``[s, e)`` overlaps; None if it overlaps none (in a gap, when size < hop)."""
        g = self.grid
        assert g is not None
        first, last = g.first_ending_after(s), g.last_starting_before(e)
        if first > last:
            return None
        return g.end(first) - g.hop, MAX_TIME if e == MAX_TIME else g.end(last)

    def _altered_cti(self, c: int) -> int:
        g = self.grid
        if g is None or c == MIN_TIME:
            return c
        if c == MAX_TIME:
            return MAX_TIME
        return min(g.end(g.first_ending_after(c)) - g.hop, g.end(g.last_starting_before(c)))

    # -- the index -------------------------------------------------------------------------------
    def _endpoint(self, t: int, delta: int) -> None:
        n = self.endpoints.get(t, 0) + delta
        if n > 0:
            self.endpoints[t] = n
        elif t in self.endpoints:
            del self.endpoints[t]

    def _split(self, t: int) -> None:
        """Split the window holding ``t`` in its interior into ``[start, t)`` and ``[t, end)``."""
        i = self.windows.bisect_right(t) - 1
        if i < 0:
            return
        key, w = self.windows.peekitem(i)
        if not w.start < t < w.end:
            return
        self._kill(w, key)
        left = Win(w.start, t, dict(w.members))
        right = Win(t, w.end, dict(w.members))
        if not self.ts:  # same members: the result (and the left state) carry over
            left.state = w.state
            left.result, left.dirty, left.failure = w.result, w.dirty, w.failure
            right.result, right.dirty, right.failure = list(w.result), w.dirty, w.failure
        self._put(left.start, left)
        self._put(right.start, right)

    def _merge(self, t: int) -> None:
        """Merge the windows ending and starting at ``t`` if no endpoint is left there."""
        if self.endpoints.get(t, 0) or t not in self.windows:
            return
        i = self.windows.bisect_left(t) - 1
        if i < 0:
            return
        lkey, left = self.windows.peekitem(i)
        if left.end != t:
            return
        right = self.windows[t]
        self._kill(left, lkey)
        self._kill(right, t)
        # members are the same on both sides; the right side's ends are exact for the union
        merged = Win(left.start, right.end, dict(right.members))
        if not self.ts:
            merged.state = left.state
            merged.result, merged.dirty, merged.failure = left.result, left.dirty, left.failure
        self._put(merged.start, merged)

    def _inside(self, a: int, b: int) -> list[Win]:
        return [self.windows[k] for k in self.windows.irange(a, b, inclusive=(True, False))]

    def _add_span(self, eid: Any, rec: Rec, a: int, b: int) -> None:
        self._split(a)
        self._split(b)
        cursor = a
        for w in self._inside(a, b):
            if w.start > cursor:
                self._put(cursor, Win(cursor, w.start, {eid: rec}))
            self._set_member(w, eid, rec)
            cursor = w.end
        if cursor < b:
            self._put(cursor, Win(cursor, b, {eid: rec}))

    def _remove_span(self, eid: Any, a: int, b: int) -> None:
        self._split(a)
        self._split(b)
        for w in self._inside(a, b):
            self._set_member(w, eid, None)
            if not w.members:
                self._kill(w, w.start)

    def _update_span(self, eid: Any, rec: Rec, a: int, b: int) -> None:
        for w in self._inside(a, b):
            self._set_member(w, eid, rec)

    def _insert(self, eid: Any, s: int, e: int, p: Any) -> None:
        self._endpoint(s, 1)
        self._endpoint(e, 1)
        self._add_span(eid, (s, e, p), s, e)

    def _retract(self, eid: Any, s: int, e1: int, e2: int, p: Any) -> None:
        self._endpoint(e1, -1)
        if e2 > s:
            self._endpoint(e2, 1)
            new = (s, e2, p)
            if e2 > e1:
                self._add_span(eid, new, e1, e2)
                if self.unclipped:
                    self._update_span(eid, new, s, e1)
            else:
                self._remove_span(eid, e2, e1)
                if self.unclipped:
                    self._update_span(eid, new, s, e2)
            self._merge(e1)
        else:
            self._endpoint(s, -1)
            self._remove_span(eid, s, e1)
            self._merge(s)
            self._merge(e1)

    # -- messages --------------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        if self.grid is None:
            self._insert(msg.id, msg.start, msg.end, msg.payload)
        else:
            alt = self._alter(msg.start, msg.end)
            if alt is not None:
                self._insert(msg.id, alt[0], alt[1], msg.payload)
        return []  # the batch's changes are emitted at its end (see process)

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        s, e1, e2, p = msg.start, msg.end, msg.new_end, msg.payload
        if self.grid is None:
            self._retract(msg.id, s, e1, e2, p)
            return []
        old = self._alter(s, e1)
        new = self._alter(s, e2) if e2 > s else None
        if old == new:
            return []
        if old is None:
            assert new is not None
            self._insert(msg.id, new[0], new[1], p)
        elif new is None:
            self._retract(msg.id, old[0], old[1], old[0], p)
        else:
            self._retract(msg.id, old[0], old[1], new[1], p)
        return []

    def on_cti(self, time: int, port: int) -> list[Message]:
        self.in_cti = max(self.in_cti, time)
        out = self._flush()  # the output a CTI covers goes before it
        c = self._altered_cti(time)
        self._free(c)
        ends = self.endpoints
        while ends and ends.peekitem(0)[0] < c:
            ends.popitem(0)
        return out + self.emit_cti(self._out_cti(time, c))

    def _out_cti(self, time: int, c: int) -> int:
        if self.output == "keep":
            return time
        point = self.output == "point_end"
        t = c - 1 if point and c > MIN_TIME else c
        if self.ts and self.windows:
            w = self.windows.peekitem(0)[1]
            t = min(t, w.end - 1 if point else w.start)
        return t

    def state_size(self) -> int:
        return len(self.windows) + len(self.endpoints)

    def _check(self) -> None:
        super()._check()
        prev_end = MIN_TIME
        for w in self.windows.values():
            assert w.start < w.end and w.start >= prev_end, w
            prev_end = w.end
            for s, e, _ in w.members.values():
                assert s <= w.start and e >= w.end, (w, s, e)
