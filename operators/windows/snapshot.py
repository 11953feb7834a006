"""``snapshot_window`` and hopping windows with ``output="compressed"``: a UDM applied to the
windows between consecutive distinct endpoints of the live events (docs/windows.md; the
policies, UDM calls, output CTIs and cleanup are described in :mod:`operators.windows.hopping`).
"""

from __future__ import annotations

from typing import Any, Literal

from sortedcontainers import SortedDict

from ..events import MAX_TIME, MIN_TIME, Insert, Message, Retract
from .evaluate import Rec
from .index import REBUILD, Grid, Win
from .spec import DEFAULT_POLICY, HoppingWindow, PolicyArg, SnapshotWindow
from .window_operator import WindowBase

__all__ = ["SnapshotWindowOperator"]


class SnapshotWindowOperator(WindowBase):
    """A UDM over snapshot windows (between consecutive distinct event endpoints), or — for a
    hopping spec with ``output="compressed"`` — over the snapshot windows of the events'
    altered lifetimes (see the module docstring).

    The windows carry their member events, so a change only touches the windows it overlaps:
    a new endpoint splits the window holding it, a vanished endpoint merges its two neighbours
    (``endpoints`` counts the endpoints at each time), a window losing its last event vanishes.
    Split halves and merged windows keep the incremental state (see :meth:`_carry`), so no
    member is added again.

    Cost per insert or retraction: ``O(log W)`` plus one delta or UDM call per window the
    changed part of the lifetime overlaps (for an unclipped time-sensitive UDM: every window
    holding the event).
    """

    _state_fields = WindowBase._state_fields + ("endpoints",)

    def __init__(self, spec: HoppingWindow | SnapshotWindow, udm: Any, *,
                 kind: Literal["aggregate", "apply"] = "aggregate",
                 policy: PolicyArg = DEFAULT_POLICY, name: str | None = None,
                 on_error: Literal["raise", "dead_letter"] = "raise") -> None:
        if not isinstance(spec, (HoppingWindow, SnapshotWindow)):
            raise TypeError(f"SnapshotWindowOperator needs a SnapshotWindow, got {spec!r}")
        resolved = policy.resolve(spec)
        self.grid: Grid | None = None
        if isinstance(spec, HoppingWindow):
            if not resolved.compressed:
                raise ValueError("SnapshotWindowOperator takes a hopping spec only with "
                                 "output='compressed'; use HoppingWindowOperator")
            self.grid = Grid(spec.size, spec.hop, spec.alignment)
            default = f"{spec.kind}_window({spec.size}, {spec.hop}, compressed)"
        else:
            default = "snapshot_window"
        super().__init__(spec, udm, kind, resolved, name or default, on_error)
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
        if self.incremental and w.state is REBUILD and (not self.ts or not self.clip_left
                                                        or not self.clip_right):
            # a window new in this batch gets its members at evaluation, in one call; build
            # that state now, once, so that its halves (split again and again by the batch's
            # later events) need not each add every member again
            try:
                w.state = self.call.initial([self._view(w, r) for r in self._members(w)])
                w.shared = False
            except Exception:  # noqa: BLE001 -- left to _evaluate, which reports it
                w.state = REBUILD
        self._kill(w, key)
        left = Win(w.start, t, w.members)  # (w is dead: its members move)
        right = Win(t, w.end, dict(w.members))
        self._carry(w, left, same_views=not self.clip_right)
        self._carry(w, right, same_views=not self.clip_left)
        self._put(left.start, left)
        self._put(right.start, right)

    def _carry(self, old: Win, new: Win, same_views: bool) -> None:
        """Start ``new``, holding the same members as ``old``, from ``old``'s state and
        result, so that a split or merge costs no UDM call per member. A time-sensitive UDM
        sees clipped lifetimes: the state carries over only if the clipping at the side
        that moved (``same_views``) is off, and the result is computed again for the new
        window."""
        if not self.ts:
            self._share_state(old, new)
            new.result, new.dirty, new.failure = list(old.result), old.dirty, old.failure
        elif same_views:
            self._share_state(old, new)

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
        merged = Win(left.start, right.end, right.members)  # (right is dead: they move)
        if not self.ts or not self.clip_right:
            self._carry(left, merged, same_views=True)
        else:
            self._carry(right, merged, same_views=not self.clip_left)
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
        out = self._flush()  # the output a CTI covers goes before it
        c = self._altered_cti(time)
        self._free(c)
        ends = self.endpoints
        while ends and ends.peekitem(0)[0] < c:
            ends.popitem(0)
        return out + self.emit_cti(self._out_cti(time, c))

    def _out_cti(self, time: int, c: int) -> int:
        """``c`` (a point row lies one tick before the end), or the rows' start of the first
        held window under a time-sensitive UDM, if earlier."""
        policy = self.output
        if policy.keep:
            return time
        t = c - 1 if policy.point and c > MIN_TIME else c
        if self.ts and self.windows:
            w = self.windows.peekitem(0)[1]
            t = min(t, policy.row_start(w.start, w.end))
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
