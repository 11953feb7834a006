"""W1 at scale from a multi-file parquet table: cedar from Spark (c) against Spark Structured
Streaming (d) in one run on the same files, with the driver's peak memory for (c).

    python -m benchmarks.spark_w1_scale                          # 200k events: a smoke run
    python -m benchmarks.spark_w1_scale --rows 5000000,20000000  # issue 13's figures

Per size, the parent writes W1's input (:func:`benchmarks.workloads.points`, 1,000 keys)
as :data:`FILES` parquet files, generated chunk by chunk and dealt to the files in a random
order, so that every file spans the whole time range in no order (as a table written by many
tasks is), and the same files plus the sentinel row Spark SSS needs to close its last
windows (:func:`benchmarks.spark_sss.with_sentinel`). Then a fresh child process (its peaks
are its own) starts ``local[2]`` Spark, warms both engines on a small input and runs, ``runs``
times alternating, the faster of each counting:

* first, once, the source alone: ``Stream.from_spark`` → W1 inline, its output counted and
  dropped as it comes (:func:`benchmarks.spark_memory.run_dropped`), so that only the
  source and the query's state may hold memory ((c) holds the whole result for the sink);
* (c) ``spark.read.parquet`` → ``Stream.from_spark`` → W1 inline → ``spark_sink.write``
  (:func:`benchmarks.spark_sss.cedar_from_spark`), timed end to end;
* (d) ``readStream.parquet`` → W1 in Spark → parquet sink (``availableNow``, append).

Their W1 final rows are compared row by row, the last window included
(:func:`benchmarks.spark_sss.compare`; raises when they differ). During (c) a thread samples,
every :data:`SAMPLE_S` s with psutil, the RSS and PSS of the Python driver and of the driver's
JVM (in ``local`` mode the JVM also runs the executors: its figure includes Spark's scan and
sort); ``VmHWM`` (the kernel's peak RSS) is read after (c) as a check on the sampling.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from . import deps  # first: psutil before Ray's vendored copy
from . import workloads as wl

FILES = 8
KEYS = 1_000
SEED = 13
#: The warm-up input (events): code generation, the parquet reader and writer.
WARM_ROWS = 200_000
#: Seconds between two memory samples.
SAMPLE_S = 0.2
#: ``spark.driver.memory``: the 20M-event table (480 MB as Arrow, ~800 MB as Spark rows) is
#: several times what the driver may hold.
DRIVER_MEMORY = "1g"
MB = 1024 * 1024


def write_table(n: int, path: str, files: int = FILES, keys: int = KEYS) -> str:
    """``n`` events of W1's input as ``files`` parquet files under ``path``: chunks of the
    stream (each a row group) dealt to the files in a random order."""
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    chunk = max(1, min(250_000, math.ceil(n / (4 * files))))
    firsts = np.arange(0, n, chunk)
    order = np.random.default_rng(SEED).permutation(len(firsts))
    for f, picks in enumerate(np.array_split(order, files)):
        with pq.ParquetWriter(os.path.join(path, f"part-{f:03d}.parquet"),
                              wl.arrow_table(wl.points(1, keys, SEED)).schema) as out:
            for first in firsts[picks].tolist():
                cols = wl.points(min(chunk, n - first), keys, SEED, first)
                out.write_table(wl.arrow_table(cols), row_group_size=chunk)
    return path


class Sampler:
    """Peak RSS and PSS of processes, sampled in a thread until :meth:`stop`."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        ps = deps.psutil()
        self.procs = {name: ps.Process(pid) for name, pid in pids.items() if pid}
        self.peak: dict[str, dict[str, float]] = {
            name: {"rss_mb": 0.0, "pss_mb": 0.0} for name in self.procs}
        self.base = self.sample()
        self.samples = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()

    def sample(self) -> dict[str, dict[str, float]]:
        now = {}
        for name, proc in self.procs.items():
            info = proc.memory_full_info()
            now[name] = {"rss_mb": info.rss / MB, "pss_mb": info.pss / MB}
            for k, v in now[name].items():
                self.peak[name][k] = max(self.peak[name][k], v)
        return now

    def _run(self) -> None:
        while not self._done.wait(SAMPLE_S):
            self.sample()
            self.samples += 1

    def stop(self) -> dict[str, Any]:
        self._done.set()
        self._thread.join()
        self.sample()
        r = lambda d: {k: round(v, 1) for k, v in d.items()}  # noqa: E731
        return {"samples": self.samples, "base": {n: r(d) for n, d in self.base.items()},
                "peak": {n: r(d) for n, d in self.peak.items()}}


def measure(path: str, sss_path: str, warm: str, warm_sss: str, runs: int) -> dict[str, Any]:
    """(c) and (d) over the table at ``path`` in one Spark session (the child's work)."""
    from operators.cht import to_cht
    from operators.columns import expand
    from topology import Stream

    from . import spark_sss as sp
    from .spark_memory import _hwm_mb, _jvm_pid, run_dropped

    spark = sp.session(DRIVER_MEMORY)
    work = tempfile.mkdtemp(prefix="cedar-w1-scale-out-")
    out_c, out_d = os.path.join(work, "c"), os.path.join(work, "d")
    try:
        sp.cedar_from_spark(spark, wl.w1, [warm], out_c)
        sp.sss(spark, sp.w1_frame, warm_sss, out=out_d)
        rows = spark.read.parquet(path).count()
        cedar_s, sss_s, memory = [], [], []
        jvm = _jvm_pid()
        # the source alone first (its base is the fresh driver's): W1's output counted and
        # dropped, so that only the source and the query's state may grow with the input
        # ((c) holds its whole result for the sink); it also warms the JVM on the large table
        sampler = Sampler({"python": os.getpid(), "jvm": jvm})
        t0 = time.perf_counter()
        source_rows, _ = run_dropped(wl.w1(Stream.from_spark(
            spark.read.parquet(path), start="ts", advance=wl.advance())))
        dropped_s = time.perf_counter() - t0
        dropped = sampler.stop()
        assert source_rows == rows, (source_rows, rows)
        gc.collect()
        out: list[Any] = []
        cpu_c, cpu_d = [], []
        for _ in range(runs):
            out = []  # the last run's output is not held during this one
            sampler = Sampler({"python": os.getpid(), "jvm": jvm})
            before = _cpu(jvm)
            seconds, out = sp.cedar_from_spark(spark, wl.w1, [path], out_c, expanded=False)
            cpu_c.append(_cpu_since(before, jvm))
            memory.append(sampler.stop())
            cedar_s.append(seconds)
            before = _cpu(jvm)
            sss_s.append(sp.sss(spark, sp.w1_frame, sss_path, out=out_d))
            cpu_d.append(_cpu_since(before, jvm))
        hwm = {"python": round(_hwm_mb(), 1), "jvm": round(_hwm_mb(jvm), 1) if jvm else None}
        verdict = sp.compare("W1", to_cht(expand(out)), sp.read_back(out_d))  # raises if unequal
        c, d = min(cedar_s), min(sss_s)
        return {"rows": rows, "c_s": [round(s, 2) for s in cedar_s],
                "d_s": [round(s, 2) for s in sss_s], "c_eps": round(rows / c),
                "d_eps": round(rows / d), "ratio_c_d": round(d / c, 3), "check": verdict,
                "memory": memory[cedar_s.index(c)], "vmhwm_after_runs_mb": hwm,
                "source_only": {"s": round(dropped_s, 2), **dropped},
                "cpu_s": {"c": cpu_c[cedar_s.index(c)], "d": cpu_d[sss_s.index(d)]},
                "load": os.getloadavg()}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _cpu(jvm: int | None) -> tuple[float, float]:
    """CPU seconds (user + sys) so far of this Python process and of the driver's JVM (which
    runs the executors in ``local`` mode)."""
    t = os.times()
    java = 0.0
    if jvm:
        c = deps.psutil().Process(jvm).cpu_times()
        java = c.user + c.system
    return t.user + t.system, java


def _cpu_since(before: tuple[float, float], jvm: int | None) -> dict[str, float]:
    now = _cpu(jvm)
    return {"python": round(now[0] - before[0], 2), "jvm": round(now[1] - before[1], 2)}


def _child(*args: str) -> dict[str, Any]:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in [repo, *os.environ.get("PYTHONPATH", "").split(os.pathsep)] if p))
    done = subprocess.run([sys.executable, "-m", "benchmarks.spark_w1_scale", *args], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the child {args} failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(sizes: list[int], runs: int, workdir: str | None = None) -> list[dict[str, Any]]:
    """Every size's figures, each measured in its own child process."""
    from . import spark_sss as sp

    work = tempfile.mkdtemp(prefix="cedar-w1-scale-", dir=workdir)
    results = []
    try:
        warm = write_table(WARM_ROWS, os.path.join(work, "warm"))
        warm_sss = sp.with_sentinel(warm, os.path.join(work, "warm-sss"))
        for n in sizes:
            t0 = time.perf_counter()
            path = write_table(n, os.path.join(work, f"w1-{n}"))
            sss_path = sp.with_sentinel(path, os.path.join(work, f"w1-{n}-sss"))
            print(f"wrote {n:,} events as {FILES} parquet files "
                  f"({_size_mb(path):.0f} MB) in {time.perf_counter() - t0:.1f} s; "
                  f"load {_load()}", flush=True)
            before = _load()
            result = _child("measure", path, sss_path, warm, warm_sss, str(runs))
            result["load_before"] = before
            print(json.dumps(result), flush=True)
            results.append(result)
            shutil.rmtree(path, ignore_errors=True)
            shutil.rmtree(sss_path, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def _size_mb(path: str) -> float:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)) / MB


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def table(results: list[dict[str, Any]]) -> str:
    """The figures as a markdown table."""
    lines = ["| events | (c) s | (d) s | (c) events/s | (d) events/s | (c)/(d) | "
             "load before → after | run | driver PSS MB base → peak | driver RSS peak MB | "
             "JVM PSS peak MB | JVM RSS peak MB |",
             "|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|"]
    for r in results:
        for what, m in (("(c)", r["memory"]), ("source only", r["source_only"])):
            py, jvm = m["peak"]["python"], m["peak"].get("jvm", {})
            lines.append(
                f"| {r['rows']:,} | {min(r['c_s']):.2f} | {min(r['d_s']):.2f} | "
                f"{r['c_eps']:,} | {r['d_eps']:,} | {r['ratio_c_d']:.3f} | "
                f"{r['load_before'].split()[0]} → {r['load'][0]:.2f} | {what} | "
                f"{m['base']['python']['pss_mb']:.0f} → {py['pss_mb']:.0f} | "
                f"{py['rss_mb']:.0f} | {jvm.get('pss_mb', math.nan):.0f} | "
                f"{jvm.get('rss_mb', math.nan):.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="200000",
                        help="events per size, comma-separated (e.g. 5000000,20000000)")
    parser.add_argument("--runs", type=int, default=1,
                        help="(c) and (d) alternated this many times; the faster counts")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("_internal", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._internal[:1] == ["measure"]:
        path, sss_path, warm, warm_sss, runs = args._internal[1:]
        print(json.dumps(measure(path, sss_path, warm, warm_sss, int(runs))))
        return
    import pyarrow
    import pyspark

    print(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(),
                      "python": platform.python_version(), "pyspark": pyspark.__version__,
                      "pyarrow": pyarrow.__version__, "numpy": np.__version__,
                      "driver_memory": DRIVER_MEMORY, "load": _load()}), flush=True)
    results = run([int(s) for s in args.rows.split(",")], args.runs, args.workdir)
    print(table(results))


if __name__ == "__main__":
    main()
