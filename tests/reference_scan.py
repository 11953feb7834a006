"""From-scratch references for ``scan`` and ``distinct`` (docs/operators.md): each definition
applied literally to a CHT. Nothing here is incremental or shares code with ``operators/``.

* ``scan``: the rows that start before the final CTI (the ones a CTI made final), sorted by
  ``(start, tie(payload), repr(payload))``, stepped one by one from ``initial``; each output is
  a point at the row's start.
* ``distinct``: the rows grouped by payload (or key), each group's lifetimes united into
  maximal intervals (touching ones merged); an interval carries the payload of its
  earliest-starting row, equal starts broken by the least ``repr``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from operators.payloads import freeze

Rows = list[tuple[int, int, Any]]


def scan(rows: Rows, final_cti: int, step: Callable[[Any, Any], Any], initial: Any,
         tie: Callable[[Any], Any] | None = None) -> Rows:
    order = tie or repr
    final = sorted((r for r in rows if r[0] < final_cti),
                   key=lambda r: (r[0], order(r[2]), repr(r[2])))
    state = copy.deepcopy(initial)
    out: Rows = []
    for s, _, p in final:
        state, outputs = step(state, p)
        out.extend((s, s + 1, o) for o in outputs)
    return out


def distinct(rows: Rows, key: Callable[[Any], Any] | None = None) -> Rows:
    groups: dict[Any, list[tuple[int, int, Any]]] = {}
    for s, e, p in rows:
        groups.setdefault(freeze(p if key is None else key(p)), []).append((s, e, p))
    out: Rows = []
    for members in groups.values():
        members.sort(key=lambda r: (r[0], repr(r[2])))
        cur: list[Any] | None = None
        for s, e, p in members:
            if cur is not None and s <= cur[1]:
                cur[1] = max(cur[1], e)
            else:
                if cur is not None:
                    out.append(tuple(cur))  # type: ignore[arg-type]
                cur = [s, e, p]
        if cur is not None:
            out.append(tuple(cur))  # type: ignore[arg-type]
    return sorted(out, key=lambda r: (r[0], r[1], repr(r[2])))
