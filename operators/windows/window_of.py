"""Which window made an output row: the inverse of the output policies, defined once.

A window operator stamps the results of window ``W`` as rows under its output policy
(:class:`~operators.windows.spec.OutputPolicy`): ``window`` ``[W.start, W.end)``,
``point_end`` ``[W.end − 1, W.end)``, ``compressed`` the owned intervals ``[W.end − hop, W.end)``
of a run of hopping windows, ``clip`` a time-sensitive UDO's own stamps cut to ``W``, ``keep``
its stamps as they are (none before ``W.start``). :func:`window_of` goes back: from a row's
lifetime (and, where the policy needs them, the lifetimes of the input events alive when it was
made) to the window ``[lo, hi)`` whose members made it. :func:`in_window` says which input events
those members are (overlap for hopping and snapshot windows; start, or end, inside it for count
and session windows). :func:`spec_from_dict` rebuilds a spec from what a trace's ``plan.json``
holds of it.

The debugger (:mod:`topology.seeing.debug`: the members of a window's output) and the timeline
pictures (:mod:`topology.seeing.timeline`: the bracket over a window's inputs) both use these.

    >>> from operators.windows.spec import HoppingWindow, SnapshotWindow, CountWindow
    >>> window_of(HoppingWindow(10, 5), "point_end", 14, 15)
    WindowRange(lo=5, hi=15, exact=True)
    >>> window_of(SnapshotWindow(), "point_end", 6, 7, members=[(0, 4), (2, 7)])
    WindowRange(lo=4, hi=7, exact=True)
    >>> window_of(CountWindow(2), None, 5, 6, members=[(1, 9), (3, 4), (5, 6)])
    WindowRange(lo=3, hi=6, exact=True)
    >>> window_of(HoppingWindow(10, 5), "keep", 12, 13)  # windows [5, 15) and [10, 20)
    WindowRange(lo=5, hi=20, exact=False)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ..events import add_time
from .index import Grid
from .session import session_bounds
from .spec import (
    CountWindow,
    HoppingWindow,
    OutputPolicy,
    SessionWindow,
    SnapshotWindow,
    WindowPolicy,
    WindowSpec,
    default_output,
)

__all__ = ["WindowRange", "default_output", "in_window", "spec_from_dict", "window_of"]


class WindowRange(NamedTuple):
    """The window ``[lo, hi)`` that made a row. ``exact=False`` when the row does not tell
    which window made it (``clip`` with overlapping hopping windows, ``keep``, members that
    hold no such window): ``[lo, hi)`` then covers every window that may have."""

    lo: int
    hi: int
    exact: bool = True


def window_of(spec: WindowSpec, output: str | None, start: int, end: int,
              members: Iterable[tuple[int, int]] = ()) -> WindowRange:
    """The window of ``spec`` that made an output row ``[start, end)`` under the output policy
    ``output`` (None: the spec's default). ``members`` are the ``(start, end)`` lifetimes of
    the input events (of the row's group) alive when the row was made; snapshot windows with
    ``point_end``, ``clip`` or ``keep`` output and count and session windows need them, the
    others ignore them. For ``keep`` the range assumes the UDO stamped its row inside its
    window (a row may start later; it never starts before its window)."""
    out = WindowPolicy(output=output).resolve(spec).output
    s, e = start, end
    if isinstance(spec, HoppingWindow):
        return _hopping(spec, out, s, e)
    if out.whole:
        return WindowRange(s, e)
    lives = list(members)
    if isinstance(spec, SnapshotWindow):
        points = {t for a, b in lives for t in (a, b)}
        if out.point:
            before = [t for t in points if t < e]
            return WindowRange(max(before), e) if before else WindowRange(s, e, False)
        lo = max((t for t in points if t <= s), default=None)
        hi = min((t for t in points if t > s), default=None)
        if lo is None or hi is None:
            return WindowRange(s, e, False)
        return WindowRange(lo, hi, out.cuts)
    if isinstance(spec, CountWindow):  # the row is the point at the window's last time
        by = 0 if spec.by == "start" else 1
        times = sorted({life[by] for life in lives if life[by] <= s})
        if len(times) < spec.n or times[-1] != s:
            return WindowRange(times[0] if times else s, s + 1, False)
        return WindowRange(times[-spec.n], s + 1)
    if isinstance(spec, SessionWindow):
        starts = sorted({a for a, _ in lives})
        for first, last in session_bounds(starts, spec.gap, spec.max_duration):
            hi = add_time(last, spec.gap)
            if spec.max_duration is not None:
                hi = min(hi, add_time(first, spec.max_duration))
            if out.point and hi == e:
                return WindowRange(first, hi)
            if out.stamps and first <= s < hi:
                return WindowRange(first, hi, out.cuts)
        return WindowRange(s, e, False)
    raise TypeError(f"window_of: expected a window spec of operators.windows, got {spec!r}")


def _hopping(spec: HoppingWindow, out: OutputPolicy, s: int, e: int) -> WindowRange:
    if out.whole:
        return WindowRange(s, e)
    if out.point:
        return WindowRange(e - spec.size, e)
    if out.compressed:  # the first window of the run: its owned interval starts at s
        return WindowRange(s + spec.hop - spec.size, s + spec.hop)
    g = Grid(spec.size, spec.hop, spec.alignment)
    last = g.last_starting_before(s + 1)  # a window holds the row's start...
    # ... and, clip: its end (the row is cut to the window); keep: none starts before its window
    first = g.first_ending_after(e - 1 if out.cuts else s)
    if first > last:
        return WindowRange(s, e, False)
    return WindowRange(g.start(first), g.end(last), out.cuts and first == last)


def in_window(spec: WindowSpec, window: tuple[int, int], start: int, end: int) -> bool:
    """Whether an input event ``[start, end)`` is a member of ``window`` (``[lo, hi)``, as
    :func:`window_of` gives it): its start (count ``by="end"``: its end) lies in it for count
    and session windows; its lifetime overlaps it for hopping and snapshot windows."""
    lo, hi = window
    if isinstance(spec, SessionWindow) or (isinstance(spec, CountWindow) and spec.by == "start"):
        return lo <= start < hi
    if isinstance(spec, CountWindow):
        return lo <= end < hi
    return start < hi and end > lo


def spec_from_dict(d: Mapping[str, Any]) -> WindowSpec:
    """The window spec a trace's ``plan.json`` describes: its ``kind`` and its fields
    (``{"kind": "tumbling", "size": 5, "hop": 5, "alignment": 0}``).

    >>> spec_from_dict({"kind": "count", "n": 3, "by": "end"})
    CountWindow(n=3, by='end')
    """
    kind = d.get("kind")
    if kind in ("hopping", "tumbling"):
        return HoppingWindow(d["size"], d.get("hop", d["size"]), d.get("alignment", 0))
    if kind == "snapshot":
        return SnapshotWindow()
    if kind == "count":
        return CountWindow(d.get("n", 1), d.get("by", "start"))
    if kind == "session":
        return SessionWindow(d["gap"], d.get("max_duration"))
    raise ValueError(f"spec_from_dict: {dict(d)!r} is not a window spec this cedar knows "
                     f"(kinds: hopping, tumbling, snapshot, count, session)")
