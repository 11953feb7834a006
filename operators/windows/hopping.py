"""``hopping_window`` / ``tumbling_window``: a UDM applied to every window of the time axis
(docs/windows.md, the paper's section V); :mod:`operators.windows.snapshot` shares this
description.

:func:`operators.windows.make_window` builds the operator for a window spec. The
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
    >>> from operators.windows import HoppingWindow
    >>> op = HoppingWindowOperator(HoppingWindow(10, 10), len)
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
``remove`` with the events whose view changed, then ``window_result(state, window)``: a new
window starts from ``initial_state`` plus its members, while the halves of a split snapshot
window (and a merged one) start from the old window's state — shared until one changes, then
copied with ``copy_state`` — unless a time-sensitive UDM's clipping changes what it sees;
any other UDM is called once per affected window and batch.

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

from operator import itemgetter
from typing import Any, Literal

from sortedcontainers import SortedKeyList

from ..errors import OperatorError
from ..events import MAX_TIME, MIN_TIME, Insert, Message, Retract
from .evaluate import Rec
from .index import Grid, Win
from .spec import DEFAULT_POLICY, HoppingWindow, PolicyArg
from .window_operator import WindowBase

__all__ = ["HoppingWindowOperator"]


class HoppingWindowOperator(WindowBase):
    """A UDM over the hopping (or tumbling) windows of ``spec``; see the module docstring.

    Besides the WindowIndex it keeps an EventIndex of the events that cross the frontier
    (end after it): they are the members of the windows the frontier will reach next.

    Cost per insert or retraction: ``O(log W)`` index work plus, for each affected window
    (``(length + size) / hop`` of them, only those before the frontier), one incremental
    delta or one UDM call over the window's events.
    """

    _state_fields = WindowBase._state_fields + ("frontier", "crossing", "crossing_by_end")

    def __init__(self, spec: HoppingWindow, udm: Any, *,
                 kind: Literal["aggregate", "apply"] = "aggregate",
                 policy: PolicyArg = DEFAULT_POLICY, name: str | None = None,
                 on_error: Literal["raise", "dead_letter"] = "raise") -> None:
        if not isinstance(spec, HoppingWindow):
            raise TypeError(f"HoppingWindowOperator needs an operators.windows.HoppingWindow, "
                            f"got {spec!r}")
        resolved = policy.resolve(spec)
        if resolved.compressed:
            raise ValueError("output='compressed' is evaluated by SnapshotWindowOperator; build "
                             "the operator with operators.windows.make_window")
        super().__init__(spec, udm, kind, resolved,
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
                    f"while an edge event was never closed; under output={self.output.name!r} it "
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
        self._advance(time)
        out = self._flush()
        self._free(time)
        return out + self.emit_cti(self._out_cti(time))

    def _out_cti(self, c: int) -> int:
        """The rows' start of the first window ending after ``c`` or of the first held."""
        policy = self.output
        if policy.keep:
            return c
        g = self.grid
        n0 = g.first_ending_after(c)
        t = policy.row_start(g.start(n0), g.end(n0))
        if self.windows:
            w = self.windows.peekitem(0)[1]
            t = min(t, policy.row_start(w.start, w.end))
        return min(t, MAX_TIME)

    def state_size(self) -> int:
        return len(self.windows) + len(self.crossing)

    def _check(self) -> None:
        super()._check()
        assert len(self.crossing) == len(self.crossing_by_end)
        for eid, (_, e, _) in self.crossing.items():
            assert e > self.frontier and (e, eid) in self.crossing_by_end
        for w in self.windows.values():
            assert w.start < self.frontier
