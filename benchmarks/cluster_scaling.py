"""W1 with 1, 2 and 4 partitions on a real three-node Ray cluster started on this machine.

``ray.cluster_utils.Cluster``: a head node (1 CPU) and two worker nodes (2 CPUs each), each
with its own raylet and object store. W1 (where → select → ``group_apply(key, tumbling 1 s →
count and sum, partitions=k)``) runs with ``collect()``; its actors are dealt over the nodes
(``placement="spread"``, the default), so the partitions of ``group_apply`` land on different
nodes. Reported per k: input events per second, and the CPU seconds each node's processes
(its raylet and the workers it started) used during the run. This machine has 2 cores in all,
so the three "nodes" share them: the curve shows what partitioning costs and where the work
goes, not how a real cluster of bigger nodes would scale.

    python -m benchmarks.cluster_scaling                  # 2M events, k = 1, 2, 4
    python -m benchmarks.cluster_scaling --events 500000 --partitions 1 --partitions 2
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from operators.aggregates import Aggregates, Count, Sum
from topology import Stream

from . import deps  # first: psutil before Ray's vendored copy
from . import workloads as wl

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def w1(src: Stream, partitions: int) -> Stream:
    """W1 (:func:`benchmarks.workloads.w1`) with its group_apply split into partitions."""
    return (src.where(wl.keep).select(wl.project)
            .group_apply(wl.key_of, lambda g: g.tumbling_window(wl.TUMBLE_TICKS, emit="final")
                         .aggregate(Aggregates(count=Count(), sum=Sum(1))),
                         partitions=partitions))


def node_cpu(cluster: Any) -> dict[str, float]:
    """CPU seconds so far of each node's processes: its raylet and every process under it."""
    psutil = deps.psutil()

    out = {}
    for i, node in enumerate([cluster.head_node, *cluster.worker_nodes]):
        total = 0.0
        for info in node.all_processes.get("raylet", []):
            try:
                raylet = psutil.Process(info.process.pid)
                for p in [raylet, *raylet.children(recursive=True)]:
                    t = p.cpu_times()
                    total += t.user + t.system
            except psutil.Error:
                pass
        out["head" if i == 0 else f"worker{i}"] = total
    return out


def start_cluster() -> Any:
    """A head (1 CPU) and two workers (2 CPUs each) on this machine, their workers importing
    this checkout; this process connected to it."""
    import ray
    from ray.cluster_utils import Cluster

    path = os.environ.get("PYTHONPATH", "")
    if REPO not in path.split(os.pathsep):  # the workers import this checkout
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, path) if p)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="cedar", logging_level="ERROR",
             log_to_driver=False)
    return cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, action="append")
    args = ap.parse_args()
    import ray

    cluster = start_cluster()
    cols = wl.points(args.events, 1_000, seed=1)
    try:
        print(f"W1, {args.events:,} events, a head (1 CPU) and two workers (2 CPUs) on 2 cores")
        print("| partitions | events/s | CPU s per node (head, worker1, worker2) |")
        print("|---:|---:|---|")
        for k in args.partitions or [1, 2, 4]:
            w1(wl.source(wl.head(cols, 20_000)), k).collect()  # actors warm
            before = node_cpu(cluster)
            t0 = time.perf_counter()
            w1(wl.source(cols), k).collect()
            seconds = time.perf_counter() - t0
            after = node_cpu(cluster)
            cpu = ", ".join(f"{after[n] - before[n]:.1f}" for n in after)
            print(f"| {k} | {args.events / seconds:,.0f} | {cpu} |", flush=True)
    finally:
        from topology.running.deploy import release_pool

        release_pool()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
