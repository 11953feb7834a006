"""The picture ``cedar demo`` draws of one meter: what a person wants to see of meters.

One meter's readings as a line, its 5-minute window averages (the ``meter_averages`` query)
as steps over the windows they summarise, and the spikes the ``anomalies`` query found marked
on the line, each with its time, its reading and the mean of the window that judged it. The
time axis reads as times of day (UTC), never as ticks.

Every drawn element carries an SVG id (matplotlib's ``gid``), so that tests read the picture's
parts from the file: ``readings``, ``window-averages``, ``anomalies``, ``anomaly-label-0``,
... (one per spike) and ``anomaly-window`` (the band of the window that judged the first
spike). A meter whose clock is behind the others' (:class:`ClockBehind`) is marked: its title
says so, a note (``clock-behind``) says what one CTI and per-key progress do to its readings,
and ``late-readings`` marks those one CTI for all the meters drops as late.

Needs matplotlib (``pip install -e ".[viz]"``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from operators.ticks import format_duration

__all__ = ["SPAN_TICKS", "ClockBehind", "first_anomaly", "meter_picture"]

#: At most this much time is drawn (ticks: one hour), centred on the first anomaly, so that
#: 10-second readings stay readable whatever the demo's length.
SPAN_TICKS = 60 * 60 * 1_000_000

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_TEN_MINUTES = 10 * 60 * 1_000_000


def _time(ticks: int) -> datetime.datetime:
    """Ticks (µs since the epoch, UTC) as the time they are."""
    return _EPOCH + datetime.timedelta(microseconds=ticks)


@dataclass(frozen=True)
class ClockBehind:
    """A ``meter`` whose clock is ``behind`` (ticks) the others', and the times of its
    readings that one CTI for all the meters drops as late (``lost``): per-key progress
    (``AdvanceTime(per_key=...)``) keeps them all (:mod:`topology.app.demo_skew`)."""

    meter: str
    behind: int
    lost: tuple[int, ...] = ()


def first_anomaly(anomalies: Iterable[tuple[int, int, Any]]) -> tuple[str, int] | None:
    """The meter of the earliest spike in the ``anomalies`` output, and that spike's time."""
    found = [(p[1]["ts"], p[0]) for _, _, p in anomalies]
    if not found:
        return None
    ts, meter = min(found)
    return meter, ts


def meter_picture(readings: list[dict[str, Any]], averages: list[tuple[int, int, Any]],
                  anomalies: list[tuple[int, int, Any]], path: str,
                  meter: str | None = None, clock_behind: ClockBehind | None = None
                  ) -> str | None:
    """Draw one meter into ``path`` (svg, png, pdf: by its extension) and return its name.

    ``readings`` are the demo's rows ``{"meter", "ts", "kwh"}`` (``ts`` in ticks; a row
    without a time is skipped); ``averages`` and ``anomalies`` are the output rows
    ``(start, end, payload)`` of the queries ``meter_averages`` (payload ``(meter, avg)``)
    and ``anomalies`` (payload ``(meter, {"ts", "kwh", "mean"})``). ``meter`` defaults to
    the meter of the first anomaly; without one (and no ``meter``), nothing is drawn and
    None is returned. At most :data:`SPAN_TICKS` of time are drawn, around that anomaly.
    When the meter drawn is ``clock_behind``'s, it is marked as one whose clock is behind.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    first = first_anomaly(anomalies)
    if meter is None:
        if first is None:
            return None
        meter, centre = first
    else:
        spikes = [p[1]["ts"] for _, _, p in anomalies if p[0] == meter]
        centre = min(spikes) if spikes else None  # type: ignore[assignment]
    mine = sorted((r["ts"], r["kwh"]) for r in readings
                  if r["meter"] == meter and r["ts"] is not None)
    if not mine:
        return None
    lo = mine[0][0] if centre is None else max(mine[0][0], centre - SPAN_TICKS // 2)
    lo -= lo % _TEN_MINUTES  # the axis starts on a labelled time
    hi = lo + SPAN_TICKS
    shown = [(t, k) for t, k in mine if lo <= t < hi]
    steps = sorted((s, e, p[1]) for s, e, p in averages
                   if p[0] == meter and e > lo and s < hi)
    spikes_by_ts: dict[int, dict[str, Any]] = {}
    for s, e, p in sorted(anomalies, key=lambda r: r[0]):
        if p[0] == meter and lo <= p[1]["ts"] < hi:
            spikes_by_ts.setdefault(p[1]["ts"], {**p[1], "window": (s, e)})
    spikes = [spikes_by_ts[t] for t in sorted(spikes_by_ts)]
    behind = clock_behind if clock_behind is not None and clock_behind.meter == meter else None

    with plt.rc_context({"svg.fonttype": "none", "font.size": 9}):
        fig, axes = plt.subplots(figsize=(10, 4.2))
        ax: Any = axes  # (matplotlib's stubs take no datetimes, which it draws)
        try:
            ax.plot([_time(t) for t, _ in shown], [k for _, k in shown], color="#8aa6c1",
                    linewidth=0.9, marker=".", markersize=2.5, label="readings (every 10 s)",
                    gid="readings")
            if steps:
                xs, ys = [], []
                for s, e, avg in steps:  # one flat step per window, a break between windows
                    xs += [_time(s), _time(e), _time(e)]
                    ys += [avg, avg, float("nan")]
                ax.plot(xs, ys, color="#1f4e79", linewidth=2.2,
                        label="5-minute average (meter_averages)", gid="window-averages")
            if spikes:
                s0, e0 = spikes[0]["window"]
                ax.axvspan(_time(s0), _time(e0), color="#f4a259", alpha=0.18, linewidth=0,
                           label="window that judged it (anomalies)", gid="anomaly-window")
                ax.scatter([_time(p["ts"]) for p in spikes], [p["kwh"] for p in spikes],
                           s=70, facecolors="none", edgecolors="#c0392b", linewidths=1.8,
                           zorder=5, label="anomaly: > mean + 3 sd", gid="anomalies")
                for i, p in enumerate(spikes):
                    ax.annotate(f"{_time(p['ts']):%H:%M:%S}  {p['kwh']:.2f} kWh\n"
                                f"(window mean {p['mean']:.2f})",
                                (_time(p["ts"]), p["kwh"]), xytext=(9, 6),
                                textcoords="offset points", fontsize=8, color="#c0392b",
                                va="bottom", gid=f"anomaly-label-{i}",
                                bbox={"boxstyle": "round,pad=0.2", "fc": "white",
                                      "ec": "none", "alpha": 0.85})
            if behind is not None:
                _mark_clock_behind(ax, behind, mine, shown)
            day = _time(shown[0][0] if shown else lo)
            clock = "" if behind is None else \
                f"\n(its clock {format_duration(behind.behind)} behind the others')"
            ax.set_title(f"meter {meter}, {day:%Y-%m-%d} (UTC): readings, their 5-minute "
                         f"averages and the anomalies found{clock}")
            ax.set_xlabel("time (UTC)")
            ax.set_ylabel("kWh per reading")
            ax.xaxis.set_major_locator(mdates.MinuteLocator(byminute=range(0, 60, 10)))
            ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=datetime.UTC))
            ax.set_xlim(_time(lo), _time(hi))
            top = max([k for _, k in shown] + [a for _, _, a in steps] + [0.0])
            # room above the highest line for the labels (and the note of a clock behind)
            ax.set_ylim(0, top * (1.25 if behind is None else 1.6) or 1.0)
            ax.grid(True, axis="y", color="#e5e5e5", linewidth=0.6)
            legend = ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4,
                               fontsize=8, frameon=False)
            for handle in legend.legend_handles:  # copies of the artists: not their ids
                if handle is not None:
                    handle.set_gid(None)
            fig.tight_layout()
            fig.savefig(path)
        finally:
            plt.close(fig)
    return meter


def _mark_clock_behind(ax: Any, behind: ClockBehind, mine: list[tuple[int, float]],
                       shown: list[tuple[int, float]]) -> None:
    """Mark the readings of ``behind``'s meter that one CTI drops (``late-readings``), and say
    what one CTI and per-key progress do to them (``clock-behind``)."""
    lost = set(behind.lost)
    dropped = [(t, k) for t, k in shown if t in lost]
    if dropped:
        ax.scatter([_time(t) for t, _ in dropped], [k for _, k in dropped], s=12, marker="x",
                   color="#c0392b", linewidths=0.8, alpha=0.75, zorder=4,
                   label="late with one CTI, kept per meter", gid="late-readings")
    ax.annotate(f"clock {format_duration(behind.behind)} behind the others': "
                f"{len(lost)} of its {len(mine)} readings late with one CTI for all the "
                f"meters,\nnone with one CTI per meter (per_key=\"meter\")",
                (0.01, 0.98), xycoords="axes fraction", fontsize=8, color="#c0392b",
                va="top", gid="clock-behind",
                bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "#c0392b",
                      "alpha": 0.9})
