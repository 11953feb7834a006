"""``cedar demo``'s processing rate, several runs in one process (Spark and Ray started once).

Each run deploys the demo's five queries held (:func:`topology.app.demo.deploy_held`: actors
started and configured, sources opened), starts them together
(:func:`~topology.app.demo.run_held`) and times from the start to the last sink's end, as
``cedar demo`` reports it; start-up is not in the figure. Beside each run it prints the CPU
seconds of every query's actors during the run, and of this driver, so that the queries that
bound the rate are seen. The target (issue #26): >= 200k events/s.

    python -m benchmarks.demo_rate              # 5 runs
    python -m benchmarks.demo_rate --runs 3 --meters 40 --minutes 60
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import psutil

from topology import StepHosts
from topology.app import demo
from topology.running.deploy import ensure_ray

from .join_throughput import machine


def _cpu(pids: dict[str, list[int]]) -> dict[str, float]:
    out = {}
    for name, ps in pids.items():
        total = 0.0
        for pid in ps:
            try:
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        out[name] = total
    return out


def _busy() -> float:
    """CPU seconds the whole machine has spent busy (every process: Ray's own included)."""
    t = psutil.cpu_times()
    return t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--meters", type=int, default=40)
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--fuse", default="chains", help="deploy(fuse=...): chains (the demo's), "
                    "all, none")
    ap.add_argument("--hosts", type=int, default=None, help="deploy(hosts=StepHosts(count=N)): "
                    "the queries' steps in N shared step hosts (default: the demo's, one per "
                    "core and one more; 0: an actor per stage)")
    args = ap.parse_args(argv)
    print(machine())
    data = demo.generate(args.meters, args.minutes)
    with demo._quiet_libraries():
        spark = demo.local_spark(quiet=True)
        ensure_ray(None, quiet=True)
    df = demo.write_readings(spark, data, os.path.join(tempfile.mkdtemp(), "readings.parquet"))
    events = len(data.readings) * 4 + len(data.states)
    rates = []
    for r in range(args.runs):
        topologies = demo.queries(df, data)
        fuse = {"none": False}.get(args.fuse, args.fuse)
        pool = demo.demo_hosts() if args.hosts is None else \
            StepHosts(args.hosts, 16, name="demo-rate") if args.hosts else None
        running, setup = demo.deploy_held(topologies, fuse, hosts=pool)
        try:
            pids = {name: sorted({s["pid"] for s in live.stats().values()})
                    for name, live in running.items()}
            if pool is not None:  # the queries share the hosts' processes
                pids = {"step hosts": sorted({p for ps in pids.values() for p in ps})}
            cpu0, me0, all0 = _cpu(pids), time.process_time(), _busy()
            elapsed = demo.run_held(running, len(data.readings), progress=False)
            cpu, me, machine_cpu = _cpu(pids), time.process_time() - me0, _busy() - all0
        finally:
            for live in running.values():
                live.stop()
            if pool is not None:  # as cedar demo does: each run starts its hosts afresh
                pool.shutdown()
        rates.append(events / elapsed)
        per = ", ".join(f"{k} {cpu[k] - cpu0[k]:.2f}" for k in cpu)
        print(f"run {r + 1}: {events:,} events in {elapsed:.3f} s = {events / elapsed:,.0f} "
              f"events/s; CPU s of the run: {per}, driver {me:.2f}, whole machine "
              f"{machine_cpu:.2f} ({setup.actors} actors); load {os.getloadavg()[0]:.1f}")
    print(f"RESULT demo_eps={statistics.median(rates):.0f} runs={args.runs} "
          f"best_eps={max(rates):.0f} events={events}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
