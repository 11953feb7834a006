"""Where the memory of a long run goes, process by process: ``python -m benchmarks.memory_growth
[--events N] [--chunk ROWS]``.

``benchmarks.run`` reports one figure, the PSS growth of the driver plus every ``ray::`` worker
over the second half of W1 deployed over 30M events. This run repeats it and splits the PSS by
process (the driver, each operator actor by its step, other workers), samples how many column
batches each edge holds in flight (the actors' ``stats()``), and prints the growth of each. A
growth that follows the in-flight batches is backpressure holding data, bounded by
``max_in_flight``; a growth that goes on with nothing in flight is a leak.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from typing import Any

from benchmarks import deps
from benchmarks import workloads as wl
from benchmarks.common import start_ray
from benchmarks.run import MB, cedar_processes


def _labels(query: Any) -> dict[int, str]:
    """pid -> the step of each of the query's operator actors."""
    import ray

    refs = {step: h.__ray_call__.remote(lambda _self: os.getpid())
            for step, h in query.handles.items()}
    return {ray.get(ref): step for step, ref in refs.items()}


def _pss_by_process(labels: dict[int, str]) -> dict[str, float]:
    psutil = deps.psutil()
    out: dict[str, float] = {}
    for p in cedar_processes():
        try:
            info = p.memory_full_info()
        except psutil.Error:
            continue
        name = "driver" if p.pid == os.getpid() else labels.get(p.pid, "other ray:: workers")
        out[name] = out.get(name, 0.0) + getattr(info, "pss", info.rss) / MB
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=30_000_000)
    ap.add_argument("--keys", type=int, default=1_000)
    args = ap.parse_args()
    import ray

    start_ray()
    n = args.events
    progress, outs = [0], [0]
    query = wl.w1(wl.source(wl.table_stream(n, args.keys, seed=6, progress=progress))).deploy(
        f"bench-memgrowth-{os.getpid()}", detached=False)
    labels = _labels(query)
    # (s, events offered, output messages, PSS MB by process, batches in flight)
    samples: list[tuple[float, int, int, dict[str, float], int]] = []
    stop = threading.Event()
    t0 = time.perf_counter()

    def in_flight() -> int:
        try:
            stats = query.stats()
        except Exception:  # noqa: BLE001 - a step finishing while we look
            return -1
        return sum(int(s.get("in_flight", 0) or 0) for s in stats.values()
                   if isinstance(s, dict))

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter() - t0, progress[0], outs[0],
                            _pss_by_process(labels), in_flight()))
            stop.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for _ in query.subscribe(snapshot=False):
            outs[0] += 1
    finally:
        samples.append((time.perf_counter() - t0, progress[0], outs[0],
                        _pss_by_process(labels), 0))
        stop.set()
        sampler.join()
        query.stop()
        ray.shutdown()
    last = samples[-1]
    # benchmarks.run's base: half the output; the other: half the events offered (the
    # generator runs ahead of the processing by every edge's window of batches in flight)
    base = next((s for s in samples if s[2] >= last[2] / 2), samples[0])
    offered = next((s for s in samples if s[1] >= n / 2), samples[0])
    print(f"{n:,} events in {last[0]:.1f} s, load {os.getloadavg()[0]:.1f}; PSS MB by process "
          f"(at half the output, {base[0]:.1f} s, {base[4]} batches in flight → at the end):")
    for name in sorted(set(base[3]) | set(last[3])):
        a, b = base[3].get(name, 0.0), last[3].get(name, 0.0)
        print(f"  {name:40s} {a:8.0f} → {b:8.0f}  ({b - a:+.1f})")
    total = sum(last[3].values()) - sum(base[3].values())
    print(f"  {'total':40s} {sum(base[3].values()):8.0f} → {sum(last[3].values()):8.0f}  "
          f"({total:+.1f})")
    from_offered = sum(last[3].values()) - sum(offered[3].values())
    print(f"  from half the events offered ({offered[0]:.1f} s, {offered[4]} batches in "
          f"flight): {from_offered:+.1f}")
    print("s, events offered, output messages, PSS total MB, batches in flight:")
    for s, offered_n, out_n, by, flying in samples[:: max(1, len(samples) // 20)]:
        print(f"  {s:6.1f} {offered_n:>12,} {out_n:>8,} {sum(by.values()):8.0f} {flying:>4}")
    print(f"RESULT pss_growth_mb={total:.1f} pss_growth_offered_mb={from_offered:.1f} events={n} "
          f"load={os.getloadavg()[0]:.1f}")

if __name__ == "__main__":
    main()
