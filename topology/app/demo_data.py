"""The data of ``cedar demo``: the smart meters' readings, states and metadata
(:func:`generate`, deterministic for a seed), the spike detector the ``anomalies`` query
applies, and the demo's queries over them (:func:`queries`; :func:`reading_queries` builds
the four over the readings, on Spark's table for the run or on the live feed of
``cedar demo --keep``, :mod:`topology.app.demo_live`). Times are integer microseconds
(:data:`TICKS_PER_S`) from :data:`EPOCH_TICKS`, 2026-01-01 UTC.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from operators.aggregates import Avg, Count, Max, Sum
from operators.ingress import AdvanceTime
from operators.udm import Operator

if TYPE_CHECKING:
    from topology import Stream

TICKS_PER_S = 1_000_000
READING_EVERY_S = 10
EPOCH_TICKS = 1_767_225_600 * TICKS_PER_S  # 2026-01-01T00:00:00Z
#: How far behind the others a late reading arrives.
LATE_BY_TICKS = 20 * 60 * TICKS_PER_S
#: The lateness the demo's sources allow (``AdvanceTime(delay=)``): readings overtaken by up
#: to half a minute are on time, a reading 20 minutes behind is late.
DELAY_TICKS = 60 * TICKS_PER_S
#: The meter whose clock is behind the others' (when the demo has it), and by how much: its
#: readings arrive beside the others' taken :data:`SKEW_TICKS` later.
SKEWED_METER = "m007"
SKEW_TICKS = 10 * 60 * TICKS_PER_S


class SpikeDetector(Operator):
    """A time-insensitive UDO: the readings more than ``k`` standard deviations above the
    window's mean (at least ``min_readings`` readings to judge)."""

    def __init__(self, k: float = 3.0, min_readings: int = 10) -> None:
        self.k = k
        self.min_readings = min_readings

    def compute(self, values: list[Any]) -> list[Any]:
        if len(values) < self.min_readings:
            return []
        kwh = [v["kwh"] for v in values]
        mean = sum(kwh) / len(kwh)
        sd = math.sqrt(sum((x - mean) ** 2 for x in kwh) / len(kwh))
        spikes = [v for v in values if sd > 0 and v["kwh"] > mean + self.k * sd]
        return [{"ts": v["ts"], "kwh": v["kwh"], "mean": round(mean, 4)}
                for v in sorted(spikes, key=lambda v: v["ts"])]


@dataclass
class DemoData:
    """The demo's input: ``readings`` in arrival order (``late`` of them taken
    :data:`LATE_BY_TICKS` before they arrived), the meters' fault ``states`` (edges) and the
    ``meters``' metadata. The meter ``skewed`` (None: none) has a clock :data:`SKEW_TICKS`
    behind: each of its readings arrives beside the others' of that much later."""

    readings: list[dict[str, Any]]
    states: list[dict[str, Any]]
    meters: list[dict[str, Any]]
    late: int = 0
    skewed: str | None = None


def generate(meters: int = 40, minutes: int = 60, seed: int = 7,
             skewed: str | None = SKEWED_METER) -> DemoData:
    """Deterministic smart-meter data: readings every 10 s per meter, in arrival order.

    The meter ``skewed`` (when there is one of that name) has a clock :data:`SKEW_TICKS`
    behind: what it reads at 00:20 arrives stamped 00:10, beside the others' readings of
    00:20. Its readings start at the data's start by its own clock (its first 10 minutes
    would have times before it) and end 10 minutes before the others'; none of them is
    broken or late by more than its clock."""
    rng = random.Random(seed)
    regions = ["north", "south", "east", "west"]
    info: list[dict[str, Any]] = [{"meter": f"m{m:03d}", "region": regions[m % len(regions)],
             "base": 0.2 + 0.8 * rng.random(), "ts": EPOCH_TICKS} for m in range(meters)]
    readings: list[dict[str, Any]] = []
    states: list[dict[str, Any]] = []
    end = EPOCH_TICKS + minutes * 60 * TICKS_PER_S
    for m in info:
        t = EPOCH_TICKS + rng.randrange(READING_EVERY_S * TICKS_PER_S)
        while t < end:
            kwh = m["base"] * (1 + 0.1 * rng.gauss(0, 1))
            if rng.random() < 0.004:
                kwh *= 6  # a spike for the anomaly detector
            readings.append({"meter": m["meter"], "ts": t, "kwh": round(max(kwh, 0.0), 4)})
            t += READING_EVERY_S * TICKS_PER_S
        # meter states: online from the start; some faults, repaired later (an edge closed)
        fault_at = EPOCH_TICKS + rng.randrange(minutes * 60) * TICKS_PER_S
        if rng.random() < 0.3:
            states.append({"meter": m["meter"], "id": f"{m['meter']}-fault", "ts": fault_at,
                           "end": None, "state": "fault"})
            repair = fault_at + rng.randrange(60, 900) * TICKS_PER_S
            states.append({"meter": m["meter"], "id": f"{m['meter']}-fault", "ts": fault_at,
                           "end": repair, "state": "fault"})
    if skewed not in {m["meter"] for m in info}:
        skewed = None
    # arrival order: by time, with light disorder (a reading overtakes up to ~20 others); the
    # skewed meter's readings beside the others' taken SKEW_TICKS after them
    readings.sort(key=lambda r: r["ts"] + rng.randrange(30 * TICKS_PER_S)
                  + (SKEW_TICKS if r["meter"] == skewed else 0))
    # (its last readings by its clock would arrive after all the others': it has not taken
    # them yet when the data ends)
    readings = [r for r in readings if r["meter"] != skewed or r["ts"] < end - SKEW_TICKS]
    # late readings: taken 20 minutes before they arrive, so never before the data starts
    # (one taken before it would make windows of a time no other reading has)
    could_be_late = [i for i, r in enumerate(readings) if r["ts"] - LATE_BY_TICKS >= EPOCH_TICKS
                     and r["meter"] != skewed]
    late = rng.sample(could_be_late, k=min(len(could_be_late), max(1, len(readings) // 400)))
    for i in late:
        readings[i]["ts"] -= LATE_BY_TICKS
    others = [i for i, r in enumerate(readings) if r["meter"] != skewed]
    for i in rng.sample(others, k=max(1, len(readings) // 2000)):
        readings[i]["ts"] = None  # a broken reading: no time
    states.sort(key=lambda r: r["ts"] if r["end"] is None else r["end"])
    for m in info:
        del m["base"]
    return DemoData(readings, states, info, late=sum(readings[i]["ts"] is not None
                                                     for i in late), skewed=skewed)


def readings_advance() -> AdvanceTime:
    """The readings' CTIs: one after every 2,000 readings, :data:`DELAY_TICKS` behind the
    latest; a reading behind a CTI is late, dropped and recorded."""
    return AdvanceTime(every=2_000, delay=DELAY_TICKS, policy="drop")


def reading_queries(readings: Callable[[], Stream], meters: list[dict[str, Any]]
                     ) -> dict[str, Stream]:
    """The four queries over the readings, each over ``readings()``."""
    from topology import Stream

    minute = 60 * TICKS_PER_S
    meta = Stream.from_rows(meters, start="ts", id="meter", shape="edge", name="meters")
    return {
        "meter_averages": readings().group_apply(
            lambda r: r["meter"], lambda g: g.tumbling_window(5 * minute).aggregate(Avg("kwh"))),
        "anomalies": readings().group_apply(
            lambda r: r["meter"],
            lambda g: g.hopping_window(5 * minute, minute).apply(SpikeDetector())),
        "regional_load": readings()
            .join(meta, on=("meter", "meter"),
                  select=lambda r, m: {"region": m["region"], "kwh": r["kwh"]})
            .group_apply(lambda r: r["region"],
                         lambda g: g.tumbling_window(15 * minute).aggregate(Sum("kwh"))),
        "peaks": readings().group_apply(
            lambda r: r["meter"], lambda g: g.count_window(30).aggregate(Max("kwh"))),
    }


def queries(df: Any, data: DemoData) -> dict[str, Any]:
    """The demo's five topologies. The four over the readings are built on one
    ``from_spark`` stream of the DataFrame ``df``: started together, they share one read of
    it (Spark sorts the table once, :mod:`topology.building.shared_read`)."""
    from topology import Stream

    source = Stream.from_spark(df, start="ts", advance=readings_advance(), name="readings")
    states = Stream.from_rows(data.states, start="ts", end="end", id="id", shape="edge",
                              name="meter_states")
    return {**reading_queries(lambda: source, data.meters),
            "faults": states.where(lambda s: s["state"] == "fault")
            .snapshot_window().aggregate(Count())}
