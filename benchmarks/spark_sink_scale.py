"""The Spark batch sinks at scale: ``write`` and ``to_spark`` of outputs of millions of rows.

Each measurement runs in its own process (``--one``), so that its peak memory is its own: the
driver's ``VmHWM`` (peak resident set of the Python process) and the JVM's (Spark's driver in
local mode, a child process), both read from ``/proc`` at the end. The output is what
``Stream.write`` / ``Stream.to_spark`` receive from a query on the column path: ``Columns``
batches of 10,000 rows (payload ``{"k": int, "v": float}``, 10 % of the events open to ∞).
"before" is the code of commit 1ce9a84 (``git show``), fed what ``collect()`` returned then:
the same output expanded into ``Insert`` messages; "after" is this tree's, fed the column
batches. ``to_spark`` is timed with a ``count()`` of the DataFrame (it makes Spark read it).
``base MB`` is the driver's resident set once the output is built and Spark is warm: the
sink's own cost is the peak above it.

    python -m benchmarks.spark_sink_scale                 # 1M, 4M, 8M (before: 1M, 4M)
    python -m benchmarks.spark_sink_scale --sizes 100000 --before-sizes 100000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

OLD_COMMIT = "1ce9a84"
BATCH_ROWS = 10_000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM of a process, in MB."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = int(line.split()[1]) // 1024
    return out


def _jvm_pid() -> int | None:
    """Spark's JVM: the java process among this process's descendants."""
    me = str(os.getpid())
    parents: dict[str, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parents[pid] = fields[1]
        except OSError:
            continue
    for pid, _ in parents.items():
        p, depth = pid, 0
        while p in parents and depth < 5:
            p, depth = parents[p], depth + 1
            if p == me:
                try:
                    with open(f"/proc/{pid}/comm", encoding="ascii") as f:
                        if f.read().strip() == "java":
                            return int(pid)
                except OSError:
                    pass
                break
    return None


def output(rows: int, seed: int = 0) -> list[Any]:
    """A query's output on the column path: Columns batches of BATCH_ROWS rows, then a CTI."""
    from operators.columns import Columns
    from operators.events import MAX_TIME, Cti

    rng = np.random.default_rng(seed)
    out: list[Any] = []
    t = 0
    for i in range(0, rows, BATCH_ROWS):
        n = min(BATCH_ROWS, rows - i)
        starts = t + np.sort(rng.integers(0, 1_000_000, n))
        ends = np.where(rng.random(n) < 0.1, MAX_TIME, starts + rng.integers(1, 60_000_000, n))
        out.append(Columns(np.arange(i, i + n), starts, ends,
                           {"k": rng.integers(0, 10_000, n), "v": rng.random(n)}))
        t += 1_000_000
    out.append(Cti(t))
    return out


def _old_module() -> Any:
    """topology/spark/sink.py of OLD_COMMIT, imported under another name."""
    src = subprocess.run(["git", "-C", ROOT, "show", f"{OLD_COMMIT}:topology/spark/sink.py"],
                         check=True, capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(prefix="cedar-old-sink-"), "old_spark_sink.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("old_spark_sink", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one(variant: str, op: str, rows: int, workdir: str) -> dict[str, Any]:
    """One measurement, in this process."""
    from pyspark.sql import SparkSession

    from operators.columns import expand

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if variant == "before":
        sink = _old_module()
        out: list[Any] = list(expand(output(rows)))  # what collect() returned before
    else:
        import topology.spark.sink as sink

        out = output(rows)
    spark = (SparkSession.builder.master("local[2]").appName("sink-scale")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    # warm the JVM (the Arrow reader, the parquet writer), not timed
    sink.write(spark, out[:2], os.path.join(workdir, "warm"), mode="overwrite")
    sink.to_spark(spark, out[:2]).count()
    base = _status()["VmRSS"]
    t0 = time.perf_counter()
    if op == "write":
        sink.write(spark, out, os.path.join(workdir, "out"), mode="overwrite")
        seconds = time.perf_counter() - t0
        n = spark.read.parquet(os.path.join(workdir, "out")).count()  # checked, not timed
    else:
        n = sink.to_spark(spark, out).count()
        seconds = time.perf_counter() - t0
    jvm = _jvm_pid()
    result = {"variant": variant, "op": op, "rows": rows, "seconds": round(seconds, 2),
              "rows_per_s": round(rows / seconds), "driver_base_mb": base,
              "driver_peak_mb": _status()["VmHWM"],
              "jvm_peak_mb": _status(jvm)["VmHWM"] if jvm else None, "counted": n}
    spark.stop()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000000,4000000,8000000")
    ap.add_argument("--before-sizes", default="1000000,4000000")
    ap.add_argument("--ops", default="write,to_spark")
    ap.add_argument("--one", nargs=3, metavar=("VARIANT", "OP", "ROWS"))
    ap.add_argument("--json", help="append each result to this JSON-lines file")
    args = ap.parse_args()
    if args.one:
        workdir = tempfile.mkdtemp(prefix="cedar-sink-scale-")
        try:
            print(json.dumps(one(args.one[0], args.one[1], int(args.one[2]), workdir)))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return
    runs = [("before", op, int(n)) for n in args.before_sizes.split(",") if n
            for op in args.ops.split(",")]
    runs += [("after", op, int(n)) for n in args.sizes.split(",") if n
             for op in args.ops.split(",")]
    print("| code | sink | rows | seconds | rows/s | driver base MB | driver peak MB "
          "| JVM peak MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for variant, op, n in runs:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.spark_sink_scale", "--one",
                               variant, op, str(n)], cwd=ROOT, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = proc.stderr.strip().splitlines()[-3:]
            print(f"| {variant} | {op} | {n:,} | failed: {' / '.join(tail)[:200]} |||||")
            continue
        r = json.loads(lines[-1])
        assert r["counted"] == n, r
        if args.json:
            with open(args.json, "a", encoding="utf-8") as f:
                f.write(json.dumps(r) + "\n")
        print(f"| {variant} | {op} | {n:,} | {r['seconds']:.1f} | {r['rows_per_s']:,} | "
              f"{r['driver_base_mb']:,} | {r['driver_peak_mb']:,} | "
              f"{r['jvm_peak_mb'] or 0:,} |", flush=True)


if __name__ == "__main__":
    main()
