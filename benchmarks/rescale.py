"""What rescaling costs (issue 39, item 4): a group_apply kept by key group, and a rescale.

1. **Throughput.** W1's keyed window (:func:`benchmarks.workloads.w1`: where → select →
   group_apply(key, tumbling 1 s → count and sum), 1,000 keys, Arrow column batches),
   inline, at ``partitions=1`` (no key groups) and at ``partitions=2`` with 8 and the default
   128 key groups (each partition one operator, dealt by key only when rescaled:
   :mod:`operators.key_groups`). Each run's output must have the same CHT. Printed:
   events/s (best of ``--runs``, the variants taking turns) and each one's share of the
   first.
2. **A rescale on Ray** (``--no-ray`` skips it): the same query deployed with checkpoints
   at ``partitions=2, key_groups=32``, rescaled to 4 half-way (``Query.rescale``), then
   back to 2: the seconds each rescale took, in its two steps (``stop(savepoint=)``: the
   cut written and the old query stopped; ``deploy(restore=)``: the state dealt and the new
   query deployed), the savepoint's size, and whether the output of the three runs
   together equals one run's.

    python -m benchmarks.rescale                     # 1M events
    python -m benchmarks.rescale --events 200000 --no-ray
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from benchmarks import workloads as wl
from benchmarks.common import say, start_ray, timed
from operators.cht import check_equivalent, to_cht
from topology import Stream

KEYS = 1_000
#: (partitions, key_groups) of each run
VARIANTS: tuple[tuple[int, int | None], ...] = ((1, None), (2, 8), (2, None))


def query(data: Any, partitions: int, key_groups: int | None, emit: str = "final") -> Stream:
    """W1 with its group_apply at ``partitions`` (kept by ``key_groups`` if given)."""
    return (wl.source(data).where(wl.keep).select(wl.project)
            .group_apply(wl.key_of, lambda g: g.tumbling_window(wl.TUMBLE_TICKS, emit=emit)
                         .aggregate(wl.Aggregates(count=wl.Count(), sum=wl.Sum(1))),
                         partitions=partitions, key_groups=key_groups))


def throughput(events: int, runs: int) -> None:
    cols = wl.points(events, KEYS, seed=1)
    table = wl.arrow_table(cols)
    best: dict[tuple[int, int | None], float] = {}
    first: list[Any] | None = None
    for _ in range(runs):
        for variant in VARIANTS:
            s, out = timed(lambda v=variant: query(table, *v).collect(runtime="inline"))
            best[variant] = min(best.get(variant, s), s)
            if first is None:
                first = out
            else:
                check_equivalent(out, first)
    base = best[VARIANTS[0]]
    say(f"W1 keyed window, {events:,} events of {KEYS:,} keys, inline, best of {runs} (load "
        f"{os.getloadavg()[0]:.1f}):")
    for (partitions, groups), s in best.items():
        what = f"partitions={partitions}" + ("" if groups is None else f", key_groups={groups}")
        say(f"  {what:<28} {events / s:>12,.0f} events/s  {base / s:6.2f} of the first")


def rescale(events: int) -> None:
    import ray

    cols = wl.points(events, KEYS, seed=1)
    rows = wl.rows(cols)
    expected = to_cht(query(rows, 1, None, emit="speculative").collect(runtime="inline"))
    start_ray()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            live = query(_Slow(rows), 2, 32, "speculative").deploy(
                "bench-rescale", checkpoint_dir=os.path.join(tmp, "ckpt"), batch_size=10_000,
                checkpoint_every=4)
            outputs = []
            for i, width in enumerate((4, 2)):
                source = next(s for s in live.steps if s.startswith("from_"))
                while live.stats()[source]["events_in"] < events * (i + 1) // 3:
                    time.sleep(0.01)
                point = os.path.join(tmp, f"savepoint{i}")
                # what Query.rescale does, in its two steps, each timed
                stream, options = live.deployed_as
                wider = stream.with_partitions(width)
                cut, _ = timed(lambda q=live, p=point: q.stop(savepoint=p))
                outputs.append(live.output())
                again = {**options, "restore": point}
                up, live = timed(lambda s=wider, o=again: s.deploy("bench-rescale", **o))
                size = sum(os.path.getsize(os.path.join(point, f)) for f in os.listdir(point))
                say(f"  rescale to {width} partitions: {cut + up:.2f} s (the savepoint cut and "
                    f"the query stopped {cut:.2f} s, deployed from it {up:.2f} s; savepoint "
                    f"{size / 1e6:.1f} MB; load {os.getloadavg()[0]:.1f})")
            assert live.wait(300)
            outputs.append(live.output())
            live.stop()
        got = to_cht([m for out in outputs for m in out])
        equal = sorted(got) == sorted(expected)
        say(f"  the three runs' output together equals one run's: {equal}")
    finally:
        ray.shutdown()


class _Slow:
    """The rows, re-readable, fed at about 200k rows/s so that a rescale falls inside."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __iter__(self) -> Any:
        for i, row in enumerate(self.rows):
            if i % 10_000 == 0:
                time.sleep(0.05)
            yield row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args(argv)
    throughput(args.events, args.runs)
    if not args.no_ray:
        say("a rescale on Ray (W1, key_groups=32, speculative):")
        rescale(args.events)


if __name__ == "__main__":
    main()
