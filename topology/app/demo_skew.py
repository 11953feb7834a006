"""The meter whose clock is behind, in ``cedar demo``: what one CTI for all the meters does to
its readings, and what per-key progress (``AdvanceTime(per_key="meter", low_watermark=...)``,
SPEC "Per-key progress") does instead.

The demo's table is read in batch, in time order, so none of its readings is late there. Here
the readings are fed as they arrived (:func:`~topology.app.demo_data.generate`'s order) to the
5-minute averages of every meter, each window's average sent once it is final, inline, by
three ways of advancing time (:func:`skew_runs`):

* one CTI, 1 minute behind the latest reading (the demo's :func:`readings_advance`): the
  skewed meter's readings, 10 minutes behind the others', are late and lost;
* one CTI, 15 minutes behind the latest: they are kept, but every meter's windows wait 15
  minutes more;
* one CTI per meter (``per_key="meter"``, a low watermark 15 minutes behind the latest): they
  are kept, and the other meters' windows are final as soon as with one CTI.

:func:`print_skew` says it as a table; :func:`~topology.app.demo_pictures.meter_picture`
marks the meter and its readings one CTI loses.

    >>> from topology.app.demo_data import generate
    >>> runs = skew_runs(generate(meters=8, skewed="m001"))
    >>> [(r.label, r.late_skewed, r.skewed_readings) for r in runs]
    [('one, 1 min behind the latest', 55, 300), ('one, 15 min behind the latest', 0, 300),
     ('one per meter, low watermark 15 min', 0, 300)]
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from operators.aggregates import Avg
from operators.ingress import AdvanceTime
from operators.ticks import format_duration
from topology.app.demo_data import (
    DELAY_TICKS,
    LATE_BY_TICKS,
    SKEW_TICKS,
    TICKS_PER_S,
    DemoData,
    readings_advance,
)

__all__ = ["LOW_WATERMARK_TICKS", "WINDOW_TICKS", "SkewRun", "per_key_advance", "print_skew",
           "skew_runs"]

#: How far behind the latest reading the stream's CTI (the low watermark) stays with per-key
#: progress, and the delay of the one patient CTI: more than the skewed meter's clock is behind.
LOW_WATERMARK_TICKS = 15 * 60 * TICKS_PER_S
#: The windows of the comparison: the ``meter_averages`` query's.
WINDOW_TICKS = 5 * 60 * TICKS_PER_S


def per_key_advance(meters: int) -> AdvanceTime:
    """Per-key progress for ``meters`` meters: each meter's CTI 1 minute behind its own latest
    reading, after every ``2,000 / meters`` of its readings (the pace of the one CTI after
    every 2,000 readings of all of them), and the stream's 15 minutes behind the latest."""
    one = readings_advance()
    return AdvanceTime(every=max(1, (one.every or 1) // max(1, meters)), delay=DELAY_TICKS,
                       policy="drop", per_key="meter", low_watermark=LOW_WATERMARK_TICKS)


@dataclass(frozen=True)
class SkewRun:
    """What one way of advancing time did to the readings fed as they arrived: the late ones
    by meter, the skewed meter's readings and windows, and how long after its end each other
    meter's window was final (ticks of the arrival clock: the latest reading fed by then)."""

    label: str
    advance: AdvanceTime
    late: Counter[str]
    skewed: str
    skewed_readings: int
    skewed_windows: int
    expected_windows: int
    waits: tuple[int, ...]
    lost: tuple[int, ...]  # the times of the skewed meter's readings that were late

    @property
    def late_skewed(self) -> int:
        """The skewed meter's readings that were late."""
        return self.late[self.skewed]

    @property
    def late_others(self) -> int:
        """The other meters' readings that were late."""
        return sum(n for m, n in self.late.items() if m != self.skewed)

    @property
    def average_wait(self) -> int:
        """How long after its end an other meter's window was final, on average (ticks)."""
        return int(statistics.fmean(self.waits)) if self.waits else 0


def _run(data: DemoData, label: str, advance: AdvanceTime, meters: int) -> SkewRun:
    """Feed ``data``'s readings as they arrived, ``meters`` at a time (10 s of readings), to
    every meter's final 5-minute averages, noting when each window's average came out."""
    from topology import Stream
    from topology.planning.dag import DagProcessor

    skewed = data.skewed or ""
    query = Stream.from_rows(data.readings, start="ts", advance=advance, name="readings") \
        .group_apply(lambda r: r["meter"], lambda g: g.tumbling_window(
            WINDOW_TICKS, emit="final").aggregate(Avg("kwh")))
    dag = DagProcessor(query.plan(), inline_sink=True)
    now, waits, windows = 0, [], 0
    rows = data.readings
    batches: list[Any] = [rows[i:i + meters] for i in range(0, len(rows), meters)]
    for batch in [*batches, None]:  # None: the end of the readings, all windows final
        now = max([now] + [r["ts"] for r in batch or [] if r["ts"] is not None])
        for end, meter in _windows_in(dag.finish() if batch is None else dag.process(batch)):
            if meter == skewed:
                windows += 1
            else:
                waits.append(max(0, now - end))
    late = [e.item for p in dag.procs.values() for e in p.late]
    mine = [r["ts"] for r in rows if r["meter"] == skewed and r["ts"] is not None]
    return SkewRun(label, advance, Counter(r["meter"] for r in late), skewed, len(mine),
                   windows, len({t - t % WINDOW_TICKS for t in mine}), tuple(waits),
                   tuple(sorted(r["ts"] for r in late if r["meter"] == skewed)))


def _windows_in(messages: list[Any]) -> list[tuple[int, str]]:
    """The (end, meter) of each window average among ``messages`` (its inserts)."""
    from operators.events import Insert

    return [(m.end, m.payload[0]) for m in messages if type(m) is Insert]


def skew_runs(data: DemoData) -> list[SkewRun]:
    """The skewed meter's readings fed as they arrived by one CTI 1 minute behind the latest
    reading, one CTI 15 minutes behind, and one CTI per meter (:func:`per_key_advance`); no
    runs without a skewed meter."""
    if data.skewed is None:
        return []
    meters = len(data.meters)
    one = readings_advance()
    return [_run(data, "one, 1 min behind the latest", one, meters),
            _run(data, "one, 15 min behind the latest",
                 AdvanceTime(every=one.every, delay=LOW_WATERMARK_TICKS, policy="drop"), meters),
            _run(data, "one per meter, low watermark 15 min", per_key_advance(meters),
                 meters)]


def _wait(ticks: int) -> str:
    """A wait in whole seconds, with its units."""
    return format_duration(ticks - ticks % TICKS_PER_S)


def print_skew(runs: list[SkewRun]) -> None:
    """The table of :func:`skew_runs`: the skewed meter's late readings and windows, the other
    meters' late readings and how soon their windows were final, by each way of advancing
    time."""
    if not runs:
        return
    first = runs[0]
    m = first.skewed
    print(f"\n  meter {m}'s clock is {format_duration(SKEW_TICKS)} behind the others': its "
          f"{first.skewed_readings} readings, fed as they arrived to every\n  meter's 5-minute "
          f"averages (inline, each sent once final), by the source's CTIs:")
    print(f"    {'CTIs':<36}{m + ' late':>10}{'others late':>13}{m + ' windows':>14}   "
          f"others final after")
    for r in runs:
        print(f"    {r.label:<36}{r.late_skewed:>10,}{r.late_others:>13,}"
              f"{f'{r.skewed_windows} of {r.expected_windows}':>14}   {_wait(r.average_wait)}")
    print(f"    late readings are dropped (the others' were taken {format_duration(LATE_BY_TICKS)} "
          f"before they arrived); others final\n    after: how long after its end another "
          f"meter's window was final, on average, as the readings\n    arrived. One CTI per "
          f"meter (per_key=\"meter\") keeps all of {m}'s readings, and the others'\n    "
          f"windows are final as soon as with one CTI.")
