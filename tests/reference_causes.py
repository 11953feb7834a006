"""From-scratch reference of root causes: each operator's definition applied to a CHT whose
rows carry their causes.

A row is ``(start, end, payload, causes)``; ``causes`` is the frozenset of the source events
(the reprs of their ids, as a trace writes them) the row comes from. A source's row is caused
by itself; every operator says, by its definition, which input rows make each output row, and
the output's causes are the union of theirs: a span operator's row keeps its input's, a
window's row has the members of its window (the input rows overlapping it, of its group), a
join's row the pair whose intersection it is, an anti-join's row the left row it is a part
of, a union's row its input's. Through a chain that is the transitive closure down to the
sources. Nothing here is incremental or shares code with ``operators/`` or the debugger;
the windows are enumerated as in :mod:`tests.reference_windows` and
:mod:`tests.reference_count`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from itertools import pairwise
from typing import Any

from operators.events import Insert, Message, Retract
from tests.reference_joins import subtract
from tests.reference_windows import hopping_windows, snapshot_windows

Row = tuple[int, int, Any, frozenset[str]]
Rows = list[Row]


def source(stream: Sequence[Message]) -> Rows:
    """The final CHT of a physical stream, each row caused by its own event."""
    live: dict[Any, list[Any]] = {}
    for m in stream:
        if type(m) is Insert:
            live[m.id] = [m.start, m.end, m.payload]
        elif type(m) is Retract:
            if m.new_end == m.start:
                del live[m.id]
            else:
                live[m.id][1] = m.new_end
    return [(s, e, p, frozenset({repr(i)})) for i, (s, e, p) in live.items()]


def where(rows: Rows, pred: Callable[[Any], bool]) -> Rows:
    return [r for r in rows if pred(r[2])]


def select(rows: Rows, fn: Callable[[Any], Any]) -> Rows:
    return [(s, e, fn(p), c) for s, e, p, c in rows]


def clip_duration(rows: Rows, limit: int) -> Rows:
    return [(s, min(e, s + limit), p, c) for s, e, p, c in rows]


def _window_row(members: Rows, ws: int, we: int, output: str) -> Row:
    """A Count over ``members`` of window ``[ws, we)``, stamped by ``output``."""
    causes = frozenset().union(*(c for *_, c in members))
    s = we - 1 if output == "point_end" else ws
    return (s, we, len(members), causes)


def hopping_count(rows: Rows, size: int, hop: int, output: str = "window") -> Rows:
    """Count per hopping window (finite rows: every window a row overlaps)."""
    plain = [(s, e, p) for s, e, p, _ in rows]
    out = []
    for n in hopping_windows(plain, size, hop, 0, until=2**62):
        ws, we = n * hop, n * hop + size
        out.append(_window_row([r for r in rows if r[0] < we and r[1] > ws], ws, we, output))
    return out


def snapshot_count(rows: Rows, output: str = "window") -> Rows:
    """Count per snapshot window (between consecutive distinct endpoints)."""
    plain = [(s, e, p) for s, e, p, _ in rows]
    return [_window_row([r for r in rows if r[0] < we and r[1] > ws], ws, we, output)
            for ws, we in snapshot_windows(plain)]


def count_window_count(rows: Rows, n: int) -> Rows:
    """Count per count window: the windows ``[t_i, t_{i+n-1} + 1)`` over the distinct start
    times, members the rows starting in them, output as the point at the window's end."""
    times = sorted({s for s, *_ in rows})
    out = []
    for i in range(len(times) - n + 1):
        ws, we = times[i], times[i + n - 1] + 1
        out.append(_window_row([r for r in rows if ws <= r[0] < we], ws, we, "point_end"))
    return out


def join(left: Rows, right: Rows, key: Callable[[Any], Any]) -> Rows:
    """Every pair with equal keys and overlapping lifetimes, over the intersection."""
    return [(max(ls, rs), min(le, re), (lp, rp), lc | rc)
            for ls, le, lp, lc in left for rs, re, rp, rc in right
            if key(lp) == key(rp) and max(ls, rs) < min(le, re)]


def anti_join(left: Rows, right: Rows, key: Callable[[Any], Any]) -> Rows:
    """The parts of each left row where no right row of its key is alive, caused by it."""
    out = []
    for ls, le, lp, lc in left:
        holes = [(rs, re) for rs, re, rp, _ in right if key(rp) == key(lp)]
        out.extend((s, e, lp, lc) for s, e in subtract(ls, le, holes))
    return out


def left_join(left: Rows, right: Rows, key: Callable[[Any], Any]) -> Rows:
    return join(left, right, key) + [(s, e, (p, None), c)
                                     for s, e, p, c in anti_join(left, right, key)]


def union(*inputs: Rows) -> Rows:
    return [r for rows in inputs for r in rows]


def group_apply(rows: Rows, key: Callable[[Any], Hashable],
                sub: Callable[[Rows], Rows]) -> Rows:
    groups: dict[Hashable, Rows] = {}
    for r in rows:
        groups.setdefault(key(r[2]), []).append(r)
    return [(s, e, (k, p), c) for k, part in groups.items() for s, e, p, c in sub(part)]


Caused = Sequence[tuple[int, int, str, frozenset[str]]]


def assert_same_causes(got: Caused, want: Caused) -> None:
    """Assert that at every instant the same ``(payload text, causes)`` are alive in ``got``
    and ``want`` (rows ``(start, end, payload text, causes)``), however their events are cut
    into pieces; the error names the first instant where they differ."""
    points = sorted({t for rows in (got, want) for s, e, _, _ in rows for t in (s, e)})
    for a, b in pairwise(points):
        have = Counter((p, c) for s, e, p, c in got if s <= a and b <= e)
        need = Counter((p, c) for s, e, p, c in want if s <= a and b <= e)
        if have != need:
            raise AssertionError(
                f"causes differ in [{a}, {b}): the debugger has "
                f"{sorted((p, sorted(c)) for p, c in (have - need).elements())} "
                f"where the reference has "
                f"{sorted((p, sorted(c)) for p, c in (need - have).elements())}")
