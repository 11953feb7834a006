"""Ingestion throughput from Spark against the number of sources (issue 13, item 3).

A parquet table of ``--rows`` point events (the suite's columns ``ts``, ``k``, ``v``; 8 files
whose rows each span the whole time range, as Spark's tasks write them) is read with
``Stream.from_spark(spark.read.parquet(path), start="ts", sources=N)`` for N = 1, 2, 4 into
two cheap queries, inline (``collect(runtime="inline")``) and on Ray (``collect()``): W1
(:func:`benchmarks.workloads.w1`, the keyed window path) and a tumbling 1 s count of all
events (the column-wise window path with one group).

* N = 1: Spark sorts the table (range partitioning) and the driver reads it range by range as
  Arrow; on Ray the driver feeds the one source actor.
* N >= 2: Spark writes the table as N time-sorted parquet files (one Spark job, executors in
  parallel) and a union merges N sources, one per file, column batch by column batch; on Ray
  each source actor reads its own file (``OperatorShell.pull``), inline one process reads them
  round robin.

Each figure is one run end to end (Spark's sort or write included, Spark's and Ray's start-up
excluded, one warm-up run first); events/s = rows / seconds. "again" is a second run of the
same stream: for N >= 2 Spark's files are written by then, so it is cedar's reading and the
query alone (for N = 1 Spark sorts again). The 1-minute load average of the machine is printed
beside each figure, since other work shares its cores.

    python -m benchmarks.spark_ingest --rows 3000000 [--runtime inline|ray|both]
        [--profile DIR]   # also a cProfile of each inline run, in DIR
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from benchmarks import workloads as wl
from benchmarks.spark_memory import session, write_table
from operators.aggregates import Count
from topology import Stream

SOURCES = (1, 2, 4)


def count(src: Stream) -> Stream:
    return src.tumbling_window(wl.TUMBLE_TICKS).aggregate(Count())


QUERIES = {"w1": wl.w1, "count": count}


def run(spark: Any, path: str, sources: int, query: str, runtime: str,
        profile: str | None = None) -> tuple[float, float]:
    """Seconds of a first run end to end, and of a second run of the same stream (for
    N >= 2 the staged files exist by then: cedar's reading and the query alone)."""
    df = spark.read.parquet(path)
    src = Stream.from_spark(df, start="ts", advance=wl.advance(), sources=sources)
    q = QUERIES[query](src)
    times = []
    for again in (False, True):
        prof = None
        if profile and runtime == "inline":
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        t = time.perf_counter()
        out = q.collect(runtime="inline") if runtime == "inline" else q.collect(columns=True)
        times.append(time.perf_counter() - t)
        if prof is not None:
            prof.disable()
            prof.dump_stats(os.path.join(profile, f"{query}-{sources}{'-again' * again}.prof"))
        assert out, "no output"
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--runtime", choices=("inline", "ray", "both"), default="both")
    parser.add_argument("--profile", default=None, help="a folder for cProfile dumps (inline)")
    args = parser.parse_args()
    runtimes = ("inline", "ray") if args.runtime == "both" else (args.runtime,)
    import ray

    if "ray" in runtimes:
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    spark = session("2g")
    with tempfile.TemporaryDirectory(prefix="cedar-ingest-bench-") as tmp:
        path = os.path.join(tmp, "table")
        write_table(spark, args.rows, path)
        run(spark, path, 2, "count", runtimes[-1])  # warm-up: actors, Spark's code paths
        print(f"{'runtime':7} {'query':6} {'sources':>7} {'seconds':>8} {'events/s':>10} "
              f"{'again s':>8} {'again ev/s':>10} {'load':>5}")
        for runtime in runtimes:
            for query in QUERIES:
                for k in SOURCES:
                    first, again = run(spark, path, k, query, runtime, args.profile)
                    print(f"{runtime:7} {query:6} {k:7d} {first:8.2f} {args.rows / first:10,.0f} "
                          f"{again:8.2f} {args.rows / again:10,.0f} "
                          f"{os.getloadavg()[0]:5.1f}", flush=True)
    spark.stop()
    if ray.is_initialized():
        ray.shutdown()


if __name__ == "__main__":
    main()
