"""From-scratch reference for count windows (docs/windows.md): the definition applied to a CHT.

Given the CHT of the input (the events as of the final state), take the distinct start times
``t0 < t1 < ...`` (``by="end"``: the distinct end times of the events whose end is finite: an
event still open to ∞ has no end time and belongs to no by-end window), form every window
``W_i = [t_i, t_{i+n-1} + 1)``, give it the events whose start (end) lies in it, clip their
lifetimes fully to ``W_i``, call the UDM once from scratch and stamp each result as the point
``[W_i.end - 1, W_i.end)``.

The result depends on the final CHT only, never on CTIs: every window is produced speculatively
as soon as its ``n`` distinct times exist, and windows the operator frees on a CTI are final.
Nothing here is incremental or shares code with :mod:`operators.windows.count`.
"""

from __future__ import annotations

from typing import Any

from operators.events import MAX_TIME
from operators.udm import Window, resolve

Rows = list[tuple[int, int, Any]]


def count_windows(rows: Rows, n: int, by: str = "start") -> list[tuple[Window, Rows]]:
    """Every count window with its member events (unclipped), in time order."""
    if by == "start":
        placed = [(s, (s, e, p)) for s, e, p in rows]
    else:
        placed = [(e, (s, e, p)) for s, e, p in rows if e != MAX_TIME]
    times = sorted({t for t, _ in placed})
    out = []
    for i in range(len(times) - n + 1):
        first, last = times[i], times[i + n - 1]
        members = [row for t, row in placed if first <= t <= last]
        out.append((Window(first, last + 1), members))
    return out


def count_window(rows: Rows, n: int, by: str, udm: Any, kind: str = "aggregate") -> Rows:
    """The CHT that ``count_window(n, by)`` followed by ``.aggregate(udm)`` (``kind=
    "aggregate"``) or ``.apply(udm)`` (``kind="apply"``) must produce from the CHT ``rows``."""
    udm = resolve(udm)
    out: Rows = []
    for window, members in count_windows(rows, n, by):
        w_start, w_end = window
        clipped = [(max(s, w_start), min(e, w_end), p) for s, e, p in members]
        payloads = [p for _, _, p in members]
        if udm.incremental:
            state = udm.initial_state()
            state = udm.add(state, clipped if udm.time_sensitive else payloads)
            result = udm.window_result(state, window)
        elif udm.time_sensitive:
            result = udm.compute(clipped, window)
        else:
            result = udm.compute(payloads)
        if kind == "aggregate":
            results = [result]
        elif udm.time_sensitive and udm.is_operator:
            results = [p for _, _, p in result]  # timestamps overwritten by point_end
        else:
            results = list(result)
        out.extend((w_end - 1, w_end, r) for r in results)
    return out
