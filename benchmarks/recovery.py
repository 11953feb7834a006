"""Recovery benchmark: throughput of a window + join query with and without checkpoints, and the
recovery time after one killed operator actor (``python -m benchmarks.recovery [n_events]``)."""

from __future__ import annotations

import sys
import tempfile
import time

import ray

from tests.reliability.test_recovery import window_join
from topology.running.deploy import ensure_ray


def main(n: int = 100_000) -> None:
    ensure_ray()
    rows = []
    for label, opts in (("no checkpoints", {}),
                        ("checkpoint every 4 batches", {"checkpoint_every": 4}),
                        ("checkpoint every batch", {"checkpoint_every": 1})):
        with tempfile.TemporaryDirectory() as d:
            if opts:
                opts = dict(opts, checkpoint_dir=d)
            t0 = time.perf_counter()
            window_join(n).collect(**opts)
            dt = time.perf_counter() - t0
        rows.append((label, n / dt, None))
    with tempfile.TemporaryDirectory() as d:
        live = window_join(n).deploy("bench-recovery", checkpoint_dir=d, detached=False)
        try:
            step = next(s for s in live.steps if s.startswith("join"))
            while live.stats()["from_events#0"]["events_in"] < n // 2:
                time.sleep(0.01)
            t0 = time.perf_counter()
            ray.kill(live.handles[step], no_restart=True)
            live.wait(300)
            dt = time.perf_counter() - t0
            rec = live.recoveries()[0]["recovery_s"]
        finally:
            live.stop()
    rows.append(("kill join at 50 %", None, rec))
    print(f"{'run':32} {'events/s':>10} {'recovery s':>11}")
    for label, rate, rec_s in rows:
        print(f"{label:32} {rate or 0:>10,.0f} {rec_s or 0:>11.2f}")
    print(f"(time from the kill to the end of the run: {dt:.2f} s; n={n})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
