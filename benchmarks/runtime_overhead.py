"""The Ray runtime's overhead: the same queries with ``collect(runtime="inline")`` and on Ray.

Every operator of the Ray plan is its own actor, so the ratio measures what batching,
serialization, actor calls and backpressure cost against running the same pure operators in
one process. Inline runs are timed before Ray starts; each Ray query runs once to warm the
actor pool, then is timed (configure, feed, drain and reset of the actors included).

    python benchmarks/runtime_overhead.py                 # 200k events, both queries
    python benchmarks/runtime_overhead.py --events 1000000 --batch-size 8192
    python benchmarks/runtime_overhead.py --source arrow --query interval   # column batches
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from operators.aggregates import Count
from operators.cht import check_equivalent
from operators.events import Cti, Insert, Message
from operators.ingress import AdvanceTime
from topology import Stream


def readings(n: int, cti_every: int) -> list[Message]:
    """Point events ``{"k": meter, "v": value}`` at t = 0, 1, 2, ... with a CTI every
    ``cti_every`` events."""
    out: list[Message] = []
    for i in range(n):
        out.append(Insert(i, i, i + 1, {"k": i % 10, "v": i % 7}))
        if i % cti_every == cti_every - 1:
            out.append(Cti(i + 1))
    out.append(Cti(n + 1))
    return out


def reading_columns(n: int) -> dict[str, np.ndarray]:
    """The same readings as columns ``t``, ``k``, ``v`` (for ``Stream.from_arrow``)."""
    i = np.arange(n, dtype=np.int64)
    return {"t": i, "k": i % 10, "v": i % 7}


QUERIES: dict[str, Callable[[Stream], Stream]] = {
    # three stateless span operators: the runtime's cost dominates
    "span": lambda s: s.where(lambda p: p["v"] != 3).select(lambda p: p["v"]).shift(5),
    # a filter and a stateful window
    "window": lambda s: s.where(lambda p: p["v"] != 3).tumbling_window(100).aggregate(Count()),
    # a window over intervals: each event in one or two windows
    "interval": lambda s: s.where(lambda p: p["v"] != 3).alter_lifetime(duration=50)
    .tumbling_window(100).aggregate(Count()),
}


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``repeat`` runs (seconds) and the output of the last one."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--cti-every", type=int, default=1_000)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--max-in-flight", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; best counts")
    ap.add_argument("--query", choices=sorted(QUERIES), action="append")
    ap.add_argument("--source", choices=("events", "arrow"), default="events",
                    help="messages (from_events) or column batches (from_arrow)")
    args = ap.parse_args()
    names = args.query or sorted(QUERIES)
    msgs = readings(args.events, args.cti_every)
    if args.source == "arrow":
        cols, adv = reading_columns(args.events), AdvanceTime(every=args.cti_every)
        src = Stream.from_arrow(cols, start="t", advance=adv, batch_rows=args.batch_size)
    else:
        src = Stream.from_events(msgs)
    queries = {name: QUERIES[name](src) for name in names}

    # inline first: Ray's start-up (its processes import for seconds) must not share the CPUs
    inline = {name: best_of(args.repeat, lambda q=q: q.collect(runtime="inline",
                                                               batch_size=args.batch_size))
              for name, q in queries.items()}

    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="cedar",
             logging_level="ERROR")
    # one actor per step (collect() fuses stateless steps by default): the hops are measured
    opts = {"batch_size": args.batch_size, "max_in_flight": args.max_in_flight, "fuse": False}
    print(f"{args.events:,} events (+{len(msgs) - args.events:,} CTIs), "
          f"batch {args.batch_size}, {args.max_in_flight} in flight per edge, "
          f"best of {args.repeat}")
    print(f"{'query':<8} {'actors':>6} {'inline ev/s':>13} {'ray ev/s':>13} {'inline/ray':>11}")
    for name, query in queries.items():
        query.collect(**opts)  # warm the actor pool: actor start-up is not the steady state
        t_ray, out_ray = best_of(args.repeat, lambda q=query: q.collect(**opts))
        t_inline, out_inline = inline[name]
        check_equivalent(out_ray, out_inline)
        actors = len(query.plan().stages)
        ev_inline, ev_ray = args.events / t_inline, args.events / t_ray
        print(f"{name:<8} {actors:>6} {ev_inline:>13,.0f} {ev_ray:>13,.0f} "
              f"{ev_inline / ev_ray:>10.1f}x", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
