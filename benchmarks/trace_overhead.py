"""What tracing costs: W1 and W3 inline with tracing off, bounded and whole.

Tracing off is one test per batch in each runtime (``trace is None``); this measures it beside
tracing on, bounded (the first ``--limit`` messages per step and direction) and whole (every
message at every step, written as parquet parts). To see that "off" costs nothing, compare
its figures with a checkout from before tracing existed (``benchmarks/RESULTS.md`` quotes one).

    python -m benchmarks.trace_overhead                       # 500k events W1, 40k+40k W3
    python -m benchmarks.trace_overhead --w1 2000000 --runs 5
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from typing import Any

from topology import Stream, Trace

from . import workloads as wl


def best_eps(make: Callable[[], Stream], events: int, runs: int,
             trace: Callable[[str], Any] | None) -> float:
    """The best of ``runs`` inline runs, in input events per second."""
    best = 0.0
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as path:
            q = make()
            t0 = time.perf_counter()
            q.collect(runtime="inline", trace=None if trace is None else trace(path))
            best = max(best, events / (time.perf_counter() - t0))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--w1", type=int, default=500_000, help="W1 events")
    ap.add_argument("--w3", type=int, default=40_000, help="W3 events per side")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (best is reported)")
    ap.add_argument("--limit", type=int, default=1_000,
                    help="messages per step and direction when bounded")
    args = ap.parse_args()
    c1 = wl.points(args.w1, 1_000, seed=1)
    left, right = wl.points(args.w3, 10_000, seed=3), wl.points(args.w3, 10_000, seed=4)
    workloads = {
        "W1": (lambda: wl.w1(wl.source(c1)), args.w1),
        "W3": (lambda: wl.w3(wl.source(left, name="left"), wl.source(right, name="right")),
               2 * args.w3),
    }
    modes: dict[str, Callable[[str], Any] | None] = {
        "off": None,
        f"bounded (limit={args.limit})": lambda p: Trace(p, limit=args.limit),
        "whole": lambda p: Trace(p),
    }
    print("| workload | " + " | ".join(f"tracing {m}" for m in modes) + " |")
    print("|---|" + "---:|" * len(modes))
    for name, (make, events) in workloads.items():
        figures = [best_eps(make, events, args.runs, mode) for mode in modes.values()]
        print(f"| {name} | " + " | ".join(f"{f:,.0f}" for f in figures) + " |", flush=True)


if __name__ == "__main__":
    main()
