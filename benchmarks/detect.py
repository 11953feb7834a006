"""``detect("A B+ C")`` over 1,000 keys, inline: the row path against the column path.

The input is N point events in start order, one per tick, each with a key out of
:data:`KEYS` (uniform at random) and a value ``v`` in ``[0, 100)``; ``A`` is ``v < 10``, ``B``
``10 <= v < 90``, ``C`` ``v >= 90`` (predicates of the payload only, which trace column-wise),
``within`` :data:`WITHIN_TICKS`. The events go to one :class:`~operators.detect.Detect` in
``Columns`` batches of :data:`BATCH` rows with a CTI after each (the column path), and as
``Insert`` messages in the same batches (the row path); both outputs must have the same CHT and
the same CTIs. Printed: events/s of each path, the machine's load, and the state size along a
run of a pattern that never completes (``A B+ D``, no row is a ``D``), which stays bounded by
``within`` however long the input.

    python -m benchmarks.detect                   # N = 200,000
    python -m benchmarks.detect --events 1000000
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from operators.cht import to_cht
from operators.columns import Columns
from operators.detect import Detect
from operators.events import Cti, Message

KEYS = 1_000
BATCH = 65_536
#: about 50 rows of a key: each key sees a row every ~1,000 ticks
WITHIN_TICKS = 50_000


def batches(n: int, seed: int = 1) -> list[Columns]:
    rng = np.random.default_rng(seed)
    out = []
    for a in range(0, n, BATCH):
        b = min(n, a + BATCH)
        t = np.arange(a, b, dtype=np.int64)
        out.append(Columns(t, t, None, {"k": rng.integers(0, KEYS, b - a),
                                        "v": rng.integers(0, 100, b - a)}))
    return out


def a(p: Any, m: Any) -> Any:
    return p["v"] < 10


def b(p: Any, m: Any) -> Any:
    return (p["v"] >= 10) & (p["v"] < 90)


def c(p: Any, m: Any) -> Any:
    return p["v"] >= 90


def never(p: Any, m: Any) -> Any:
    return p["v"] < 0


def key(p: Any) -> Any:
    return p["k"]


def detect(pattern: str = "A B+ C", emit: str = "speculative") -> Detect:
    define = {"A": a, "B": b, "C": c, "D": never}
    return Detect(pattern, {s: f for s, f in define.items() if s in pattern},
                  within=WITHIN_TICKS, key=key, emit=emit)


def run(op: Detect, data: list[Columns], rows: bool) -> tuple[float, float, list[Message]]:
    """Feed ``data`` (a CTI after each batch; as inserts when ``rows``): wall seconds, CPU
    seconds of this process (what a shared machine's load does not inflate as much) and the
    output."""
    feed = [(c.inserts() if rows else [c]) + [Cti(int(c.starts[-1]) + 1)] for c in data]
    out: list[Message] = []
    t0, c0 = time.perf_counter(), time.process_time()
    for msgs in feed:
        out.extend(op.process(msgs))
    out.extend(op.finish())
    return time.perf_counter() - t0, time.process_time() - c0, out


def ctis(out: list[Message]) -> list[int]:
    return [m.time for m in out if type(m) is Cti]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--emit", default="speculative", choices=("speculative", "final"))
    args = parser.parse_args(argv)
    n = args.events
    data = batches(n)
    print(f"detect 'A B+ C', {n:,} events over {KEYS:,} keys, batches of {BATCH:,}, "
          f"within {WITHIN_TICKS:,} ticks, emit={args.emit}; load {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs")
    t_rows, cpu_rows, out_rows = run(detect(emit=args.emit), data, rows=True)
    print(f"  row path     {n / t_rows:>12,.0f} events/s  ({t_rows:.2f} s; "
          f"{n / cpu_rows:,.0f} per CPU second)")
    t_cols, cpu_cols = float("inf"), float("inf")
    for _ in range(3):  # best of 3
        wall, cpu, out_cols = run(detect(emit=args.emit), data, rows=False)
        t_cols, cpu_cols = min(t_cols, wall), min(cpu_cols, cpu)
    print(f"  column path  {n / t_cols:>12,.0f} events/s  ({t_cols:.2f} s, best of 3; "
          f"{n / cpu_cols:,.0f} per CPU second)  {t_rows / t_cols:.1f}x")
    same = to_cht(out_rows) == to_cht(out_cols) and ctis(out_rows) == ctis(out_cols)
    print(f"  outputs equal: {same} ({len(to_cht(out_cols)):,} matches)")
    # state bounded by within: a pattern that never completes
    op = detect("A B+ D")
    sizes = []
    for c in batches(max(n, 1_000_000), seed=2):
        op.process([c, Cti(int(c.starts[-1]) + 1)])
        sizes.append(op.state_size())
    print(f"  'A B+ D' (never completes): state after each batch: max {max(sizes):,} rows, "
          f"last {sizes[-1]:,} (bounded by within)")
    if not same:
        raise SystemExit("the row path and the column path disagree")


if __name__ == "__main__":
    main()
