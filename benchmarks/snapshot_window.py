"""Snapshot window throughput over overlapping interval events, inline (no Ray).

The input is N interval events, one per tick in time order, each living 1,000 ticks, with a
key out of 10 (round robin) and a float value, and a CTI every 1,000 events (1,000 ticks).
Measured, as input events per second of the whole inline run:

* ``count``: ``snapshot_window().aggregate(Count())`` over all events (1,000 overlap at any
  time, so each event changes the count of ~1,000 windows);
* ``avg by key``: ``group_apply(key, snapshot_window().aggregate(Avg("v")))`` (100 events of a
  key overlap at any time);
* ``shared end``: the same per key, but every event of a key lives to the end of its block of
  1,000 ticks (a Nexmark Q4 auction: each bid lives to the close), so an event only splits the
  window it starts in and joins one window.

    python -m benchmarks.snapshot_window                 # N = 10k, 50k, 200k
    python -m benchmarks.snapshot_window --events 20000  # one size
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from typing import Any

from operators.aggregates import Avg, Count
from operators.events import Cti
from operators.ingress import AdvanceTime
from topology import Stream

from .join_throughput import machine

LIFETIME = 1_000
KEYS = 10
CTI_EVERY = 1_000


def rows(n: int, shared_end: bool = False) -> list[dict[str, Any]]:
    """Event ``i`` starts at ``i`` and lives :data:`LIFETIME` ticks (or, with ``shared_end``,
    to the end of its block of :data:`LIFETIME` ticks, plus its key so ends differ by key)."""
    out = []
    for i in range(n):
        end = (i // LIFETIME + 1) * LIFETIME + i % KEYS if shared_end else i + LIFETIME
        out.append({"k": i % KEYS, "v": float(i % 97) / 4, "s": i, "e": end})
    return out


def key(p: dict[str, Any]) -> Any:
    return p["k"]


def source(data: list[dict[str, Any]]) -> Stream:
    return Stream.from_rows(data, start="s", end="e", shape="interval",
                            advance=AdvanceTime(every=CTI_EVERY))


QUERIES: dict[str, tuple[bool, Callable[[Stream], Stream]]] = {
    "count": (False, lambda s: s.snapshot_window().aggregate(Count())),
    "avg by key": (False, lambda s: s.group_apply(
        key, lambda g: g.snapshot_window().aggregate(Avg("v")))),
    "shared end": (True, lambda s: s.group_apply(
        key, lambda g: g.snapshot_window().aggregate(Avg("v")))),
}


def run(query: Callable[[Stream], Stream], data: list[dict[str, Any]]) -> tuple[float, int]:
    """Seconds and output events (CTIs excluded) of one inline run."""
    t0 = time.perf_counter()
    out = query(source(data)).collect(runtime="inline")
    return time.perf_counter() - t0, sum(1 for m in out if type(m) is not Cti)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, action="append",
                    help="input events (repeatable; default 10k, 50k, 200k)")
    ap.add_argument("--query", choices=sorted(QUERIES), action="append",
                    help="repeatable; default all")
    args = ap.parse_args(argv)
    sizes = args.events or [10_000, 50_000, 200_000]
    names = args.query or list(QUERIES)

    print(f"snapshot windows, inline: lifetimes {LIFETIME:,} ticks, one event per tick, "
          f"{KEYS} keys, a CTI every {CTI_EVERY:,} events")
    print(machine())
    print(f"{'query':<12} {'events':>9} {'events/s':>10} {'seconds':>8} {'output':>11}")
    for name in names:
        shared, query = QUERIES[name]
        for n in sizes:
            data = rows(n, shared)
            gc.collect()
            gc.freeze()  # the pre-generated input is not the query's garbage
            seconds, out = run(query, data)
            gc.unfreeze()
            print(f"{name:<12} {n:>9,} {n / seconds:>10,.0f} {seconds:>8.2f} {out:>11,}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
