"""From-scratch reference evaluators: each operator's definition applied literally to a CHT.

Every function takes CHT rows ``(start, end, payload)`` (see :func:`operators.cht.to_cht`) and
returns the CHT the operator must produce. Nothing here is incremental, nothing shares code
with ``operators/``: these are the specifications the engine is tested against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from operators.events import MAX_TIME, MIN_TIME

Rows = list[tuple[int, int, Any]]


#: The last finite instant of the time axis (MAX_TIME is ∞).
LAST = MAX_TIME - 1


def _on_axis(s: int, e: int) -> tuple[int, int] | None:
    """``(s, e)``, or None for an event whose start is off the time axis: it has no output
    (the operator dead-letters it). Callers cut a finite end past the axis to ``LAST``."""
    return (s, e) if MIN_TIME <= s < LAST else None


def where(rows: Rows, pred: Callable[[Any], bool]) -> Rows:
    return [(s, e, p) for s, e, p in rows if pred(p)]


def select(rows: Rows, fn: Callable[[Any], Any]) -> Rows:
    return [(s, e, fn(p)) for s, e, p in rows]


def shift(rows: Rows, delta: int) -> Rows:
    out = []
    for s, e, p in rows:
        cut = _on_axis(s + delta, e if e == MAX_TIME else min(e + delta, LAST))
        if cut is not None:
            out.append((*cut, p))
    return out


def to_points(rows: Rows) -> Rows:
    return [(s, s + 1, p) for s, e, p in rows]


def clip_duration(rows: Rows, limit: int) -> Rows:
    return [(s, min(e, s + limit), p) for s, e, p in rows]


def alter_lifetime(rows: Rows, start: Callable[[int], int] | None = None,
                   duration: Any = None) -> Rows:
    out = []
    for s, e, p in rows:
        s2 = start(s) if start else s
        if duration is None:
            e2 = e if e == MAX_TIME else min(e + s2 - s, LAST)
        elif isinstance(duration, int):
            e2 = min(s2 + duration, LAST)
        else:
            e2 = s2 + duration(s, e)
            e2 = MAX_TIME if e == MAX_TIME and e2 >= MAX_TIME // 2 else min(e2, LAST)
        cut = _on_axis(s2, e2)
        if cut is not None and cut[1] > cut[0]:
            out.append((*cut, p))
    return out
