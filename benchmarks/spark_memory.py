"""Driver memory of ``Stream.from_spark`` over a large parquet table, against the input size.

    python -m benchmarks.spark_memory                      # 5M and 20M rows
    python -m benchmarks.spark_memory --sizes 1000000 --modes ranges,collect

For each size, a child process generates the table with Spark (reproducible: every column is
a fixed function of the row number, no randomness), written as 8 parquet files each spanning
the whole time range (row ``i`` is at ``T0 + ((i · 7919) mod n) · 10 µs``: a permutation, so
the table is as unordered as a multi-file table written by many tasks). Then, per mode, a
fresh child process (so that peak figures are its own) runs a W1-like query -- tumbling 1 s
count and sum per key over 1,000 keys (:func:`benchmarks.workloads.w1`), inline -- and drops
the output as it comes, so that only the source's memory can grow with the input:

* ``ranges``: ``Stream.from_spark`` (sorted by time, read range by range, the next range
  prefetched; :mod:`topology.spark.source`);
* ``collect``: the table collected whole with ``toArrow()`` (what the bridge did before),
  sorted with pyarrow, fed through ``Stream.from_arrow`` -- the baseline.

Reported per run: seconds end to end (Spark start-up excluded), events/s, the output
messages, and the peak resident memory (``VmHWM``) of the Python driver and of the driver's
JVM (``spark.driver.memory`` = :data:`DRIVER_MEMORY`; in ``local`` mode the JVM also hosts
the executors, so its figure includes the sort's working memory).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from operators.events import TICKS_PER_SECOND

from . import workloads as wl

#: The JVM heap the driver is allowed (``spark.driver.memory``).
DRIVER_MEMORY = "1g"
FILES = 8
KEYS = 1_000
MODES = ("ranges", "collect")


def session(memory: str = DRIVER_MEMORY) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("cedar-spark-memory")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", memory)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def generate(n: int, path: str) -> None:
    """Write the ``n``-row table to ``path`` (see the module's docstring)."""
    spark = session("2g")
    write_table(spark, n, path)
    spark.stop()


def write_table(spark: Any, n: int, path: str) -> None:
    """The ``n``-row table in :data:`FILES` parquet files at ``path``, each file spanning the
    whole time range (rows in no time order)."""
    from pyspark.sql import functions as F

    step = TICKS_PER_SECOND // wl.EVENT_RATE_EPS
    i = F.col("id")
    (spark.range(0, n, numPartitions=FILES)
     .select(F.timestamp_micros(F.lit(wl.T0_TICKS) + (i * 7919 % n) * step).alias("ts"),
             (i * 104_729 % KEYS).alias("k"),
             ((i * 7_907 % 1_000) / 1_000.0).alias("v"))
     .write.mode("overwrite").parquet(path))


def _hwm_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _jvm_pid() -> int | None:
    """The driver's JVM: the java child process of this one."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/comm", encoding="ascii") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if int(fields[1]) == me and comm == "java":
                return int(entry)
    return None


def run_dropped(query: Any) -> tuple[int, int]:
    """Run ``query`` (one source) inline, its output counted and dropped as it comes, so that
    only the source and the query's state hold memory: (input rows, output messages)."""
    from topology.planning.dag import DagProcessor
    from topology.running.inline import source_batches

    plan = query.plan()
    dag = DagProcessor(plan, inline_sink=True)
    [step] = dag.inputs
    rows = out = 0
    for batch in source_batches(plan, step, 0):
        rows += len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)
        out += len(dag.process(batch))
    out += len(dag.finish())
    return rows, out


def measure(path: str, mode: str) -> dict[str, Any]:
    """Run the W1-like query over the table at ``path`` with the source ``mode``."""
    from topology import Stream

    spark = session()
    df = spark.read.parquet(path)
    t0 = time.perf_counter()
    if mode == "ranges":
        src = Stream.from_spark(df, start="ts", advance=wl.advance())
    else:
        table = df.toArrow().sort_by("ts")
        src = Stream.from_arrow(table, start="ts", advance=wl.advance())
    rows, out = run_dropped(wl.w1(src))
    seconds = time.perf_counter() - t0
    jvm = _jvm_pid()
    result = {"mode": mode, "rows": rows, "seconds": round(seconds, 2),
              "events_per_s": round(rows / seconds), "output_messages": out,
              "python_hwm_mb": round(_hwm_mb(), 1),
              "jvm_hwm_mb": round(_hwm_mb(jvm), 1) if jvm else None}
    spark.stop()
    return result


def _child(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
        + os.environ.get("PYTHONPATH", "").split(os.pathsep)).rstrip(os.pathsep))
    done = subprocess.run([sys.executable, "-m", "benchmarks.spark_memory", *args], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return json.dumps({"args": args, "failed": done.returncode,
                           "stderr": done.stderr[-2000:]})
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="5000000,20000000")
    parser.add_argument("--modes", default="ranges")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("_internal", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._internal[:1] == ["generate"]:
        generate(int(args._internal[1]), args._internal[2])
        print(json.dumps({"generated": args._internal[2]}))
        return
    if args._internal[:1] == ["measure"]:
        print(json.dumps(measure(args._internal[1], args._internal[2])))
        return
    import pyspark

    print(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(),
                      "python": platform.python_version(), "pyspark": pyspark.__version__,
                      "driver_memory": DRIVER_MEMORY}))
    work = tempfile.mkdtemp(prefix="cedar-spark-memory-", dir=args.workdir)
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            path = os.path.join(work, f"t{n}")
            t0 = time.perf_counter()
            print(_child("generate", str(n), path), f"{time.perf_counter() - t0:.1f} s",
                  flush=True)
            for mode in args.modes.split(","):
                if mode not in MODES:
                    raise SystemExit(f"--modes: {mode!r} is not one of {MODES}")
                print(_child("measure", path, mode), flush=True)
            shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
