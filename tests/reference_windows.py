"""From-scratch reference for the window operators (hopping, tumbling, snapshot; docs/windows.md).

The definition applied literally to the CHT of the input, sharing no code with
``operators/windows/hopping.py``: enumerate the windows, collect each window's members by overlap,
clip them, call the UDM non-incrementally (an incremental UDM gets ``initial_state``, one
``add`` of all members and ``window_result``), stamp the results by the output policy.

Which windows. A physical stream is a speculative history: a hopping window over an event
whose end is ∞ is produced only once time reaches it. The output is therefore defined
relative to the input's final **frontier** ``max(last CTI, largest start of any insert + 1)``
(the paper's watermark, section V-B; ``tests.kit.physical_streams`` ends with a CTI past every
finite endpoint): a hopping window is produced when it overlaps an event of the CHT *and*
starts before the frontier — for finite events that is every window they overlap.
Snapshot windows (between consecutive distinct endpoints, ∞ included) are finite in number and
all produced. ``compressed`` gives window ``W`` the interval ``[W.end − hop, W.end)`` and one
row to each maximal run of consecutive windows with the same member events; the run of the
windows past every finite endpoint (they hold exactly the open events) ends at ∞.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from operators.cht import to_cht
from operators.events import MAX_TIME, Cti, Insert
from operators.udm import (
    UDM,
    Aggregate,
    IncrementalAggregate,
    Operator,
    TimeSensitiveAggregate,
    TimeSensitiveOperator,
    Window,
)

Rows = list[tuple[int, int, Any]]


def frontier(stream: Sequence[Any]) -> int:
    """``max(last CTI, largest insert start + 1)`` of a physical stream."""
    t = -(2**63)
    for m in stream:
        if type(m) is Cti:
            t = max(t, m.time)
        elif type(m) is Insert:
            t = max(t, m.start + 1)
    return t


def _overlaps(row: tuple[int, int, Any], ws: int, we: int) -> bool:
    return row[0] < we and row[1] > ws


def hopping_windows(rows: Rows, size: int, hop: int, alignment: int,
                    until: int) -> list[int]:
    """The numbers n of the windows ``[a + n·hop, a + n·hop + size)`` that overlap a row and
    start before ``until``."""
    found: set[int] = set()
    for s, e, _ in rows:
        n = (s - alignment - size) // hop - 1  # certainly before the first overlapping window
        while True:
            ws = alignment + n * hop
            if ws >= e or ws >= until:
                break
            if ws + size > s:
                found.add(n)
            n += 1
    return sorted(found)


def snapshot_windows(rows: Rows) -> list[tuple[int, int]]:
    points = sorted({t for s, e, _ in rows for t in (s, e)})
    return [(a, b) for a, b in itertools.pairwise(points)
            if any(_overlaps(r, a, b) for r in rows)]


def _view(row: tuple[int, int, Any], ws: int, we: int, clip: str) -> tuple[int, int, Any]:
    s, e, p = row
    if clip in ("left", "full"):
        s = max(s, ws)
    if clip in ("right", "full"):
        e = min(e, we)
    return (s, e, p)


def results(udm: Any, kind: str, members: Rows, ws: int, we: int, clip: str) -> list[Any]:
    """What the UDM returns for one window: a list of payloads, or of ``(start, end,
    payload)`` for a time-sensitive UDO."""
    members = sorted(members, key=lambda r: (r[0], r[1]))
    window = Window(ws, we)
    values = [p for _, _, p in members]
    views = [_view(r, ws, we, clip) for r in members]
    if not isinstance(udm, UDM):  # a plain function
        return list(udm(values)) if kind == "apply" else [udm(values)]
    if isinstance(udm, IncrementalAggregate):
        state = udm.initial_state()
        state = udm.add(state, views if udm.time_sensitive else values)
        return [udm.window_result(state, window)]
    if isinstance(udm, TimeSensitiveOperator):
        return list(udm.compute(views, window))
    if isinstance(udm, TimeSensitiveAggregate):
        return [udm.compute(views, window)]
    if isinstance(udm, Operator):
        return list(udm.compute(values))
    assert isinstance(udm, Aggregate)
    return [udm.compute(values)]


def stamp(res: list[Any], ws: int, we: int, output: str, ts_operator: bool) -> Rows:
    """The output events of one window under an output policy."""
    out: Rows = []
    for r in res:
        if ts_operator and output == "keep":
            s, e, p = r
            if s < ws:
                raise ValueError(f"keep: event starts at {s} before the window start {ws}")
            out.append((s, e, p))
        elif ts_operator and output == "clip":
            s, e, p = r
            if max(s, ws) < min(e, we):
                out.append((max(s, ws), min(e, we), p))
        else:
            p = r[2] if ts_operator else r
            out.append((we - 1, we, p) if output == "point_end" else (ws, we, p))
    return out


def _compressed(rows: Rows, udm: Any, kind: str, size: int, hop: int, alignment: int) -> Rows:
    finite = [t for s, e, _ in rows for t in ((s, e) if e != MAX_TIME else (s,))]
    if not finite:
        return []
    # past this bound every window holds exactly the open events
    bound = max(finite) + size + 2 * hop
    ns = hopping_windows(rows, size, hop, alignment, bound)
    runs: list[tuple[int, int, frozenset[int]]] = []  # (first n, last n, members)
    for n in ns:
        ws = alignment + n * hop
        members = frozenset(i for i, r in enumerate(rows) if _overlaps(r, ws, ws + size))
        if runs and runs[-1][1] == n - 1 and runs[-1][2] == members:
            runs[-1] = (runs[-1][0], n, members)
        else:
            runs.append((n, n, members))
    out: Rows = []
    for first, last, members in runs:
        start = alignment + first * hop + size - hop
        end = alignment + last * hop + size
        if last == ns[-1] and all(rows[i][1] == MAX_TIME for i in members):
            end = MAX_TIME
        ws = alignment + first * hop
        for p in results(udm, kind, [rows[i] for i in members], ws, ws + size, "full"):
            out.append((start, end, p))
    return out


def window(stream: Sequence[Any], spec: Any, udm: Any, kind: str = "aggregate",
           clip: str = "full", output: str = "window") -> Rows:
    """The CHT a window operator must produce for the physical ``stream``; ``spec`` is an
    ``operators.windows`` spec (only its fields are read)."""
    rows = to_cht(stream)
    ts_operator = isinstance(udm, TimeSensitiveOperator)
    if hasattr(spec, "hop"):
        if output == "compressed":
            return _compressed(rows, udm, kind, spec.size, spec.hop, spec.alignment)
        wins: Iterable[tuple[int, int]] = [
            (spec.alignment + n * spec.hop, spec.alignment + n * spec.hop + spec.size)
            for n in hopping_windows(rows, spec.size, spec.hop, spec.alignment,
                                     frontier(stream))]
    else:
        wins = snapshot_windows(rows)
    out: Rows = []
    for ws, we in wins:
        members = [r for r in rows if _overlaps(r, ws, we)]
        out.extend(stamp(results(udm, kind, members, ws, we, clip), ws, we, output,
                         ts_operator))
    return out
