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

import re
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from operators.events import MAX_TIME
from operators.windows.window_of import spec_from_dict, window_of

from .debug import Recording, Row
from .times import TIMESTAMPS, parse_tz, show_time

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
             limit: int = DEFAULT_LIMIT, label: str | None = None,
             tz: str | None = None) -> Any:
    """Draw the messages that entered and left ``step`` of ``trace`` (a path or a
    :class:`~topology.debug.Recording`), events overlapping ``[start, end)`` (default: all),
    at most ``limit`` per panel; save to ``out`` (``.svg``, ``.png``, ``.pdf``) when given.
    Each event is labelled by its payload's field ``label`` (``label="kwh"``), or by its
    payload shortened readably (``meter=m000 kwh=0.42``). The time axis reads as times
    (UTC, or ``tz``) when the trace's sources carried timestamps, else as integer ticks; never
    in offset notation. Returns the matplotlib ``Figure``."""
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
            _draw_event(ax, Rectangle, direction, i, ev, right, label)
        for k, t in enumerate(ctis):
            if left <= t <= right:
                line = ax.axvline(t, color="tab:red", linestyle="--", linewidth=0.8)
                line.set_gid(f"cti-{direction}-{k}")
        ax.grid(axis="x", alpha=0.2)
    if info.get("kind") in ("window", "group_apply"):
        _draw_windows(axes[0], info, panels["out"][0], panels["in"][0])
    axes[0].set_title(f"{step}  ({info.get('describe', info.get('kind', ''))})", fontsize=9)
    axes[-1].set_xlabel(_time_axis(axes[-1], rec.clock, lo, left, right, tz))
    fig.tight_layout()
    if out is not None:
        fig.savefig(out)
    return fig


def _draw_event(ax: Any, rect: Any, direction: str, i: int, ev: _Event, right: int,
                field: str | None = None) -> None:
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
    label = ax.text(ev.start, i - 0.38, payload_label(ev.payload, field), fontsize=6,
                    va="bottom")
    label.set_gid(f"label-{gid}")


def _draw_windows(ax: Any, info: dict[str, Any], outs: list[_Event], ins: list[_Event]
                  ) -> None:
    """Brackets over the input panel: the window of each output event
    (:func:`operators.windows.window_of.window_of`; a group's windows from all its inputs)."""
    window = info if info.get("kind") == "window" else info.get("sub", {})
    if window.get("kind") != "window":
        window = next((m for m in window.get("members", ()) if m.get("kind") == "window"), {})
    if "spec" not in window:
        return
    spec = spec_from_dict(window["spec"])
    lives = [(ev.start, ev.ends[-1] if ev.ends else ev.end) for ev in ins]
    seen: set[tuple[int, int]] = set()
    for ev in outs:
        s, e, _ = window_of(spec, window.get("output"), ev.start, ev.end, lives)
        if e >= MAX_TIME or (s, e) in seen:
            continue
        seen.add((s, e))
        k = len(seen) - 1
        y = -0.55 - 0.2 * (k % 2)
        bracket = ax.plot([s, s, e, e], [y + 0.15, y, y, y + 0.15], color="black",
                          linewidth=1.0)[0]
        bracket.set_gid(f"window-{k}")


def _short(text: str, width: int = 28) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


#: ``'name': value`` of a dict's repr: a quoted string, a call such as ``datetime.datetime(...)``
#: or anything up to the next comma
_FIELD = re.compile(r"""['"](\w+)['"]:\s*('[^']*'|"[^"]*"|[\w.]+\([^()]*\)|[^,{}]+)""")


def payload_label(payload: str, field: str | None = None, width: int = 28) -> str:
    """A payload's label in a picture: its field ``field`` when given (``kwh=0.42``), else
    its fields as ``name=value`` without braces and quotes, cut at a field's end when it is
    longer than ``width`` characters; a payload that is not a dict, shortened.

    >>> payload_label("{'meter': 'm000', 'kwh': 0.42, 'ts': 1767225600}", "kwh")
    'kwh=0.42'
    >>> payload_label("{'meter': 'm000', 'kwh': 0.42, 'ts': 1767225600}")
    'meter=m000 kwh=0.42 …'
    """
    fields = [(k, v.strip().strip("'\"")) for k, v in _FIELD.findall(payload)]
    if field is not None:
        chosen = [f"{k}={v}" for k, v in fields if k == field]
        return _short(chosen[0] if chosen else payload, width)
    if not fields:
        return _short(payload, width)
    text = ""
    for k, v in fields:
        part = f"{k}={v}"
        if len(text) + len(part) + 2 > width:
            return (text + " …").strip() if text else _short(part, width)
        text = f"{text} {part}".strip()
    return text


_S = 1_000_000
#: The steps of a time axis (µs): round seconds, minutes, hours and days, and below a second
#: 1, 2 and 5 times a power of ten.
_STEPS = [m * 10**e for e in range(6) for m in (1, 2, 5)] + [
    s * _S for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                     21600, 43200, 86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400,
                     91 * 86400, 365 * 86400)] + [10**e * 365 * 86400 * _S for e in range(1, 5)]


def _time_axis(ax: Any, clock: str | None, lo: int, left: int, right: int,
               tz: str | None) -> str:
    """Put readable labels on ``ax``'s time axis, never in offset notation: times (the
    time of day when the picture spans less than a day, with the date of its first time
    ``lo`` in the axis' title; in UTC or ``tz``) when the trace's sources carried
    timestamps, else integer ticks; returns the axis' title."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    if clock != TIMESTAMPS:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{round(x)}"))
        return "time (ticks)"
    step = next((s for s in _STEPS if (right - left) / s <= 7), _STEPS[-1])
    ax.xaxis.set_major_locator(FixedLocator(range(-(-left // step) * step, right + 1, step)))
    zone = parse_tz(tz)
    first = show_time(lo, clock, zone)
    one_day = right - left < 86_400_000_000

    def fmt(x: float, _: Any) -> str:
        text = show_time(round(x), clock, zone)
        if one_day:  # the time of day, to the millisecond at most, without its zone
            return re.sub(r"(Z|[+-]\d\d:\d\d)$", "", text[11:])[:12]
        return text[:16].replace("T", " ")

    ax.xaxis.set_major_formatter(FuncFormatter(fmt))
    name = "UTC" if zone is UTC else str(zone)
    return f"time ({name}, {first[:10]})" if one_day else f"time ({name})"
