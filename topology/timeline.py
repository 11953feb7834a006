"""Timeline pictures of a trace: what entered and left one step, drawn on the time axis.

One panel per direction (the step's input above, its output below, sharing the time axis),
one lane per event, in the style of the temporal-database textbooks::

    in    a  ├──────────┤                  interval [start, end)
          b       │                        point: a tick
          c          ├──────────────────▶  open to ∞: runs to the right edge
          d  ├─────┤╳╳╳╳╳                  the part a retraction removed, hatched and struck
    out   w  [=========]  [=========]      windows as brackets (a window step)
          ┆ CTI (dashed vertical line)

Needs matplotlib (``pip install cedar[viz]``). Every drawn element carries a ``gid`` (an
``id`` in the SVG): ``event-<panel>-<n>`` (``<panel>`` is ``in`` or ``out``), ``point-...``
for point ticks, ``open-...`` for the arrow of an open event, ``retracted-...`` and
``strike-...`` for retracted parts, ``cti-<panel>-<n>``, ``window-<n>``, ``label-...`` and
``axes-<panel>`` for the panel's frame.

    >>> import tempfile
    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> path = tempfile.mkdtemp()
    >>> _ = Stream.from_events([Insert("a", 0, 4, 1), Cti(5)]).shift(1).collect(
    ...     runtime="inline", trace=path)
    >>> fig = timeline(path, "shift", out=path + "/shift.svg")
    >>> len(fig.axes)
    2
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from operators.events import MAX_TIME

from .debug import Recording, Row, window_range

#: Lanes drawn per panel at most (the first events the step saw).
DEFAULT_LIMIT = 40


@dataclass
class _Event:
    """One event of a panel: its lifetime as inserted and the retractions applied to it."""

    key: str
    port: int
    id: str
    start: int
    end: int
    payload: str
    ends: list[int] = field(default_factory=list)  # the end after each retraction


def _events(rows: list[Row], direction: str, limit: int) -> tuple[list[_Event], list[int]]:
    events: dict[tuple[int, str], _Event] = {}
    ctis: list[int] = []
    for r in rows:
        if r["direction"] != direction:
            continue
        if r["kind"] == "cti":
            ctis.append(r["start"])
        elif r["kind"] == "insert" and len(events) < limit:
            k = (r["port"], r["id"])
            events[k] = _Event(f"{r['port']}:{r['id']}", r["port"], r["id"], r["start"],
                               r["end"], r["payload_repr"] or "")
        elif r["kind"] == "retract":
            ev = events.get((r["port"], r["id"]))
            if ev is not None:
                ev.ends.append(r["new_end"])
    return list(events.values()), ctis


def timeline(trace: str | Recording, step: str, out: str | None = None,
             start: int | None = None, end: int | None = None,
             limit: int = DEFAULT_LIMIT) -> Any:
    """Draw the messages that entered and left ``step`` of ``trace`` (a path or a
    :class:`~topology.debug.Recording`), events overlapping ``[start, end)`` (default: all),
    at most ``limit`` per panel; save to ``out`` (``.svg``, ``.png``, ``.pdf``) when given.
    Returns the matplotlib ``Figure``."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
    except ImportError:
        raise ImportError("timeline pictures need matplotlib: pip install 'cedar[viz]'"
                          ) from None
    rec = trace if isinstance(trace, Recording) else Recording.open(trace)
    step = rec.step_of(step)
    rows = rec.events(step=step, start=start, end=end)
    panels = {d: _events(rows, d, limit) for d in ("in", "out")}
    times = [t for evs, ctis in panels.values() for t in ctis if t < MAX_TIME]
    for evs, _ in panels.values():
        for ev in evs:
            times.append(ev.start)
            times.extend(t for t in [ev.end, *ev.ends] if t < MAX_TIME)
    lo, hi = (min(times), max(times)) if times else (0, 1)
    pad = max(1, (hi - lo) // 20)
    left, right = lo - pad, hi + 2 * pad
    heights = [max(1, len(evs)) + 1 for evs, _ in panels.values()]
    fig = Figure(figsize=(10, 0.35 * sum(heights) + 1.5))
    axes = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": heights})
    info = rec.steps.get(step, {})
    for ax, (direction, (evs, ctis)) in zip(axes, panels.items()):
        ax.patch.set_gid(f"axes-{direction}")
        ax.set_xlim(left, right)
        ax.set_ylim(len(evs) + 0.5, -1.0)
        ax.set_yticks(range(len(evs)), [ev.id if len(ev.id) <= 16 else ev.id[:13] + "..."
                                        for ev in evs], fontsize=7)
        ax.set_ylabel(f"{direction}put" if direction == "out" else "input")
        for i, ev in enumerate(evs):
            _draw_event(ax, Rectangle, direction, i, ev, right)
        for k, t in enumerate(ctis):
            if left <= t <= right:
                line = ax.axvline(t, color="tab:red", linestyle="--", linewidth=0.8)
                line.set_gid(f"cti-{direction}-{k}")
        ax.grid(axis="x", alpha=0.2)
    if info.get("kind") in ("window", "group_apply"):
        _draw_windows(axes[0], info, panels["out"][0], panels["in"][0])
    axes[0].set_title(f"{step}  ({info.get('describe', info.get('kind', ''))})", fontsize=9)
    axes[-1].set_xlabel("time (ticks)")
    fig.tight_layout()
    if out is not None:
        fig.savefig(out)
    return fig


def _draw_event(ax: Any, rect: Any, direction: str, i: int, ev: _Event, right: int) -> None:
    gid = f"{direction}-{i}"
    final = ev.ends[-1] if ev.ends else ev.end
    reach = max([ev.end, *ev.ends])  # the furthest end it ever had
    color = "tab:blue" if direction == "in" else "tab:green"
    if ev.end == ev.start + 1 and not ev.ends:
        tick = ax.plot([ev.start, ev.start], [i - 0.35, i + 0.35], color=color,
                       linewidth=2.5, solid_capstyle="butt")[0]
        tick.set_gid(f"point-{gid}")
        bar = rect((ev.start, i - 0.1), 1, 0.2, color=color)
    else:
        shown_end = min(final, right) if final > ev.start else ev.start
        bar = rect((ev.start, i - 0.3), max(0, shown_end - ev.start), 0.6, color=color,
                   alpha=0.8)
    bar.set_gid(f"event-{gid}")
    ax.add_patch(bar)
    if final >= MAX_TIME:
        arrow = ax.plot([right], [i], marker=">", color=color, markersize=7, clip_on=False)[0]
        arrow.set_gid(f"open-{gid}")
    if final < reach:  # retracted part: hatched and struck through
        e = min(reach, right)
        part = rect((final, i - 0.3), e - final, 0.6, facecolor="none", edgecolor="tab:red",
                    hatch="///", linewidth=0.8)
        part.set_gid(f"retracted-{gid}")
        ax.add_patch(part)
        strike = ax.plot([final, e], [i, i], color="tab:red", linewidth=1.2)[0]
        strike.set_gid(f"strike-{gid}")
    label = ax.text(ev.start, i - 0.38, _short(ev.payload), fontsize=6, va="bottom")
    label.set_gid(f"label-{gid}")


def _draw_windows(ax: Any, info: dict[str, Any], outs: list[_Event], ins: list[_Event]
                  ) -> None:
    """Brackets over the input panel: the window of each output event
    (:func:`topology.debug.window_range`; a group's snapshot windows from all its inputs)."""
    window = info if info.get("kind") == "window" else info.get("sub", {})
    if window.get("kind") != "window":
        window = next((m for m in window.get("members", ()) if m.get("kind") == "window"), {})
    count = window.get("spec", {}).get("kind") == "count"  # drawn as its output point
    evs = [{"start": ev.start, "end": ev.ends[-1] if ev.ends else ev.end} for ev in ins]
    seen: set[tuple[int, int]] = set()
    for ev in outs:
        s, e = (ev.start, ev.end) if count else window_range(window, ev.start, ev.end, evs)
        if e >= MAX_TIME or (s, e) in seen:
            continue
        seen.add((s, e))
        k = len(seen) - 1
        y = -0.55 - 0.2 * (k % 2)
        bracket = ax.plot([s, s, e, e], [y + 0.15, y, y, y + 0.15], color="black",
                          linewidth=1.0)[0]
        bracket.set_gid(f"window-{k}")


def _short(text: str, width: int = 28) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."
