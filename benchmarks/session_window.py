"""Session windows per key, inline: the keyed column-wise path against a 1M events/s target.

The input is N point events from an Arrow table (``Stream.from_arrow``), in time order, one
every :data:`STEP_US` µs of event time, each with a key out of :data:`KEYS` (1,000, uniform at
random) and a float value; a CTI every 10,000 events. The query is what issue #24 asks to run
at ≥ 1M events/s inline::

    group_apply(key, lambda g: g.session_window(gap).aggregate(Count()))

with a gap of :data:`GAP_US` (each key sees an event every ~1 ms of event time, so sessions
are broken by the random pauses longer than the gap). Timed: ``collect(runtime="inline",
columns=True)`` from the table to the output at the driver, best of 3 after one warm-up run;
also the general path (the same points as 1-tick intervals: one session operator per key) on
a smaller input, as a reference. The machine's load average is printed with the figures.

    python -m benchmarks.session_window                   # N = 2,000,000
    python -m benchmarks.session_window --events 500000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from operators.aggregates import Count
from operators.ingress import AdvanceTime
from topology import Stream

KEYS = 1_000
STEP_US = 1
GAP_US = 3_000
CTI_EVERY = 10_000


def table(n: int, seed: int = 1, intervals: bool = False) -> Any:
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.int64) * STEP_US
    cols = {"t": t, "k": rng.integers(0, KEYS, n), "v": rng.random(n)}
    if intervals:
        cols["e"] = t + 1
    return pa.table(cols)


def bidder(r: dict[str, Any]) -> Any:
    return r["k"]


def query(data: Any, intervals: bool = False) -> Stream:
    src = Stream.from_arrow(data, start="t", end="e" if intervals else None,
                            shape="interval" if intervals else "point",
                            advance=AdvanceTime(every=CTI_EVERY))
    return src.group_apply(bidder, lambda g: g.session_window(GAP_US).aggregate(Count()))


def run(data: Any, intervals: bool = False, runs: int = 3) -> tuple[float, float, int]:
    """The best wall-clock seconds of ``runs`` runs, the CPU seconds of that run (this
    process: the machine is shared, so the CPU time says what the run itself cost), and the
    output messages."""
    q = query(data, intervals)
    q.collect(runtime="inline", columns=True)  # warm-up
    best, cpu = float("inf"), float("inf")
    rows = 0
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        out = q.collect(runtime="inline", columns=True)
        wall, used = time.perf_counter() - t0, time.process_time() - c0
        if wall < best:
            best, cpu = wall, used
        rows = len(out)
    return best, cpu, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--general-events", type=int, default=100_000)
    args = ap.parse_args(argv)
    n = args.events
    fast = query(table(1000))
    assert "keyed session aggregate" in fast.explain(), fast.explain()
    seconds, cpu, messages = run(table(n))
    load = os.getloadavg()[0]
    print(f"keyed column-wise path: {n:,} events, {KEYS:,} keys, gap {GAP_US} µs: "
          f"{seconds:.2f} s wall = {n / seconds:,.0f} events/s inline; {cpu:.2f} s CPU = "
          f"{n / cpu:,.0f} events per CPU second ({messages:,} output messages; load "
          f"average {load:.1f} on {os.cpu_count()} cores)", flush=True)
    g = args.general_events
    seconds, cpu, _ = run(table(g, intervals=True), intervals=True, runs=1)
    print(f"general path (GroupApply of SessionWindowOperator): {g:,} events: "
          f"{g / seconds:,.0f} events/s wall, {g / cpu:,.0f} per CPU second (load "
          f"{os.getloadavg()[0]:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
