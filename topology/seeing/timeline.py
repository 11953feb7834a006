"""Timeline pictures of a trace: what entered and left one step, drawn on the time axis.

One panel per direction (the step's input above, its output below, sharing the time axis;
a step with several inputs, a join or a union, has one input panel per input, up to
:data:`MAX_INPUT_PANELS`, so that an idle reference input shows beside the live one), in the
style of the temporal-database textbooks::

    in    a  ├──────────┤                  interval [start, end)
          b       │                        point: a tick
          c          ├──────────────────▶  open to ∞: runs to the right edge
          d  ├─────┤╳╳╳╳╳                  the part a retraction removed, hatched and struck
       ░░░░░░░░░░░▒▒▒▒▒▒▒▒▒▒░░░░░░░░░      windows as shaded bands, with brackets above
    out   w  [=========]  [=========]
          ┆ CTI (dashed vertical line)

A panel is laid out by how many events it holds, so that a picture's height is bounded
whatever the count (at most ``limit`` rows a panel):

* **events**: one row per event, when the panel holds at most ``limit`` (or ``lanes=False``:
  the first ``limit``);
* **lanes**: one lane per key, when the step keys its events (``group_apply``, a keyed
  window, a join: the trace records the key) or ``lanes="FIELD"`` names a payload field;
  a key's events share its lane (overlapping ones on up to four rows), labels that would
  overlap are left out; past :data:`MAX_DRAWN` events each lane is a density strip;
* **density**: more than ``limit`` events without keys: how many events start in each slot
  of time (and, in red, how many were retracted), in round slots (``events per 5 s``).

The time axis reads as times (UTC, or ``tz``) with durations in the titles when the trace's
sources carried timestamps (the plan's clock, :mod:`topology.building.times`), else as integer
ticks; never in offset notation. Events are labelled by a chosen payload field (``label="kwh"``) or
by their payload shortened readably (``meter=m000 kwh=0.42 …``, ``0.451`` for a keyed
output ``('m000', 0.451)`` in its key's lane).

Needs matplotlib (``pip install cedar[viz]``). Every drawn element carries a ``gid`` (an
``id`` in the SVG): ``event-<panel>-<n>`` (``<panel>`` is ``in`` or ``out``, ``in0``,
``in1``, ... for the inputs of a multi-input step; ``<n>`` the
event's place in arrival order), ``point-...`` for point ticks, ``open-...`` for the arrow
of an open event, ``retracted-...`` and ``strike-...`` for retracted parts, ``label-...``,
``cti-<panel>-<n>``, ``lane-<panel>-<k>`` for a lane's background, ``density-<panel>`` (and
``density-retracted-<panel>``) for a density, ``more-<panel>`` for the note of what was left
out, ``band-<k>`` and ``window-<k>`` for a window's band and bracket, ``axes-<panel>`` for the
panel's frame.

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

import ast
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from operators.events import MAX_TIME
from operators.windows.window_of import spec_from_dict, window_of
from topology.building.times import TIMESTAMPS, parse_tz, show_duration, show_time
from topology.seeing.debug import Recording, Row

#: Rows per panel at most: events one per row, or lanes.
DEFAULT_LIMIT = 40
#: Events drawn one by one in a panel of lanes at most (each is a few matplotlib artists);
#: beyond, each lane is a density strip.
MAX_DRAWN = 400
#: Rows of one key's overlapping events at most (more overlap on the last rows).
MAX_DEPTH = 4
#: The height of a density panel, in rows.
DENSITY_ROWS = 8
#: Slots of a density, about.
DENSITY_SLOTS = 100
#: Windows drawn as bands at most.
MAX_WINDOWS = 100
#: CTI lines drawn per panel at most (the others are too close to tell apart).
MAX_CTIS = 40
#: A row's height and the picture's height at most, in inches.
ROW_INCHES = 0.3
MAX_INCHES = 14.0
#: Input panels at most: a step with more inputs (a wide union) draws them in one panel.
MAX_INPUT_PANELS = 4
#: The two shades of window bands, alternating.
BAND_COLORS = ("tab:orange", "tab:purple")


@dataclass(slots=True)
class _Event:
    """One event of a panel: its lifetime as inserted and the retractions applied to it."""

    key: str
    port: int
    id: str
    start: int
    end: int
    payload: str
    ends: list[int] = field(default_factory=list)  # the end after each retraction
    lane: str | None = None  # its lane's name (the recorded key, or the lanes= field's value)
    row: int = 0  # the row it is drawn on

    @property
    def final(self) -> int:
        return self.ends[-1] if self.ends else self.end

    @property
    def reach(self) -> int:
        """The furthest end it ever had."""
        return max([self.end, *self.ends])


@dataclass
class _Panel:
    """One direction's events and how they are laid out (:func:`_layout`)."""

    direction: str  # "in" or "out"; "in0", "in1", ... for each input of a multi-input step
    events: list[_Event]
    ctis: list[int]
    port: int | None = None  # the input port of a multi-input step's panel
    feeder: str = ""  # the step that feeds that port
    mode: str = "events"  # "events", "lanes" or "density"
    shown: list[tuple[int, _Event]] = field(default_factory=list)  # (n, event) drawn one by one
    lanes: list[tuple[str, int, int]] = field(default_factory=list)  # (name, first row, rows)
    rows: int = 1
    dense: bool = False  # lanes drawn as density strips
    hidden: str = ""  # what was left out, for the note

    @property
    def lane_of(self) -> dict[str, tuple[int, int]]:
        return {name: (first, rows) for name, first, rows in self.lanes}


_KEYS: dict[str | None, str | None] = {}


def _key_text(key: str | None) -> str | None:
    """A recorded key (its repr) as people read it: ``'m000'`` is ``m000``."""
    if key not in _KEYS:
        text = key
        if key is not None:
            try:
                value = ast.literal_eval(key)
                text = value if isinstance(value, str) else key
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
        _KEYS[key] = text
    return _KEYS[key]


def _lane(r: Row, lanes: str | bool | None) -> str | None:
    if isinstance(lanes, str):
        for k, v in _FIELD.findall(r["payload_repr"] or ""):
            if k == lanes:
                return v.strip().strip("'\"")
    return _key_text(r["key"])


def _keyed(info: dict[str, Any]) -> bool:
    """Whether a step (its kind in ``plan.json``) keys its events: a group_apply, a join, a
    keyed window."""
    return info.get("kind") in ("group_apply", "join", "left_join", "anti_join") or \
        info.get("keyed") is True


def _events(rows: list[Row], direction: str, lanes: str | bool | None, port: int | None = None
            ) -> tuple[list[_Event], list[int]]:
    """The events of one direction (of one input ``port`` when given) in arrival order and
    its CTIs."""
    events: dict[tuple[int, str], _Event] = {}
    order: list[_Event] = []
    ctis: list[int] = []
    for r in rows:
        if r["direction"] != direction or (port is not None and r["port"] != port):
            continue
        if r["kind"] == "cti":
            ctis.append(r["start"])
        elif r["kind"] == "insert":
            k = (r["port"], r["id"])
            ev = _Event(f"{r['port']}:{r['id']}", r["port"], r["id"], r["start"], r["end"],
                        r["payload_repr"] or "",
                        lane=_lane(r, lanes) if lanes not in (None, False) else None)
            events[k] = ev  # an id inserted again after its deletion is a new event
            order.append(ev)
        elif r["kind"] == "retract":
            got = events.get((r["port"], r["id"]))
            if got is not None:
                got.ends.append(r["new_end"])
    return order, ctis


def _layout(p: _Panel, lanes: str | bool | None, limit: int, order: list[str]) -> None:
    """Choose how ``p`` is drawn (see the module docstring) and the rows of its events;
    lanes come in the order of ``order`` (the input's lanes), then as they first appear."""
    evs = p.events
    if lanes not in (None, False) and any(ev.lane is not None for ev in evs):
        p.mode = "lanes"
        p.dense = len(evs) > MAX_DRAWN
        groups: dict[str, list[tuple[int, _Event]]] = {name: [] for name in order}
        for n, ev in enumerate(evs):
            groups.setdefault(ev.lane if ev.lane is not None else "(no key)", []).append(
                (n, ev))
        rows = 0
        for name, group in [(name, g) for name, g in groups.items() if g]:
            depth = 1 if p.dense else _pack(group, rows)
            if rows + depth > limit:
                left_out = sum(1 for g in groups.values() if g) - len(p.lanes)
                p.hidden = f"+{left_out:,} more keys (limit={limit} rows)"
                break
            p.lanes.append((name, rows, depth))
            if not p.dense:
                p.shown.extend(group)
            rows += depth
        p.rows = max(1, rows)
        p.shown.sort(key=lambda ne: ne[0])
    elif len(evs) <= limit or lanes is False:
        p.mode = "events"
        p.shown = list(enumerate(evs[:limit]))
        for i, (_, ev) in enumerate(p.shown):
            ev.row = i
        p.rows = max(1, len(p.shown))
        if len(evs) > limit:
            p.hidden = f"+{len(evs) - limit:,} more events (limit={limit})"
    else:
        p.mode = "density"
        p.rows = DENSITY_ROWS


def _pack(group: list[tuple[int, _Event]], first: int) -> int:
    """Put a lane's events on rows from ``first``, overlapping ones on different rows (at
    most :data:`MAX_DEPTH`); returns the rows used."""
    ends: list[int] = []
    for _, ev in sorted(group, key=lambda ne: ne[1].start):
        free = next((i for i, e in enumerate(ends) if e <= ev.start), None)
        if free is None and len(ends) < MAX_DEPTH:
            ends.append(ev.reach)
            free = len(ends) - 1
        elif free is None:
            free = min(range(len(ends)), key=ends.__getitem__)
        ends[free] = max(ends[free], ev.reach) if ends[free] > ev.start else ev.reach
        ev.row = first + free
    return max(1, len(ends))


def timeline(trace: str | Recording, step: str, out: str | None = None,
             start: int | None = None, end: int | None = None,
             limit: int = DEFAULT_LIMIT, label: str | None = None,
             tz: str | None = None, lanes: str | bool | None = None) -> Any:
    """Draw the messages that entered and left ``step`` of ``trace`` (a path or a
    :class:`~topology.seeing.debug.Recording`), events overlapping ``[start, end)`` (default: all),
    at most ``limit`` rows per panel; save to ``out`` (``.svg``, ``.png``, ``.pdf``) when
    given. ``lanes``: None draws one lane per key when the step records keys, one row per
    event when there are at most ``limit``, else a density; ``"FIELD"`` one lane per value of
    that payload field (the recorded key where a payload has none); ``True`` one lane per
    recorded key; ``False`` one row per event (the first ``limit``). Each event is labelled by
    its payload's field ``label`` (``label="kwh"``), or by its payload shortened readably
    (``meter=m000 kwh=0.42``). The time axis reads as times (UTC, or ``tz``) when the
    trace's sources carried timestamps, else as integer ticks; never in offset notation.
    Returns the matplotlib ``Figure``."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
    except ImportError:
        raise ImportError("timeline pictures need matplotlib: pip install 'cedar[viz]'"
                          ) from None
    if limit < 1:
        raise ValueError(f"limit={limit}: give at least 1 row per panel")
    rec = trace if isinstance(trace, Recording) else Recording.open(trace)
    step = rec.step_of(step)
    rows = rec.events(step=step, start=start, end=end)
    info = rec.steps.get(step, {})
    if lanes is None and _keyed(info):
        lanes = True  # (an unkeyed window records one key for all its events: no lanes)
    # a step with several inputs (a join, a union) draws each input in a panel of its own,
    # so that one input's events never crowd the other's out of the picture
    feeds = {int(port): str(src) for src, port in info.get("inputs", ())}
    panels: dict[str, _Panel] = {}
    if 1 < len(feeds) <= MAX_INPUT_PANELS:
        for port in sorted(feeds):
            evs, ctis = _events(rows, "in", lanes, port)
            panels[f"in{port}"] = _Panel(f"in{port}", evs, ctis, port, feeds[port])
    else:
        evs, ctis = _events(rows, "in", lanes)
        panels["in"] = _Panel("in", evs, ctis)
    evs, ctis = _events(rows, "out", lanes)
    panels["out"] = _Panel("out", evs, ctis)
    if lanes is True and not any(ev.lane for p in panels.values() for ev in p.events):
        raise ValueError(f"step {step!r} records no key: give lanes='FIELD' (a payload "
                         f"field) to draw one lane per value of it")
    first = next(iter(panels.values()))
    for p in panels.values():
        _layout(p, lanes, limit, [] if p is first else [name for name, _, _ in first.lanes])
    times = [t for p in panels.values() for t in p.ctis if t < MAX_TIME]
    for p in panels.values():
        for ev in p.events:
            times.append(ev.start)
            times.extend(t for t in [ev.end, *ev.ends] if t < MAX_TIME)
    lo, hi = (min(times), max(times)) if times else (0, 1)
    pad = max(1, (hi - lo) // 20)
    left, right = lo - pad, hi + 2 * pad
    heights = [p.rows + 1.5 for p in panels.values()]
    fig = Figure(figsize=(10, min(MAX_INCHES, ROW_INCHES * sum(heights) + 1.6)))
    axes = fig.subplots(len(panels), 1, sharex=True, gridspec_kw={"height_ratios": heights})
    clock = rec.clock
    for ax, p in zip(axes, panels.values()):
        ax.patch.set_gid(f"axes-{p.direction}")
        ax.set_xlim(left, right)
        name = ("output" if p.direction == "out" else "input" if p.port is None else
                f"input {p.port}\n{_short(p.feeder, 16)}")
        if p.mode == "density":
            _draw_density(ax, p, left, right, clock)
        else:
            ax.set_ylim(p.rows - 0.5, -1.0)
            _draw_rows(ax, Rectangle, p, left, right, label, clock,
                       _tick_time(clock, left, right, tz))
            if p.mode == "lanes":
                name += f"\nby {lanes if isinstance(lanes, str) else 'key'}"
        ax.set_ylabel(name)
        _draw_ctis(ax, p, left, right)
        if p.hidden:
            ax.text(0.995, 0.01, p.hidden, transform=ax.transAxes, fontsize=7, ha="right",
                    va="bottom", color="0.25", zorder=5,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1}
                    ).set_gid(f"more-{p.direction}")
        ax.grid(axis="x", alpha=0.2)
    title = f"{step}  ({info.get('describe', info.get('kind', ''))})"
    window = _window_info(info)
    if window:
        more = _draw_windows(axes[0], Rectangle, info, panels["out"].events,
                             first.events, first, left, right)
        title += f"\n{_window_text(window, clock)} (shaded bands over the input" + (
            f", the first {MAX_WINDOWS} drawn)" if more else ")")
    axes[0].set_title(title, fontsize=9)
    axes[-1].set_xlabel(_time_axis(axes[-1], clock, lo, left, right, tz))
    fig.tight_layout()
    if out is not None:
        fig.savefig(out)
    return fig


def _id_text(id_repr: str) -> str:
    """An event id for a row's tick: ``FreshId('tumbling', 3)`` is ``#3``."""
    fresh = re.fullmatch(r"FreshId\(.*, (\d+)\)", id_repr)
    if fresh:
        return f"#{fresh.group(1)}"
    return id_repr if len(id_repr) <= 16 else id_repr[:13] + "..."


def _draw_rows(ax: Any, rect: Any, p: _Panel, left: int, right: int, label: str | None,
               clock: str | None, time: TimeText | None) -> None:
    """A panel of events one per row, or of lanes (their events, or density strips)."""
    if p.mode == "events":
        ax.set_yticks(range(len(p.shown)), [_id_text(ev.id) for _, ev in p.shown],
                      fontsize=7)
    else:
        ax.set_yticks([first + (rows - 1) / 2 for _, first, rows in p.lanes],
                      [name if len(name) <= 16 else name[:13] + "..."
                       for name, _, _ in p.lanes], fontsize=7)
        for k, (_, first, rows) in enumerate(p.lanes):
            ax.axhspan(first - 0.5, first + rows - 0.5, facecolor="0.5",
                       alpha=0.07 if k % 2 else 0.0, linewidth=0, zorder=0
                       ).set_gid(f"lane-{p.direction}-{k}")
    if p.dense:
        _draw_strips(ax, p, left, right, clock)
        return
    # a label is left out where it would overlap the one before it on its row
    per_char = 6 * 0.62 / 72 / 8.6 * (right - left)  # a character's width, in ticks
    label_end: dict[int, float] = {}
    for n, ev in p.shown:
        text = payload_label(ev.payload, label, key=ev.lane, time=time)
        room = p.mode == "events" or ev.start >= label_end.get(ev.row, -math.inf)
        if room:
            label_end[ev.row] = ev.start + (len(text) + 2) * per_char
        _draw_event(ax, rect, p.direction, n, ev, right, text if room else None)


def _draw_event(ax: Any, rect: Any, direction: str, n: int, ev: _Event, right: int,
                text: str | None) -> None:
    gid = f"{direction}-{n}"
    i = ev.row
    final, reach = ev.final, ev.reach
    color = "tab:blue" if direction.startswith("in") else "tab:green"
    if ev.end == ev.start + 1 and not ev.ends:
        tick = ax.plot([ev.start, ev.start], [i - 0.35, i + 0.35], color=color,
                       linewidth=2.5, solid_capstyle="butt")[0]
        tick.set_gid(f"point-{gid}")
        bar = rect((ev.start, i - 0.1), 1, 0.2, color=color)
    else:
        shown_end = min(final, right) if final > ev.start else ev.start
        bar = rect((ev.start, i - 0.3), max(0, shown_end - ev.start), 0.6, facecolor=color,
                   edgecolor="white", linewidth=0.6, alpha=0.8)  # edges part touching bars
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
        strike = ax.plot([final, e], [i, i], color="darkred", linewidth=1.6)[0]
        strike.set_gid(f"strike-{gid}")
    if text is not None:
        ax.text(ev.start, i - 0.38, text, fontsize=6, va="bottom",
                color="darkred" if final <= ev.start else "black").set_gid(f"label-{gid}")


def _slots(left: int, right: int, clock: str | None) -> tuple[int, Any]:
    """A round slot (a duration of :data:`_STEPS` for times, 1, 2 or 5 times a power of ten
    for ticks) that cuts ``[left, right)`` into about :data:`DENSITY_SLOTS`, and the edges."""
    import numpy as np

    span = max(1, right - left)
    if clock == TIMESTAMPS:
        size = next((s for s in _STEPS if span / s <= DENSITY_SLOTS), _STEPS[-1])
    else:
        size = next(m * 10**e for e in range(19) for m in (1, 2, 5)
                    if span / (m * 10**e) <= DENSITY_SLOTS)
    first = (left // size) * size
    edges = np.arange(first, right + size, size, dtype=np.float64)
    return size, edges


def _draw_density(ax: Any, p: _Panel, left: int, right: int, clock: str | None) -> None:
    """How many of the panel's events start in each slot of time, and how many of those
    were retracted (shortened or deleted), in red."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    size, edges = _slots(left, right, clock)
    starts = np.fromiter((ev.start for ev in p.events), dtype=np.float64,
                         count=len(p.events))
    counts, _ = np.histogram(starts, edges)
    color = "tab:blue" if p.direction.startswith("in") else "tab:green"
    ax.stairs(counts, edges, fill=True, color=color, alpha=0.7).set_gid(
        f"density-{p.direction}")
    cut = np.fromiter((ev.start for ev in p.events if ev.ends), dtype=np.float64)
    if len(cut):
        struck, _ = np.histogram(cut, edges)
        ax.stairs(struck, edges, fill=True, facecolor="none", edgecolor="tab:red",
                  hatch="///").set_gid(f"density-retracted-{p.direction}")
    ax.set_ylim(0, max(1, int(counts.max()) if len(counts) else 1) * 1.3)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    ax.tick_params(axis="y", labelsize=7)
    ax.text(0.005, 0.97, f"{len(p.events):,} events, per {show_duration(size, clock)}",
            transform=ax.transAxes, fontsize=7, va="top", color="0.25", zorder=5,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})


def _draw_strips(ax: Any, p: _Panel, left: int, right: int, clock: str | None) -> None:
    """Each lane as a strip whose shade is how many of its events start in each slot."""
    import numpy as np

    size, edges = _slots(left, right, clock)
    row = {name: first for name, first, _ in p.lanes}
    grid = np.zeros((max(1, len(p.lanes)), len(edges) - 1))
    for ev in p.events:
        r = row.get(ev.lane if ev.lane is not None else "(no key)")
        if r is not None:
            k = int(np.searchsorted(edges, ev.start, side="right")) - 1
            if 0 <= k < grid.shape[1]:
                grid[r, k] += 1
    shown = np.ma.masked_equal(grid, 0)
    cmap = "Blues" if p.direction.startswith("in") else "Greens"
    ax.imshow(shown, aspect="auto", cmap=cmap, interpolation="nearest", vmin=0,
              vmax=max(1.0, float(grid.max())) * 1.4,  # the fullest slot not black
              extent=(float(edges[0]), float(edges[-1]), len(p.lanes) - 0.5, -0.5)
              ).set_gid(f"density-{p.direction}")
    ax.text(0.005, 0.99, f"{len(p.events):,} events: the darker a slot of "
            f"{show_duration(size, clock)}, the more start in it",
            transform=ax.transAxes, fontsize=7, va="top", color="0.25", zorder=5,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})


def _draw_ctis(ax: Any, p: _Panel, left: int, right: int) -> None:
    """The panel's CTIs as dashed lines, at most :data:`MAX_CTIS` (one where several are
    closer than a pixel or so)."""
    gap = (right - left) / MAX_CTIS
    last = -math.inf
    k = 0
    inside = [t for t in p.ctis if left <= t <= right]
    for j, t in enumerate(inside):
        if t - last < gap and j != len(inside) - 1:
            continue
        last = t
        line = ax.axvline(t, color="tab:red", linestyle="--", linewidth=0.8)
        line.set_gid(f"cti-{p.direction}-{k}")
        k += 1


def _window_info(info: dict[str, Any]) -> dict[str, Any]:
    """The window step of a step (itself, or a group_apply's sub-query's window), or {}."""
    if info.get("kind") not in ("window", "group_apply"):
        return {}
    window = info if info.get("kind") == "window" else info.get("sub", {})
    if window.get("kind") != "window":
        window = next((m for m in window.get("members", ()) if m.get("kind") == "window"), {})
    return window


def _window_text(window: dict[str, Any], clock: str | None) -> str:
    """The windows in words, durations as people read them: ``tumbling windows of 5 min``."""
    spec = window.get("spec", {})
    kind = spec.get("kind", "")

    def d(v: Any) -> str:
        return show_duration(v, clock) if isinstance(v, int) else str(v)

    if "size" in spec:
        size, hop = spec["size"], spec.get("hop", spec["size"])
        text = f"{kind} windows of {d(size)}" + (f", every {d(hop)}" if hop != size else "")
    elif kind == "session":
        text = f"session windows, gap {d(spec.get('gap'))}"
        if spec.get("max_duration") is not None:
            text += f", at most {d(spec['max_duration'])}"
    elif kind == "count":
        text = f"count windows of {spec.get('n')} (by {spec.get('by', 'start')})"
    else:
        text = f"{kind} windows"
    return text


def _draw_windows(ax: Any, rect: Any, info: dict[str, Any], outs: list[_Event],
                  ins: list[_Event], panel: _Panel, left: int, right: int) -> bool:
    """The window of each output event (:func:`operators.windows.window_of.window_of`; a group's
    snapshot windows from all its inputs) over the input panel: a shaded band (over its
    key's lane, in a panel of lanes) and a bracket above, consecutive windows in alternating
    shades; the first :data:`MAX_WINDOWS` only (returns True when there were more)."""
    window = _window_info(info)
    spec = window.get("spec", {})
    if not spec:
        return False
    made_by = spec_from_dict(spec)
    lives = [(ev.start, ev.ends[-1] if ev.ends else ev.end) for ev in ins]
    lanes = panel.lane_of if panel.mode == "lanes" else {}
    seen: dict[tuple[int, int], int] = {}  # each distinct window: its bracket's number
    banded: set[tuple[str | None, int, int]] = set()  # (lane, window) of each band
    top = ax.get_ylim()[1] if panel.mode == "density" else 0.0
    for ev in outs:
        if len(banded) >= MAX_WINDOWS:
            return True
        s, e, _ = window_of(made_by, window.get("output"), ev.start, ev.end, lives)
        if e >= MAX_TIME or e <= left or s >= right:
            continue
        lane = lanes.get(ev.lane) if ev.lane is not None else None
        where = (ev.lane if lane is not None else None, s, e)
        if where in banded:
            continue
        new = (s, e) not in seen
        if new and len(seen) >= MAX_WINDOWS:
            return True
        j = seen.setdefault((s, e), len(seen))
        # one bracket per distinct window, even one whose output was deleted; over lanes,
        # only windows of a grid common to every key (another key's session is not yours)
        if new and (not lanes or "size" in spec):
            if panel.mode == "density":
                y, h = top * (0.95 - 0.05 * (j % 2)), -top * 0.04
            else:
                y, h = -0.55 - 0.2 * (j % 2), 0.15
            bracket = ax.plot([s, s, e, e], [y + h, y, y, y + h], color="black",
                              linewidth=1.0)[0]
            bracket.set_gid(f"window-{j}")
        if ev.final <= ev.start:
            continue  # a band for the windows whose output stands
        nth = (s - spec.get("alignment", 0)) // spec["hop"] if "hop" in spec else j
        shade = BAND_COLORS[nth % 2]
        if lane is not None:  # over its key's lane
            first, rows = lane
            band = rect((s, first - 0.5), e - s, rows, facecolor=shade, alpha=0.18,
                        linewidth=0, zorder=0)
            ax.add_patch(band)
        else:
            band = ax.axvspan(s, e, facecolor=shade, alpha=0.13, linewidth=0, zorder=0)
        band.set_gid(f"band-{len(banded)}")
        banded.add(where)
    return False

def _short(text: str, width: int = 28) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


#: ``'name': value`` of a dict's repr: a quoted string, a call such as ``datetime.datetime(...)``
#: or anything up to the next comma
_FIELD = re.compile(r"""['"](\w+)['"]:\s*('[^']*'|"[^"]*"|[\w.]+\([^()]*\)|[^,{}]+)""")


def _number(text: str) -> str:
    """A float's text cut to four significant digits (``0.4513333333`` is ``0.4513``), to one
    decimal from a thousand up; any other text as it is."""
    if not re.fullmatch(r"-?\d+\.\d+(?:e-?\d+)?|-?\d+e-?\d+", text):
        return text
    v = float(text)
    return f"{v:.1f}" if abs(v) >= 1000 else f"{v:.4g}"


#: a ``datetime.datetime(...)`` in a payload's repr: its numbers and whether it is in UTC
_DATETIME = re.compile(r"datetime\.datetime\(([\d, ]+)(, tzinfo=datetime\.timezone\.utc)?\)")

#: a tick as a time for a label (None: not a time of the picture), see :func:`_tick_time`
TimeText = Callable[[int], "str | None"]


def _value(text: str, time: TimeText | None) -> str:
    """A payload field's value for a label: a float cut (:func:`_number`), an integer that
    is a time of the picture or a ``datetime`` in UTC as that time (``time``)."""
    if time is not None:
        if re.fullmatch(r"-?\d{10,}", text):
            return time(int(text)) or text
        got = _DATETIME.fullmatch(text)
        if got:
            import datetime as dt

            n = [int(v) for v in got.group(1).split(",")] + [0] * 7
            when = dt.datetime(n[0], n[1], n[2], n[3], n[4], n[5], n[6], tzinfo=dt.UTC)
            if got.group(2):
                tick = (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(
                    microseconds=1)
                return time(tick) or text
            return when.isoformat(sep=" ").removesuffix("+00:00")
    return _number(text)


def _items(payload: str, key: str | None, time: TimeText | None = None) -> str | None:
    """A payload that is a tuple or list (a keyed output ``('m000', 0.451)``), a number or a
    string, as its items without brackets and quotes, the leading ``key`` left out; None
    when it is none of these."""
    try:
        value = ast.literal_eval(payload)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    if len(items) > 1 and key is not None and str(items[0]) == key:
        items = items[1:]
    if not all(isinstance(v, (str, int, float, bool)) or v is None for v in items):
        return None
    return ", ".join(v if isinstance(v, str) else _value(repr(v), time) for v in items)


def payload_label(payload: str, field: str | None = None, width: int = 28,
                  key: str | None = None, time: TimeText | None = None) -> str:
    """A payload's label in a picture: its field ``field`` when given (``kwh=0.42``), else
    its fields as ``name=value`` without braces and quotes, cut at a field's end when it is
    longer than ``width`` characters; a tuple as its items (``m000, 0.451``); in the lane of
    its ``key`` (``m000``), without the key (``0.451``, ``kwh=0.42``); anything else
    shortened. Floats show four significant digits; with ``time`` (a picture's
    :func:`_tick_time`), an integer or a datetime that is a time of the picture shows as that
    time.

    >>> payload_label("{'meter': 'm000', 'kwh': 0.42, 'ts': 1767225600}", "kwh")
    'kwh=0.42'
    >>> payload_label("{'meter': 'm000', 'kwh': 0.42, 'ts': 1767225600}")
    'meter=m000 kwh=0.42 …'
    >>> payload_label("('m000', 0.4513333333333333)"), payload_label("('m000', 0.451)", key="m000")
    ('m000, 0.4513', '0.451')
    """
    fields = [(k, _value(v.strip().strip("'\""), time)) for k, v in _FIELD.findall(payload)]
    if field is not None:
        chosen = [f"{k}={v}" for k, v in fields if k == field]
        if chosen:
            return _short(chosen[0], width)
    same = [i for i, (_, v) in enumerate(fields) if v == key]
    if key is not None and len(fields) > 1 and same:  # in its key's lane, the key is known
        del fields[same[0]]
    if not fields:
        items = _items(payload, key, time)
        return _short(payload if items is None else items, width)
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


def _tick_time(clock: str | None, left: int, right: int, tz: str | None) -> TimeText | None:
    """How a picture spanning ``[left, right)`` shows a time: the time of day (to the
    millisecond at most, without its zone) when it spans less than a day, else the date and
    the minute; a tick more than the picture's span away from it is no time of it (None).
    None when the trace's times are plain ticks."""
    if clock != TIMESTAMPS:
        return None
    zone = parse_tz(tz)
    span = right - left
    one_day = span < 86_400_000_000

    def text(t: int) -> str | None:
        if not left - span <= t <= right + span:
            return None
        shown = show_time(t, clock, zone)
        if one_day:
            return re.sub(r"(Z|[+-]\d\d:\d\d)$", "", shown[11:])[:12]
        return shown[:16].replace("T", " ")

    return text


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
    text = _tick_time(clock, left, right, tz)
    assert text is not None
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: text(round(x)) or ""))
    name = "UTC" if zone is UTC else str(zone)
    return f"time ({name}, {first[:10]})" if one_day else f"time ({name})"
