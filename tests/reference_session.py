"""From-scratch reference for session windows (docs/windows.md): the definition applied to a CHT.

Given the CHT of the input (the events as of the final state), order the distinct start times;
walk them from the left, opening a session at a start and keeping each next start in it while
it is less than the previous start + ``gap`` and (with ``max_duration``) less than the
session's first start + ``max_duration``. A session's window is ``[first start, min(last start
+ gap, first start + max_duration))``; its members are the events whose start lies in it. The
UDM is called once from scratch over the members (clipped as ``clip`` says), and each result
stamped as ``output`` says.

The result depends on the final CHT only: every session is produced speculatively as soon as
it has an event, and those a CTI frees are final. Nothing here is incremental or shares code
with :mod:`operators.windows.session`.
"""

from __future__ import annotations

from typing import Any

from operators.events import MAX_TIME
from operators.udm import Window, resolve

Rows = list[tuple[int, int, Any]]


def _plus(t: int, d: int) -> int:
    return min(t + d, MAX_TIME)


def sessions(rows: Rows, gap: int, max_duration: int | None = None
             ) -> list[tuple[Window, Rows]]:
    """Every session window with its member events (unclipped), in time order."""
    starts = sorted({s for s, _, _ in rows})
    runs: list[list[int]] = []
    for t in starts:
        if runs:
            run = runs[-1]
            if t < _plus(run[-1], gap) and (max_duration is None
                                            or t < _plus(run[0], max_duration)):
                run.append(t)
                continue
        runs.append([t])
    out = []
    for run in runs:
        end = _plus(run[-1], gap)
        if max_duration is not None:
            end = min(end, _plus(run[0], max_duration))
        members = [r for r in rows if run[0] <= r[0] <= run[-1]]
        out.append((Window(run[0], end), members))
    return out


def session_window(rows: Rows, gap: int, udm: Any, kind: str = "aggregate",
                   max_duration: int | None = None, clip: str = "full",
                   output: str = "window") -> Rows:
    """The CHT that ``session_window(gap, max_duration, clip=, output=)`` followed by
    ``.aggregate(udm)`` (``kind="aggregate"``) or ``.apply(udm)`` must produce from ``rows``."""
    udm = resolve(udm)
    cut_right = clip in ("right", "full")
    out: Rows = []
    for window, members in sessions(rows, gap, max_duration):
        w_start, w_end = window
        members = sorted(members, key=lambda r: (r[0], r[1]))
        seen = [(s, min(e, w_end) if cut_right else e, p) for s, e, p in members]
        payloads = [p for _, _, p in members]
        if udm.incremental:
            state = udm.initial_state()
            state = udm.add(state, seen if udm.time_sensitive else payloads)
            result = udm.window_result(state, window)
        elif udm.time_sensitive:
            result = udm.compute(seen, window)
        else:
            result = udm.compute(payloads)
        results = [result] if kind == "aggregate" else list(result)
        stamped = kind == "apply" and udm.time_sensitive and udm.is_operator
        for r in results:
            if stamped and output == "keep":
                out.append(r)
            elif stamped and output == "clip":
                s, e, p = r
                if max(s, w_start) < min(e, w_end):
                    out.append((max(s, w_start), min(e, w_end), p))
            else:
                p = r[2] if stamped else r
                out.append((w_end - 1, w_end, p) if output == "point_end"
                           else (w_start, w_end, p))
    return out
