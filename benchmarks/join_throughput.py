"""Join throughput by key cardinality: the pure operator in one process (no Ray).

Both inputs carry ``--events`` short events each (points and intervals of up to 4 ticks, one
per tick, in time order, a random key out of ``K``), with a CTI on each input after every
``--cti-every`` events; the inputs are fed alternately in batches of that size. The figure is
input events (both sides) per second of operator time; the streams are generated beforehand
and frozen out of the garbage collector's way, so only the operator is timed. Also printed:
the output events and the largest ``state_size()`` seen. With ``--columns`` each batch of
inserts arrives as one :class:`~operators.columns.Columns` message (payload columns ``(key,
i)``), as from ``Stream.from_arrow``: the operators' column-wise path.

    python -m benchmarks.join_throughput                       # 200k events per side
    python -m benchmarks.join_throughput --keys 10 --keys 100000 --operator anti_join
    python -m benchmarks.join_throughput --operator left_join --columns
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from importlib.metadata import version

import numpy as np

from operators.anti_join import AntiJoin
from operators.columns import Columns
from operators.events import Cti, Insert, Message
from operators.join import Join
from operators.left_join import LeftJoin
from operators.processor import Processor


def _key(p: tuple[int, int]) -> int:
    return p[0]


OPERATORS: dict[str, Callable[[], Processor]] = {
    "join": lambda: Join(on=(_key, _key)),
    "anti_join": lambda: AntiJoin(on=(_key, _key)),
    "left_join": lambda: LeftJoin(on=(_key, _key)),
}


def side(n: int, keys: int, cti_every: int, seed: int, columns: bool = False
         ) -> list[list[Message]]:
    """One input as batches of ``cti_every`` events, each batch closed by a CTI; with
    ``columns`` the events of a batch are one ``Columns`` message (the same events)."""
    rng = random.Random(seed)
    batches = []
    for b in range(0, n, cti_every):
        batch: list[Message] = [
            Insert(i, i, i + rng.randint(1, 4), (rng.randrange(keys), i))
            for i in range(b, min(b + cti_every, n))
        ]
        if columns:
            batch = [Columns(np.array([m.id for m in batch], dtype=np.int64),  # type: ignore[list-item]
                             np.array([m.start for m in batch], dtype=np.int64),
                             np.array([m.end for m in batch], dtype=np.int64),
                             (np.array([m.payload[0] for m in batch], dtype=np.int64),
                              np.array([m.payload[1] for m in batch], dtype=np.int64)))]
        batch.append(Cti(b + cti_every))
        batches.append(batch)
    return batches


def run(factory: Callable[[], Processor], left: list[list[Message]],
        right: list[list[Message]]) -> tuple[float, int, int]:
    """Seconds, output messages (CTIs excluded) and peak state for one run."""
    op = factory()
    out = peak = 0
    t0 = time.perf_counter()
    for lb, rb in zip(left, right, strict=True):
        for port, batch in ((0, lb), (1, rb)):
            result = op.process(batch, port)
            out += sum(len(m) if type(m) is Columns else 1 for m in result if type(m) is not Cti)
            size = op.state_size()
            peak = max(peak, size)
    return time.perf_counter() - t0, out, peak


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    return (f"{platform.system()} {platform.machine()} ({cpu}), {os.cpu_count()} CPUs; "
            f"Python {platform.python_version()} ({platform.python_implementation()}); "
            f"sortedcontainers {version('sortedcontainers')}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000, help="events per input")
    ap.add_argument("--keys", type=int, action="append",
                    help="key cardinality (repeatable; default 10, 1000, 100000)")
    ap.add_argument("--cti-every", type=int, default=1_000)
    ap.add_argument("--operator", choices=sorted(OPERATORS), default="join")
    ap.add_argument("--repeat", type=int, default=3, help="runs per setting; the best counts")
    ap.add_argument("--columns", action="store_true",
                    help="inserts as one Columns batch per CTI (the column-wise path)")
    args = ap.parse_args(argv)
    cardinalities = args.keys or [10, 1_000, 100_000]

    print(f"{args.operator} throughput, {args.events:,} events per input, CTI every "
          f"{args.cti_every:,} events, {'column batches' if args.columns else 'row inserts'}")
    print(machine())
    print(f"{'keys':>9} {'events/s':>12} {'seconds':>9} {'output':>10} {'peak state':>11}")
    for keys in cardinalities:
        left = side(args.events, keys, args.cti_every, seed=1, columns=args.columns)
        right = side(args.events, keys, args.cti_every, seed=2, columns=args.columns)
        gc.collect()
        gc.freeze()  # the pre-generated input is not the operator's garbage
        best = min(run(OPERATORS[args.operator], left, right) for _ in range(args.repeat))
        gc.unfreeze()
        seconds, out, peak = best
        rate = 2 * args.events / seconds
        print(f"{keys:>9,} {rate:>12,.0f} {seconds:>9.2f} {out:>10,} {peak:>11,}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
