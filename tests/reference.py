"""From-scratch reference evaluators: each operator's definition applied literally to a CHT.

Every function takes CHT rows ``(start, end, payload)`` (see :func:`operators.cht.to_cht`) and
returns the CHT the operator must produce. Nothing here is incremental, nothing shares code
with ``operators/``: these are the specifications the engine is tested against.
"""

from __future__ import annotations

from typing import Any, Callable

from operators.events import MAX_TIME

Rows = list[tuple[int, int, Any]]


def _plus(t: int, d: int) -> int:
    return MAX_TIME if t == MAX_TIME else max(min(t + d, MAX_TIME), -MAX_TIME)


def where(rows: Rows, pred: Callable[[Any], bool]) -> Rows:
    return [(s, e, p) for s, e, p in rows if pred(p)]


def select(rows: Rows, fn: Callable[[Any], Any]) -> Rows:
    return [(s, e, fn(p)) for s, e, p in rows]


def shift(rows: Rows, delta: int) -> Rows:
    return [(_plus(s, delta), _plus(e, delta), p) for s, e, p in rows]


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
            e2 = _plus(e, s2 - s)
        elif isinstance(duration, int):
            e2 = s2 + duration
        else:
            e2 = s2 + duration(s, e)
            if e == MAX_TIME and e2 >= MAX_TIME // 2:
                e2 = MAX_TIME
            e2 = min(e2, MAX_TIME)
        if e2 > s2:
            out.append((s2, e2, p))
    return out
