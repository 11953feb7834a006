"""cedar's benchmark suite, side by side with Spark: ``python -m benchmarks.run [--quick]``.

On the same generated data (numpy, written once to parquet with pyarrow) and in the same run:

* **W1** -- N point events over 1,000 keys, disorder up to 2 ms, a CTI every 10,000 events:
  ``where`` (~90 %) → ``select`` → ``group_apply(key, tumbling 1 s → count and sum)``, run
  (a) ``collect(runtime="inline")``, (b) on Ray (``collect()``: the stateless steps run in
  their source's actor),
  (c) cedar (inline) fed from parquet by Spark through ``Stream.from_spark`` and
  written back with ``topology.spark.sink.write``, (d) Spark Structured Streaming's own
  ``groupBy(window, key)`` with a watermark, append mode, ``availableNow``, a parquet sink
  read back and compared with cedar's output (a sentinel row after the end of the input
  raises the watermark past the last window);
* **W2** -- the same with a hopping window (10 s, hop 1 s) and ``TimeWeightedAverage``;
* **W3** -- a temporal join of two streams on 10,000 keys (50 ms lifetimes);
* **latency** -- W1 deployed on Ray, fed by a paced generator at a fixed offered rate;
  per input CTI the wall time it was due at the source, per output CTI the wall time
  ``Query.subscribe()`` saw it (p50/p99); Spark SSS measured the same way at the same rate:
  from an event's due time to the time its window's row is written;
* **memory** -- peak memory (PSS, with RSS beside it) of the driver and every Ray worker
  process, and its growth, over a long W1 run on Ray (sampled every 0.5 s);
* **detect** -- ``detect("A B+ C")`` over 1,000 keys (:mod:`benchmarks.detect`): the column
  path inline, cedar inline and on Ray beside Flink's ``MATCH_RECOGNIZE`` (matches compared),
  and the state rows and RSS along a long run of a pattern that never completes;
* **Nexmark** -- :mod:`benchmarks.nexmark.run`'s queries inline, on Ray, in Spark SSS and
  in Flink, outputs compared (each query over a stream of its own size, at which Flink's net
  runtime is at least 5 s: :data:`benchmarks.nexmark.run.FULL_EVENTS`; 1M in ``--quick``).

Flink (W1-W3 and Nexmark) runs as Nexmark's users run it: Nexmark's published configuration,
one warm ``TableEnvironment``, parallelism 1 and 2 (the better counts); its figure is the
job's net runtime, the wall time beside it (:mod:`benchmarks.flink`).

Its dependencies are the ``bench`` extra: ``pip install -e ".[bench]"`` (psutil is never
taken from the copy Ray vendors: :mod:`benchmarks.deps`).

It writes ``benchmarks/RESULTS.md`` (keeping any text below the ``<!-- analysis -->`` marker)
and prints as its last line ``RESULT inline_eps=... ray_eps=... from_spark_eps=...
spark_sss_eps=... ratio_ray_inline=... ratio_cedar_spark=... p99_ms=... pss_growth_mb=...
join_ray_eps=... join_ratio_spark=... w2_inline_eps=... nexmark_ratio_min=...
flink_ratio_min=... flink_ratio_geomean=... flink_net_min_s=... nexmark_queries=...`` (Flink:
cedar on Ray ÷ Flink in events/s from Flink's net job runtime over W1-W3 and the Nexmark
queries, and the shortest of those net runtimes; :mod:`benchmarks.flink`)
(:func:`result_line`).

    python -m benchmarks.run --quick        # small sizes, Nexmark at 1M
    python -m benchmarks.run                # full sizes (W1 10M events, 30M for memory)
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from operators.cht import check_equivalent, to_cht
from operators.events import Cti

from . import deps  # first: psutil before Ray's vendored copy (see benchmarks.deps)
from . import workloads as wl
from .common import REPO, say, start_ray, timed
from .nexmark.run import FULL_EVENTS, QUICK_EVENTS

RESULTS = os.path.join(REPO, "benchmarks", "RESULTS.md")
MARKER = "<!-- analysis -->"
MB = 1024 * 1024
#: W1's (a) and (b) run this many times after a warm-up run; the fastest counts and the spread
#: is reported (the machine is shared: one run can land on a busy moment).
W1_RUNS = 5


@dataclass
class Sizes:
    """Events per workload."""

    w1: int
    w2: int
    w3: int  # per input stream
    latency_s: float
    rate_eps: int
    memory: int
    keys: int = 1_000
    join_keys: int = 10_000
    nexmark: int = 1_000_000  # events (persons + auctions + bids) of a query not in the next
    #: per query, the events of its stream (None: every query at ``nexmark``)
    nexmark_sizes: dict[str, int] | None = None
    nexmark_delay_us: int = 100  # between two events' times (Nexmark's default)
    #: ``detect("A B+ C")`` (:mod:`benchmarks.detect`): the column path inline and beside
    #: Flink's MATCH_RECOGNIZE (where Flink's net runtime is ~10-20 s), and the events of
    #: the long run of a pattern that never completes (state and RSS)
    detect: int = 1_000_000
    detect_long: int = 10_000_000


#: The memory run has 30M events (10M until 2026-11-26): at ~3M events/s a 10M run lasts
#: ~3 s, of which the pipeline's fill (every edge's window of batches in flight, and each
#: actor's allocator reaching its working size) takes ~2 s, so its "second half" measured the
#: fill, more so under load (129 MB at a load of 5-10). Over 30M the second half starts
#: after the fill (``python -m benchmarks.memory_growth`` prints the PSS and the batches in
#: flight per sample).
#: W1 has 10M events (2M until issue 36), W2 8M (500k until then; at 2M Flink's net runtime
#: was 2.4 s at a load of ~9), W3 2 × 2M (2 × 1M until 2026-11-29: Flink's net runtime was
#: 4.4-8.1 s on a quiet machine) and each Nexmark query its own size
#: (:data:`benchmarks.nexmark.run.FULL_EVENTS`): sizes at which Flink's net job runtime is at
#: least 5 s, so that the ratios to Flink (``flink_ratio_min``, whose figures
#: ``flink_net_min_s`` bounds) measure throughput, not start-up.
FULL = Sizes(w1=10_000_000, w2=8_000_000, w3=2_000_000, latency_s=20.0, rate_eps=50_000,
             memory=30_000_000, nexmark_sizes=dict(FULL_EVENTS))
#: --quick: the memory run is cut to 300k events (not 1M) so that the whole suite stays short;
#: Nexmark runs every query at 1M (the full size before issue 36). W1 has 400k events (100k for its
#: quarter size): at 100k, fixed per-query costs decided cedar-from-Spark ÷ Spark SSS (2.7x
#: where the full run gave 0.93x). At 400k Spark SSS's ~3 s of fixed cost still weighs most
#: of its time, so the report prints both sizes' ratios and the marginal one beside the ratio
#: the RESULT line carries (at W1's size). W2 and W3 keep enough events that their runs last
#: longer than a Spark micro-batch's fixed cost.
QUICK = Sizes(w1=400_000, w2=100_000, w3=50_000, latency_s=2.0, rate_eps=50_000,
              memory=300_000, nexmark=QUICK_EVENTS, detect=200_000, detect_long=1_000_000)


@dataclass
class Report:
    """Every figure of a run, in the order they are measured."""

    sizes: Sizes
    eps: dict[str, dict[str, float]] = field(default_factory=dict)  # workload -> variant -> ev/s
    seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)
    latency: dict[str, Any] = field(default_factory=dict)
    spark_latency: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    load: list[tuple[str, tuple[float, float, float]]] = field(default_factory=list)
    nexmark: Any = None  # benchmarks.nexmark.run.Suite
    spark_checks: list[str] = field(default_factory=list)  # (d)'s output beside cedar's
    by_size: dict[int, Any] = field(default_factory=dict)  # W1 events -> (c) s, (d) s
    #: (workload, variant) -> the seconds of every timed run (W1's (a) and (b))
    runs: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    #: workload -> Flink's net and wall seconds at each parallelism, as a phrase
    flink: dict[str, str] = field(default_factory=dict)
    #: detect's figures (:func:`run_detect`)
    detect: dict[str, Any] = field(default_factory=dict)

    def record(self, workload: str, variant: str, events: int, seconds: float) -> None:
        self.seconds.setdefault(workload, {})[variant] = seconds
        self.eps.setdefault(workload, {})[variant] = events / seconds
        say(f"  {workload} {variant:<12} {events:>10,} events in {seconds:7.2f} s = "
            f"{events / seconds:>11,.0f} events/s")


def best_of(report: Report, name: str, variant: str, fn: Callable[[], Any]) -> tuple[float, Any]:
    """W1's timing: ``fn`` once to warm up (imports, first allocations, the object store's
    first use), then :data:`W1_RUNS` times; the fastest run's seconds, the last output. The
    seconds of every run and the load go to the report's notes."""
    fn()
    times, out = [], None
    for _ in range(W1_RUNS):
        seconds, out = timed(fn)
        times.append(seconds)
    report.runs[(name, variant)] = times
    ordered = sorted(times)
    report.notes.append(
        f"{name} {variant}: best of {W1_RUNS} runs after a warm-up run: "
        f"{', '.join(f'{t:.3f}' for t in ordered)} s (median {ordered[len(ordered) // 2]:.3f} "
        f"s, worst/best {ordered[-1] / ordered[0]:.2f}); load {os.getloadavg()[0]:.2f}")
    return ordered[0], out


# -- the machine ----------------------------------------------------------------------------------
def machine() -> dict[str, str]:
    """nproc, memory, CPU model and the versions of everything measured."""
    info = {"nproc": str(os.cpu_count())}
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
        info["memory"] = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration):
        info["memory"] = "?"
    info["cpu"] = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line for line in f if line.startswith("model name")).split(
                ":", 1)[1].strip()
    except (OSError, StopIteration):
        pass
    info["python"] = platform.python_version()
    for mod in ("ray", "pyspark", "numpy", "pyarrow"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            info[mod] = "not installed"
    try:
        java = subprocess.run(["java", "-version"], check=False, capture_output=True, text=True,
                              timeout=30)
        info["java"] = (java.stderr or java.stdout).splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        info["java"] = "?"
    return info


# -- data -----------------------------------------------------------------------------------------
class Data:
    """The generated tables, as row lists (cedar) and parquet directories (Spark)."""

    def __init__(self, sizes: Sizes, workdir: str) -> None:
        self.w1_cols = wl.points(sizes.w1, sizes.keys, seed=1)
        self.w2_cols = wl.points(sizes.w2, sizes.keys, seed=2)
        self.w1_quarter = wl.head(self.w1_cols, sizes.w1 // 4)
        self.left_cols = wl.points(sizes.w3, sizes.join_keys, seed=3)
        self.right_cols = wl.points(sizes.w3, sizes.join_keys, seed=4)
        self.paths = {name: wl.write_parquet(cols, os.path.join(workdir, name))
                      for name, cols in (("w1", self.w1_cols), ("w1-quarter", self.w1_quarter),
                                         ("w2", self.w2_cols),
                                         ("left", self.left_cols),
                                         ("right", self.right_cols))}
        self.small = wl.write_parquet(wl.points(20_000, sizes.keys, seed=9),
                                      os.path.join(workdir, "warm"))


def queries(data: Data) -> dict[str, Any]:
    """The three workloads as cedar queries over the in-memory columns."""
    return {
        "W1": wl.w1(wl.source(data.w1_cols)),
        "W2": wl.w2(wl.source(data.w2_cols)),
        "W3": wl.w3(wl.source(data.left_cols, name="left"),
                    wl.source(data.right_cols, name="right")),
    }


def events_of(data: Data) -> dict[str, int]:
    return {"W1": len(data.w1_cols["ts"]), "W2": len(data.w2_cols["ts"]),
            "W3": len(data.left_cols["ts"]) + len(data.right_cols["ts"])}


# -- (a) inline -----------------------------------------------------------------------------------
def run_inline(report: Report, data: Data) -> dict[str, list[Any]]:
    say("inline (a)")
    outs = {}
    for name, q in queries(data).items():
        run = functools.partial(q.collect, runtime="inline")
        seconds, out = best_of(report, name, "inline", run) if name == "W1" else timed(run)
        report.record(name, "inline", events_of(data)[name], seconds)
        report.outputs[name] = len(out)
        outs[name] = out
    return outs


# -- (c), (d) Spark -------------------------------------------------------------------------------
def run_spark(report: Report, data: Data, workdir: str, inline_outs: dict[str, list[Any]],
              sizes: Sizes) -> None:
    from . import spark_sss as sp

    say("spark: starting local[2]")
    t0 = time.perf_counter()
    spark = sp.session()
    report.notes.append(f"Spark session start: {time.perf_counter() - t0:.1f} s "
                        f"(not counted); spark.sql.shuffle.partitions="
                        f"{spark.conf.get('spark.sql.shuffle.partitions')}")
    try:
        # Spark SSS reads each input with a sentinel row after its end (its watermark then
        # closes the last windows, as cedar's final CTI does), written to parquet, read back
        def sentinel(path: str) -> str:
            return sp.with_sentinel(path, os.path.join(workdir, "sss-" + os.path.basename(path)))

        out_sss = os.path.join(workdir, "out-sss")
        # warm the JVM (code generation, the parquet reader and writer) on a small file
        sp.sss(spark, sp.w1_frame, sentinel(data.small), out=out_sss)
        sp.cedar_from_spark(spark, wl.w1, [data.small], os.path.join(workdir, "out-warm"))
        say("cedar from Spark (c) and Spark Structured Streaming (d)")
        plans: list[tuple[str, Callable[..., Any], Callable[..., Any], list[str]]] = [
            ("W1", wl.w1, sp.w1_frame, [data.paths["w1"]]),
            ("W2", wl.w2, sp.w2_frame, [data.paths["w2"]]),
            ("W3", wl.w3, sp.w3_frame, [data.paths["left"], data.paths["right"]]),
        ]
        def pair(name: str, query: Callable[..., Any], frame: Callable[..., Any],
                 paths: list[str], expected: list[Any], runs: int) -> tuple[float, float]:
            """(c) and (d) over ``paths``, ``runs`` times alternating; the faster of each.
            (c)'s output must be ``expected``'s CHT and (d)'s rows read back equal it."""
            sss_paths = [sentinel(p) for p in paths]
            cht = to_cht(expected)
            cedar_s, sss_s = [], []
            for _ in range(runs):
                seconds, out = sp.cedar_from_spark(spark, query, paths,
                                                   os.path.join(workdir, f"out-{name}"))
                check_equivalent(out, expected)  # the rows read back: the same CHT
                cedar_s.append(seconds)
                sss_s.append(sp.sss(spark, frame, *sss_paths, out=out_sss))
                verdict = sp.compare(name, cht, sp.read_back(out_sss))  # raises if unequal
            report.spark_checks.append(f"{verdict} at {events(paths):,} events")
            say(f"  Spark SSS output read back: {verdict}")
            if runs > 1:
                report.notes.append(
                    f"{name} ({events(paths):,} events) from Spark (c) / Spark SSS (d), both "
                    f"runs: {', '.join(f'{s:.2f}' for s in cedar_s)} s / "
                    f"{', '.join(f'{s:.2f}' for s in sss_s)} s (the faster counts)")
            return min(cedar_s), min(sss_s)

        def events(paths: list[str]) -> int:
            import pyarrow.parquet as pq

            return sum(pq.ParquetFile(os.path.join(p, "part-0.parquet")).metadata.num_rows
                       for p in paths)

        for name, query, frame, paths in plans:
            n = events_of(data)[name]
            # W1 and W2 run twice each, alternating, and keep the faster run: the first read
            # of a large file pays the JVM's warm-up (parquet reader, code generation); W3's
            # minute-long runs dwarf it and run once
            cedar_s, sss_s = pair(name, query, frame, paths, inline_outs[name],
                                  1 if name == "W3" else 2)
            report.record(name, "from_spark", n, cedar_s)
            report.record(name, "spark_sss", n, sss_s)
            if name == "W1":
                report.by_size[n] = (cedar_s, sss_s)
                # W1 at a quarter of its size too: Spark's fixed costs per query (jobs,
                # micro-batch planning, commits) weigh 4x more there; both ratios are printed,
                # and the marginal one (from the difference of the two sizes) has none
                quarter = len(data.w1_quarter["ts"])
                expected = wl.w1(wl.source(data.w1_quarter)).collect(runtime="inline")
                report.by_size[quarter] = pair(name, query, frame, [data.paths["w1-quarter"]],
                                               expected, 2)
        say(f"spark event-to-output latency at {sizes.rate_eps:,} rows/s")
        report.spark_latency = sp.event_to_output_latency(spark, sizes.rate_eps,
                                                          max(5.0, sizes.latency_s), workdir)
    finally:
        sp.end_session(spark)  # its heap leaves with it: the later parts have the memory


# -- detect ---------------------------------------------------------------------------------------
def run_detect(report: Report, sizes: Sizes, ray: bool, flink: bool) -> None:
    """``detect("A B+ C")`` over 1,000 keys (:mod:`benchmarks.detect`): the column path
    inline (best of 3), cedar inline and on Ray beside Flink's MATCH_RECOGNIZE (one run at
    each parallelism; the matches compared), and the long run of ``A B+ D`` (state rows and
    RSS bounded). Flink missing or failing is a note."""
    from . import detect as bd
    from . import flink as fl

    say(f"detect: the column path at {sizes.detect:,} events")
    wall, cpu, _ = bd.column_path(sizes.detect)
    report.detect.update(column_eps=sizes.detect / wall, column_cpu_eps=sizes.detect / cpu,
                         column_load=os.getloadavg()[0])
    if ray and flink:
        try:
            report.detect["flink"] = bd.beside_flink(sizes.detect, repeat=1)
        except fl.FlinkUnavailable as exc:
            say(f"detect beside Flink: not run: {exc}")
            report.notes.append(f"detect beside Flink not run: {exc}")
    report.detect["long"] = bd.long_run(sizes.detect_long)
    report.detect["long_load"] = os.getloadavg()[0]


# -- Flink ----------------------------------------------------------------------------------------
def run_flink(report: Report, data: Data, workdir: str, inline_outs: dict[str, list[Any]]) -> None:
    """W1-W3 in Flink SQL (:mod:`benchmarks.flink`) over the same rows as CSV, configured as
    Nexmark runs Flink, in one warm environment, after an untimed run of each on a small
    input: at parallelism 1 and 2, the shortest net job runtime counts (the wall time in the
    notes); the rows compared with cedar's. Flink missing or failing is a note, never a
    failure of the run."""
    from . import flink as fl
    from . import spark_sss as sp

    try:
        python = fl.flink_python()
    except fl.FlinkUnavailable as exc:
        say(f"flink: not run: {exc}")
        report.notes.append(f"Flink not run: {exc}")
        return
    say(f"flink: W1-W3 in Flink SQL ({python})")
    def csv(name: str, cols: dict[str, Any]) -> tuple[str, list[list[str]]]:
        folder = os.path.join(workdir, "flink-" + name)
        return folder, fl.write_csv(wl.arrow_table(cols), os.path.join(folder, "part.csv"))

    small = wl.points(20_000, report.sizes.keys, seed=9)
    warm_w3 = [csv("warm-left", wl.head(data.left_cols, 10_000)),
               csv("warm-right", wl.head(data.right_cols, 10_000))]
    jobs = fl.workload_jobs({"W1": [csv("w1", data.w1_cols)], "W2": [csv("w2", data.w2_cols)],
                             "W3": [csv("left", data.left_cols),
                                    csv("right", data.right_cols)]}, workdir,
                            warm={"W1": [csv("warm", small)], "W2": [csv("warm", small)],
                                  "W3": warm_w3})
    try:
        result = fl.run_jobs(jobs, python)
    except fl.FlinkUnavailable as exc:
        say(f"flink: failed: {exc}")
        report.notes.append(f"Flink failed: {exc}")
        return
    report.notes.append(
        f"Flink: JVM start-up {result.startup_s:.1f} s (not counted); one warm "
        f"TableEnvironment, Nexmark's configuration ("
        + ", ".join(f"`{k}: {v}`" for k, v in result.conf.items())
        + f"); parallelism {' and '.join(map(str, fl.PARALLELISMS))}, "
        f"{jobs[0].repeat} run(s) each into blackhole after an untimed run on a small input; "
        "the shortest net job runtime counts")
    for name in ("W1", "W2", "W3"):
        if name in result.errors:
            report.notes.append(f"Flink {name} failed: {result.errors[name]}")
            continue
        report.record(name, "flink", events_of(data)[name], result.seconds[name])
        report.flink[name] = result.describe(name)
        report.notes.append(f"Flink {name} (net / wall s): {result.describe(name)}")
        try:
            verdict = sp.compare(name, to_cht(inline_outs[name]), result.rows(name))
        except AssertionError as exc:
            verdict = f"{name}: Flink's output DIFFERS: {exc}"
        report.spark_checks.append(f"Flink {verdict}")
        say(f"  Flink output: {verdict}")


# -- (b) Ray --------------------------------------------------------------------------------------
def run_ray(report: Report, data: Data, inline_outs: dict[str, list[Any]]) -> None:
    say("ray (b): collect() defaults")
    warm = {"W1": wl.w1(wl.source(wl.head(data.w1_cols, 20_000))),
            "W2": wl.w2(wl.source(wl.head(data.w2_cols, 5_000))),
            "W3": wl.w3(wl.source(wl.head(data.left_cols, 10_000)),
                        wl.source(wl.head(data.right_cols, 10_000)))}
    for name, q in queries(data).items():
        warm[name].collect()  # actors started and their imports done: not the steady state
        seconds, out = best_of(report, name, "ray", q.collect) if name == "W1" else timed(
            q.collect)
        report.record(name, "ray", events_of(data)[name], seconds)
        check_equivalent(out, inline_outs[name])


# -- latency --------------------------------------------------------------------------------------
class Paced:
    """Events offered at ``rate_eps`` per second of wall time, handed over as Arrow tables
    every ``tick_s`` (what a collector polling a message queue does): each table holds the
    events whose due time has passed. For every event that makes the source emit a CTI
    (every ``every``-th, the Ingress rule) it records the CTI's time, the wall time
    the event was due (``due``) and the wall time its table was handed over (``sent``, later
    than ``due`` by up to ``tick_s``, more when backpressure holds the generator back)."""

    def __init__(self, cols: dict[str, Any], rate_eps: int, tick_s: float = 0.005,
                 every: int = wl.CTI_EVERY) -> None:
        self.cols, self.rate, self.tick, self.every = cols, rate_eps, tick_s, every
        self.ctis: list[tuple[int, float, float]] = []  # (cti time, due, sent)
        self.first = self.last = 0.0  # wall times of the first and the last table handed over

    def __iter__(self) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        n = len(self.cols["ts"])
        latest = np.maximum.accumulate(self.cols["ts"])
        every, delay = self.every, wl.JITTER_TICKS
        t0 = self.first = time.perf_counter()
        done = 0
        while done < n:
            now = time.perf_counter()
            due = min(n, int((now - t0) * self.rate) + 1)
            if due <= done:
                time.sleep(self.tick)
                continue
            for i in range(done + every - 1 - done % every, due, every):  # CTI-making events
                self.ctis.append((int(latest[i]) - delay, t0 + i / self.rate, now))
            yield pa.table({k: v[done:due] for k, v in self.cols.items()})
            self.last = now
            done = due
            time.sleep(max(0.0, self.tick - (time.perf_counter() - now)))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    i = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[i]


def run_latency(report: Report, sizes: Sizes, **deploy: Any) -> None:
    """W1 deployed on Ray over a paced source. An output CTI ``T`` of the tumbling 1 s window
    is caused by the first input CTI ``c >= T`` (the window operator's output CTI is the
    start of the window holding ``c``); the data's event time advances one window per CTI
    (a CTI every :data:`~benchmarks.workloads.LATENCY_CTI_EVERY` events, as many per
    event-time second), so every input CTI moves the output CTI: 1,000 samples in 20 s at
    50,000 events/s. W1's keys are cut in the same proportion (1,000 → 100), so that a window
    holds as many events per key and emits as many rows per input event as in the throughput
    runs."""
    n = int(sizes.rate_eps * sizes.latency_s)
    every = wl.LATENCY_CTI_EVERY
    keys = max(1, sizes.keys * every // wl.CTI_EVERY)
    paced = Paced(wl.points(n, keys, seed=5, rate_eps=every), sizes.rate_eps, every=every)
    say(f"latency: {n:,} events offered at {sizes.rate_eps:,} events/s on Ray")
    query = wl.w1(wl.source(wl.Columnar(paced), every=every)).deploy(
        f"bench-latency-{os.getpid()}", detached=False, **deploy)
    seen: list[tuple[int, float]] = []
    t_start = time.perf_counter()
    try:
        for msg in query.subscribe(snapshot=False):
            if type(msg) is Cti:
                seen.append((msg.time, time.perf_counter()))
    finally:
        query.stop()
    elapsed = time.perf_counter() - t_start
    ctis = paced.ctis
    lat_due, lat_sent = [], []
    j = 0
    for t_out, wall in seen:
        while j < len(ctis) and ctis[j][0] < t_out:
            j += 1
        if j == len(ctis):
            break  # the final CTI of the end of input: no input CTI caused it
        lat_due.append((wall - ctis[j][1]) * 1000)
        lat_sent.append((wall - ctis[j][2]) * 1000)
    offered = n / max(1e-9, paced.last - paced.first)
    report.latency = {
        "events": n, "rate_eps": sizes.rate_eps, "samples": len(lat_due),
        "p50_ms": percentile(lat_due, 50), "p99_ms": percentile(lat_due, 99),
        "p50_sent_ms": percentile(lat_sent, 50), "p99_sent_ms": percentile(lat_sent, 99),
        "max_ms": max(lat_due, default=float("nan")), "elapsed_s": elapsed,
        "achieved_eps": offered,
    }
    say(f"  cedar CTI latency p50 {report.latency['p50_ms']:.0f} ms, p99 "
        f"{report.latency['p99_ms']:.0f} ms over {len(lat_due)} CTIs (from the time each CTI "
        f"was due; from when it was handed over: p99 {report.latency['p99_sent_ms']:.0f} ms)")


# -- memory ---------------------------------------------------------------------------------------
def cedar_processes() -> list[Any]:
    """This driver and every Ray worker process it started (``ray::...``: the actors)."""
    psutil = deps.psutil()

    me = psutil.Process()
    procs = [me]
    for p in me.children(recursive=True):
        try:
            if p.cmdline()[:1] and p.cmdline()[0].startswith("ray::"):
                procs.append(p)
        except psutil.Error:
            pass
    return procs


def pss_mb() -> tuple[float, int, float]:
    """Total PSS (MB) of :func:`cedar_processes`, how many there are, and their total RSS.

    PSS (proportional set size) divides each shared page among the processes that map it, so
    the sum is the physical memory they use. RSS counts a shared page once per process: the
    column batches crossing Ray's shared-memory object store are mapped by the sender and the
    receiver, and the pages of the store's arena that the run has touched stay resident, so
    summed RSS counts transport buffers several times over."""
    psutil = deps.psutil()

    total, count, rss = 0, 0, 0
    for p in cedar_processes():
        try:
            info = p.memory_full_info()
            total += getattr(info, "pss", info.rss)
            rss += info.rss
            count += 1
        except psutil.Error:
            pass
    return total / MB, count, rss / MB


def run_memory(report: Report, sizes: Sizes) -> None:
    """W1 deployed on Ray over ``sizes.memory`` generated events (chunk by chunk, never the
    whole table in memory); the output is consumed and dropped. Memory (PSS, and RSS beside
    it: see :func:`pss_mb`) is sampled every 0.5 s; growth = the last sample − the first
    sample once half the output has arrived: over the second half of the *processing* (actors
    warm, groups and windows populated, every edge's bounded window of batches in flight
    filled). The generator runs ahead of the processing by that window (up to 8 column
    batches of 256k events per edge), so the sample at half the events *offered* still sees
    the pipeline filling: at 3M events/s, 10M events were a 3 s run of which the first half
    of the offering is mostly filling. Both figures are reported; the RESULT line takes the
    first."""
    from topology.running.deploy import release_pool

    release_pool()  # the idle actors of collect() are not part of this query
    time.sleep(1.0)
    n = sizes.memory
    progress, out = [0], [0]
    say(f"memory: W1 over {n:,} events on Ray")
    query = wl.w1(wl.source(wl.table_stream(n, sizes.keys, seed=6, progress=progress))).deploy(
        f"bench-memory-{os.getpid()}", detached=False)
    # (s, events offered, output messages, PSS MB, processes, RSS MB)
    samples: list[tuple[float, int, int, float, int, float]] = []
    stop = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        while not stop.is_set():
            mb, count, rss = pss_mb()
            samples.append((time.perf_counter() - t0, progress[0], out[0], mb, count, rss))
            stop.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for _ in query.subscribe(snapshot=False):
            out[0] += 1
    finally:
        mb, count, rss = pss_mb()
        samples.append((time.perf_counter() - t0, progress[0], out[0], mb, count, rss))
        stop.set()
        sampler.join()
        query.stop()
    elapsed = time.perf_counter() - t0
    last = samples[-1]
    base = next((s for s in samples if s[2] >= last[2] / 2), samples[0])
    offered = next((s for s in samples if s[1] >= n / 2), samples[0])
    report.memory = {
        "events": n, "seconds": elapsed, "eps": n / elapsed, "outputs": out[0],
        "peak_mb": max(s[3] for s in samples), "base_mb": base[3], "last_mb": last[3],
        "pss_growth_mb": last[3] - base[3], "processes": last[4], "samples": samples,
        "rss_growth_mb": last[5] - base[5], "rss_peak_mb": max(s[5] for s in samples),
        "pss_growth_offered_mb": last[3] - offered[3],
    }
    say(f"  PSS {base[3]:.0f} MB at half the output → {last[3]:.0f} MB at the end (peak "
        f"{report.memory['peak_mb']:.0f} MB, {last[4]} processes), {n / elapsed:,.0f} "
        f"events/s")


# -- Nexmark -------------------------------------------------------------------------------------
def run_nexmark(report: Report, sizes: Sizes, ray: bool, spark: bool, flink: bool = True) -> None:
    """The Nexmark suite (:mod:`benchmarks.nexmark.run`): every query inline, on Ray and in
    Spark SSS, outputs compared, in a process of its own (its tables, expected rows, Ray
    instance and Spark session leave with it)."""
    from .nexmark import queries as nq
    from .nexmark.run import measure_apart

    say(f"nexmark: {sizes.nexmark_delay_us} µs apart; events per query: " + (
        ", ".join(f"{q} {sizes.nexmark_sizes.get(q, sizes.nexmark):,}" for q in nq.DEFAULT)
        if sizes.nexmark_sizes else f"{sizes.nexmark:,}"))
    report.nexmark = measure_apart(sizes.nexmark, sizes.nexmark_delay_us, nq.DEFAULT,
                                   sizes=sizes.nexmark_sizes,
                                   ray=ray, spark=spark, flink=flink)
    report.notes.extend(report.nexmark.notes)


# -- the report -----------------------------------------------------------------------------------
def fmt(x: float, digits: int = 0) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x:,.{digits}f}"


def nexmark_ratio_min(report: Report) -> float:
    """The smallest cedar-on-Ray ÷ Spark SSS ratio (events/s) over the Nexmark queries."""
    ratios = report.nexmark.ratios() if report.nexmark is not None else {}
    return min(ratios.values(), default=float("nan"))


def flink_ratios(report: Report) -> list[float]:
    """cedar on Ray ÷ Flink (events/s; Flink's net job runtime) of every workload and Nexmark
    query both ran."""
    ratios = [r["ray"] / r["flink"] for r in report.eps.values() if r.get("ray") and r.get("flink")]
    if report.nexmark is not None:
        ratios += list(report.nexmark.ratios("flink").values())
    return ratios


def flink_net_min(report: Report) -> float:
    """The shortest Flink net job runtime (s) among the figures :func:`flink_ratios` takes: a
    workload or query cedar on Ray ran too (nan if none)."""
    nets = [report.seconds[w]["flink"] for w, r in report.eps.items()
            if r.get("ray") and r.get("flink")]
    if report.nexmark is not None:
        nets += [r["flink"] for r in report.nexmark.rows.values() if r.get("ray") and
                 r.get("flink")]
    return min(nets, default=float("nan"))


def result_line(report: Report) -> str:
    """The run in one line: W1's figures (inline, Ray, cedar from Spark, Spark SSS), its
    ratios, p99 latency and memory growth (PSS), then W3 on Ray and its ratio to Spark SSS, W2
    inline and the smallest cedar-on-Ray ÷ Spark ratio over the Nexmark queries. A figure not
    measured is ``nan``; ``--quick`` prints the same keys."""
    nan = float("nan")
    w1, w2, w3 = (report.eps.get(w, {}) for w in ("W1", "W2", "W3"))
    inline, ray_ = w1.get("inline", nan), w1.get("ray", nan)
    spark_c, sss = w1.get("from_spark", nan), w1.get("spark_sss", nan)
    join_ray = w3.get("ray", nan)
    flink = flink_ratios(report)
    geomean = math.exp(sum(map(math.log, flink)) / len(flink)) if flink else nan
    nexmark_queries = (sum(1 for r in report.nexmark.rows.values() if r.get("ray") or
                           r.get("inline")) if report.nexmark is not None else 0)
    return (f"RESULT inline_eps={inline:.0f} ray_eps={ray_:.0f} from_spark_eps={spark_c:.0f} "
            f"spark_sss_eps={sss:.0f} ratio_ray_inline={ray_ / inline:.3f} "
            f"ratio_cedar_spark={spark_c / sss:.3f} "
            f"p99_ms={report.latency.get('p99_ms', nan):.1f} "
            f"pss_growth_mb={report.memory.get('pss_growth_mb', nan):.1f} "
            f"join_ray_eps={join_ray:.0f} "
            f"join_ratio_spark={join_ray / w3.get('spark_sss', nan):.3f} "
            f"w2_inline_eps={w2.get('inline', nan):.0f} "
            f"nexmark_ratio_min={nexmark_ratio_min(report):.3f} "
            f"flink_ratio_min={min(flink, default=nan):.3f} "
            f"flink_ratio_geomean={geomean:.3f} "
            f"flink_net_min_s={flink_net_min(report):.2f} "
            f"nexmark_queries={nexmark_queries}")


def marginal(n1: int, t1: float, n2: int, t2: float) -> float:
    """Events per second between two runs of ``n1`` and ``n2`` events (``t1``, ``t2`` s): the
    rate with the runs' common fixed cost taken out (nan when the larger run was not slower)."""
    return (n2 - n1) / (t2 - t1) if t2 > t1 else float("nan")


def render(report: Report, info: dict[str, str], command: str, total_s: float) -> str:
    s = report.sizes
    lines = [
        "# cedar benchmark results",
        "",
        (f"Generated by `{command}` in {total_s:.0f} s of wall time "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})."),
        "",
        "## Machine",
        "",
        "| | |", "|---|---|",
        *(f"| {k} | {v} |" for k, v in info.items()),
        *(f"| load average ({when}) | {a:.2f} {b:.2f} {c:.2f} |"
          for when, (a, b, c) in report.load),
        "",
        ("The load averages show how busy the machine was: other engineers' test suites may "
        "share its 2 cores, so absolute figures are noisy; ratios measured in one run hold "
        "better."),
        "",
        "## Throughput (input events per second)",
        "",
        (f"Sizes: W1 {s.w1:,} events over {s.keys:,} keys; W2 {s.w2:,} events; W3 "
        f"2 × {s.w3:,} events over {s.join_keys:,} keys. Disorder up to "
        f"{wl.JITTER_TICKS} µs, `AdvanceTime(every={wl.CTI_EVERY:,}, delay={wl.JITTER_TICKS})`, "
        f"Spark watermark the same 2 ms, `spark.sql.shuffle.partitions=2`."),
        "",
        ("| workload | (a) inline | (b) Ray | (c) cedar from Spark | (d) Spark SSS | b/a | c/d |"
        " (f) Flink (net) | b/f | cedar output messages |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    nan = float("nan")
    for name, desc in (("W1", "tumbling 1 s, count + sum"),
                       ("W2", "hopping 10 s / 1 s, time-weighted avg"),
                       ("W3", "join, 50 ms lifetimes")):
        e = report.eps.get(name, {})
        a, b, c, d, f = (e.get(k, nan)
                         for k in ("inline", "ray", "from_spark", "spark_sss", "flink"))
        lines.append(f"| {name}: {desc} | {fmt(a)} | {fmt(b)} | {fmt(c)} | {fmt(d)} | "
                     f"{fmt(b / a, 2)} | {fmt(c / d, 3)} | {fmt(f)} | {fmt(b / f, 2)} | "
                     f"{report.outputs.get(name, 0):,} |")
    lines += [
        "",
        ("(a) `collect(runtime=\"inline\")`; (b) `collect()` on Ray with its defaults: the "
        "stateless steps run in their source's actor and the driver fetches the last "
        "operator's output (2 actors for W1/W2: the source with `where` and `select`, the "
        "keyed window), actors at nice 0 like (a); sources `Stream.from_arrow` over the "
        "generated columns (column batches of 256k rows), 8 batches in flight, after a "
        "warm-up query (actor start not timed); W1's (a) and (b): the best of "
        f"{W1_RUNS} runs after a warm-up run (every run in the notes); "
        "(c) `spark.read.parquet` → `Stream.from_spark` (Arrow column batches) → the same "
        "query inline → `topology.spark.sink.write` (parquet), timed end to end; "
        "(d) `readStream.parquet` → `withWatermark` → `groupBy(window, k)` (W3: a "
        "time-bounded stream-stream join) → append mode, `trigger(availableNow=True)` → a "
        "parquet sink, timed end to end like (c); its input ends with a sentinel row 60 s "
        "after the last event (key −1, left out of the comparison) whose watermark closes "
        "the last windows, as cedar's final CTI does. W1 computes both aggregates as "
        "`Aggregates(count=Count(), sum=Sum(1))` (one "
        "window per key, one row with both fields). W1 and W2 run as one keyed window "
        "aggregate (`explain()` says so); W3's join matches column batches at once. Outputs "
        "of (a), (b) and (c) are checked equivalent (same CHT); (d)'s rows are read back and "
        "compared with (a)'s: W1 and W2 window by window (floats to 1e-9 relative: the "
        "engines add in different orders), W3 as multisets of (lifetime, key, values), "
        "Spark's lifetime being the overlap of the two events'. (f) Flink SQL on a local "
        "MiniCluster (PyFlink, `benchmarks/flink.py`) over the same rows as CSV, configured "
        "as Nexmark runs Flink (object reuse, mini-batch 2 s / 50,000 rows, split distinct "
        "aggregation, heap state), one warm `TableEnvironment` for every run, each query "
        "first run once untimed on a small input, then once at parallelism 1 and once at "
        "parallelism 2 into `blackhole`: the shortest **net job runtime** counts "
        "(`JobExecutionResult.getNetRuntime`: without the plan's compilation and the local "
        "cluster's start), the wall time from submission to the end beside it in the notes; "
        "the JVM's start apart; its rows are collected and compared with (a)'s the same "
        "way. Spark SSS expresses all "
        "three; W2's time-weighted average of points is `sum(v) / window length`."),
        "",
        *(f"- (d) read back: {c}" for c in report.spark_checks),
        *([""] if report.spark_checks else []),
    ]
    if len(report.by_size) == 2:
        (n1, (c1, d1)), (n2, (c2, d2)) = sorted(report.by_size.items())
        lines += [
            ("cedar from Spark (c) ÷ Spark SSS (d) on W1 at two sizes: each query pays fixed "
            "costs (Spark jobs, micro-batch planning and commits, the session's warm JVM "
            "aside), which decide the ratio of small runs. The marginal rates, (n₂ − n₁) / "
            "(t₂ − t₁), leave them out."),
            "",
            "| W1 events | (c) events/s | (d) events/s | c/d |",
            "|---:|---:|---:|---:|",
            *(f"| {n:,} | {fmt(n / c)} | {fmt(n / d)} | {fmt(d / c, 3)} |"
              for n, c, d in ((n1, c1, d1), (n2, c2, d2))),
            (f"| marginal, {n1:,} → {n2:,} | {fmt(marginal(n1, c1, n2, c2))} | "
            f"{fmt(marginal(n1, d1, n2, d2))} | "
            f"{fmt(marginal(n1, c1, n2, c2) / marginal(n1, d1, n2, d2), 3)} |"),
            "",
        ]
    lat, sl = report.latency, report.spark_latency
    if lat or sl:
        lines += ["## Latency", ""]
    if lat:
        lines += [
            (f"cedar: W1 deployed on Ray (`deploy(fuse=\"chains\")`: the source, `where`, "
            f"`select` and the window in one actor, as `collect()` runs them by default and "
            f"as Flink chains its operators; `deploy()`'s own default is one actor per step), "
            f"fed by "
            f"`Stream.from_arrow` over a generator that "
            f"hands over, every 5 ms, the events due by then (a collector polling a queue) to "
            f"offer {lat['rate_eps']:,} events/s ({lat['events']:,} events). Event time "
            f"advances one 1 s window per {wl.LATENCY_CTI_EVERY:,} events, a CTI each, so every "
            f"input CTI moves the output CTI; keys are cut in the same proportion (100), so a "
            f"window emits as many rows per input event as in the throughput runs. Per input "
            f"CTI the generator records the wall time its triggering event "
            f"was due (the offered schedule) and handed over; `Query.subscribe()` records the "
            f"wall time each output CTI arrives; an output CTI T is matched to the first input "
            f"CTI ≥ T. Latency from the due time includes any queueing caused by the query "
            f"falling behind the offered rate (backpressure holds the generator back)."),
            "",
        ]
    if sl:
        lines += [
            (f"Spark SSS, measured the same way: W1's aggregate over the `rate` source at "
            f"{s.rate_eps:,} rows/s, each row stamped with the wall time it is due; event time "
            f"advances one 1 s window per {wl.LATENCY_CTI_EVERY:,} rows over {sl['keys']} keys "
            f"(as cedar's run); processing-time trigger {sl['trigger']}; a `foreachBatch` sink "
            f"takes each micro-batch as Arrow, writes it to parquet and records the wall time. "
            f"Per window: from the due time of the event that closes it (the first event past "
            f"its end + the 2 ms watermark delay) to the time its rows are written "
            f"({sl['rows']:,} rows in {sl['batches']} micro-batches; windows of the first one, "
            f"query start-up, left out). A row waits for its micro-batch to start (up to one "
            f"trigger interval), then for the watermark to pass its window."),
            "",
        ]
    if lat or sl:
        lines += ["| | p50 ms | p99 ms | max ms | samples |", "|---|---:|---:|---:|---:|"]
    if lat:
        lines += [
            (f"| cedar on Ray, CTI in → CTI out (from due time) | {fmt(lat['p50_ms'])} | "
            f"{fmt(lat['p99_ms'])} | {fmt(lat['max_ms'])} | {lat['samples']} |"),
            (f"| cedar on Ray, from hand-over time | {fmt(lat['p50_sent_ms'])} | "
            f"{fmt(lat['p99_sent_ms'])} | | |"),
        ]
    if sl:
        d = sl["latencies_ms"]
        lines.append(f"| Spark SSS, event due → its window's row written | "
                     f"{fmt(percentile(d, 50))} | {fmt(percentile(d, 99))} | "
                     f"{fmt(max(d, default=nan))} | {len(d)} |")
    if lat:
        lines += [
            "",
            (f"The whole cedar latency run took {lat['elapsed_s']:.1f} s for "
            f"{lat['events']:,} events (due over {lat['events'] / lat['rate_eps']:.1f} s; the "
            f"generator achieved {lat['achieved_eps']:,.0f} events/s under backpressure)."),
        ]
    if lat or sl:
        lines.append("")
    mem = report.memory
    if mem:
        lines += [
            "## Memory",
            "",
            (f"W1 deployed on Ray over {mem['events']:,} generated events (generated chunk by "
            f"chunk; the {mem['outputs']:,} output messages consumed and dropped), "
            f"{mem['eps']:,.0f} events/s. Memory of the driver plus every `ray::` worker "
            f"process of this Ray instance ({mem['processes']} processes; Ray's own daemons "
            f"not counted), sampled every 0.5 s with psutil: PSS (shared pages divided among "
            f"their sharers; the sum is the physical memory used) and, beside it, summed RSS "
            f"(which counts every page of Ray's shared-memory object store once per process "
            f"mapping it; see `pss_mb`)."),
            "",
            "| peak PSS MB | PSS at half the output MB | PSS at the end MB | PSS growth MB | "
            "PSS growth from half the events offered MB | peak RSS MB | RSS growth MB |",
            "|---:|---:|---:|---:|---:|---:|---:|",
            (f"| {mem['peak_mb']:.0f} | {mem['base_mb']:.0f} | {mem['last_mb']:.0f} | "
            f"{mem['pss_growth_mb']:.1f} | {mem['pss_growth_offered_mb']:.1f} | "
            f"{mem['rss_peak_mb']:.0f} | {mem['rss_growth_mb']:.1f} |"),
            "",
            "| s | events offered (read from the generator) | output messages | PSS MB | "
            "RSS MB |",
            "|---:|---:|---:|---:|---:|",
        ]
        samples = mem["samples"]
        step = max(1, len(samples) // 12)
        picked = samples[::step]
        if picked[-1] is not samples[-1]:
            picked.append(samples[-1])
        for t, done, outs, mb, _, rss in picked:
            lines.append(f"| {t:.1f} | {done:,} | {outs:,} | {mb:.0f} | {rss:.0f} |")
        lines.append("")
    nx = report.nexmark
    if nx is not None:
        lines += [
            "## Nexmark",
            "",
            (f"`benchmarks/nexmark/`: each query over the first `stream` events of one "
            f"generated Nexmark stream (persons, auctions and bids in Nexmark's proportions "
            f"1 : 3 : 46, {nx.delay_us} µs of event time apart; `events`: the query's input "
            f"events), inline, on Ray (CHT checked equal to inline), in Spark SSS "
            f"(`availableNow`, timed into `noop`, then run again into parquet, read back and "
            f"compared with cedar's output) and in Flink SQL (Nexmark's configuration, one "
            f"warm environment, after an untimed run on 5,000 events; a run at parallelism "
            f"1 and one at 2, the shorter net job runtime counts: `Flink net / wall s` gives "
            f"each parallelism's net and wall times, the one that counts in bold; "
            f"its rows collected at parallelism 1 and compared with cedar's). The ratios are "
            f"cedar on Ray ÷ Spark SSS and ÷ Flink in events/s; the smallest to Spark is "
            f"`nexmark_ratio_min`."),
            "",
            nx.table(),
            "",
        ]
    e1 = report.eps.get("W1", {})
    ray_eps, inline_eps = e1.get("ray", nan), e1.get("inline", nan)
    c_eps, d_eps = e1.get("from_spark", nan), e1.get("spark_sss", nan)
    p99, growth = lat.get("p99_ms", nan) if lat else nan, mem.get("pss_growth_mb", nan)

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    lines += [
        "## Targets",
        "",
        "| target | measured | |",
        "|---|---|---|",
        (f"| Ray (b) ≥ 0.5 × inline (a) on W1 | {fmt(ray_eps / inline_eps, 2)} × | "
        f"{verdict(ray_eps >= 0.5 * inline_eps)} |"),
        (f"| Ray (b) ≥ 1,000,000 events/s on W1 | {fmt(ray_eps)} | "
        f"{verdict(ray_eps >= 1e6)} |"),
        (f"| cedar from Spark (c) ≥ 2 × Spark SSS (d) on W1 | {fmt(c_eps / d_eps, 3)} × | "
        f"{verdict(c_eps >= 2 * d_eps)} |"),
        f"| p99 ≤ 50 ms at {s.rate_eps:,} events/s | {fmt(p99)} ms | {verdict(p99 <= 50)} |",
        (f"| memory growth < 50 MB over {s.memory:,} events (PSS; RSS: "
        f"{fmt(mem.get('rss_growth_mb', nan), 1)} MB) | {fmt(growth, 1)} MB | "
        f"{verdict(growth < 50)} |"),
    ]
    flink = flink_ratios(report)
    if flink:  # issue 36: Flink as Nexmark runs it, at sizes where its net runtime ≥ 5 s
        geomean = math.exp(sum(map(math.log, flink)) / len(flink))
        net_min = flink_net_min(report)
        lines += [
            (f"| cedar on Ray ≥ 1.5 × Flink (net) on every workload and Nexmark query | "
            f"{fmt(min(flink), 2)} × (smallest of {len(flink)}) | {verdict(min(flink) >= 1.5)} |"),
            (f"| cedar on Ray ≥ 3 × Flink (net), geometric mean | {fmt(geomean, 2)} × | "
            f"{verdict(geomean >= 3)} |"),
            (f"| Flink's net runtime ≥ 5 s for every figure in those ratios | shortest "
            f"{fmt(net_min, 2)} s | {verdict(net_min >= 5)} |"),
        ]
    lines += detect_lines(report, verdict)
    lines.append("")
    if report.notes:
        lines += ["## Notes", "", *(f"- {n}" for n in report.notes), ""]
    lines += ["```", result_line(report), "```", ""]
    return "\n".join(lines)


def detect_lines(report: Report, verdict: Callable[[bool], str]) -> list[str]:
    """detect's rows of the targets table and its section (none if it did not run)."""
    d = report.detect
    if not d:
        return []
    s, long = report.sizes, d["long"]
    rows = [f"| detect 'A B+ C' inline (column path) ≥ 1,000,000 events/s over 1,000 keys | "
            f"{fmt(d['column_eps'])} at {s.detect:,} events (load {d['column_load']:.1f}) | "
            f"{verdict(d['column_eps'] >= 1e6)} |"]
    f = d.get("flink")
    if f:
        rows.append(f"| detect: cedar on Ray ≥ 2 × Flink MATCH_RECOGNIZE (net) | "
                    f"{fmt(f['ratio'], 2)} × (outputs equal: {f['equal']}) | "
                    f"{verdict(f['ratio'] >= 2 and f['equal'])} |")
    rows.append(f"| detect: state and RSS bounded over {long['events']:,} events of 'A B+ D' | "
                f"at most {long['most']:,} rows, RSS {long['growth']:+.1f} MB | "
                f"{verdict(long['bounded'])} |")
    lines = [*rows, "", "## detect", "",
             f"`benchmarks/detect.py`: 'A B+ C' over 1,000 keys inline, the column path "
             f"(`Columns` batches of 65,536, a CTI after each, best of 3): "
             f"{fmt(d['column_eps'])} events/s ({fmt(d['column_cpu_eps'])} per CPU second) "
             f"at {s.detect:,} events, load {d['column_load']:.1f}.", ""]
    if f:
        lines += [f"Beside Flink SQL `MATCH_RECOGNIZE` over the same {f['events']:,} rows (a "
                  f"row every 2 ms, distinct times; Flink: {f['flink_runs']}): cedar on Ray "
                  f"{fmt(f['events'] / f['ray_s'])} events/s, inline "
                  f"{fmt(f['events'] / f['inline_s'])}, Flink net "
                  f"{fmt(f['events'] / f['flink_s'])} (wall "
                  f"{fmt(f['events'] / f['flink_wall_s'])}); cedar on Ray ÷ Flink net "
                  f"{fmt(f['ratio'], 2)} ×; the sets of matches equal: {f['equal']}; loads "
                  + ", ".join(f"{x[0]:.1f}" for x in f["load"]) + ".", ""]
    lines += [f"'A B+ D' (never completes) over {long['events']:,} events inline at "
              f"{fmt(long['eps'])} events/s (load {d['long_load']:.1f}): state rows / RSS MB at "
              "each sample: "
              + ", ".join(f"{r:,} / {m:.0f}" for _, r, m in long["samples"]) + "."]
    return lines


def write_results(text: str, path: str) -> None:
    """Write ``text``, keeping the hand-written analysis below :data:`MARKER`."""
    tail = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
        if MARKER in old:
            tail = old[old.index(MARKER):]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + ("\n" + tail if tail else ""))


# -- main -----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> Report:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"small sizes ({QUICK.w1:,} events for W1), ~10 minutes")
    ap.add_argument("--w1", type=int, help="W1 events")
    ap.add_argument("--memory-events", type=int, help="events of the memory run")
    ap.add_argument("--skip", action="append", default=[],
                    choices=["spark", "flink", "ray", "latency", "memory", "nexmark",
                             "detect"],
                    help="leave a part out")
    ap.add_argument("--out", default=RESULTS, help="where to write the results (markdown)")
    args = ap.parse_args(argv)
    sizes = Sizes(**vars(QUICK if args.quick else FULL))
    if args.w1:
        sizes.w1 = args.w1
    if args.memory_events:
        sizes.memory = args.memory_events
    command = "python -m benchmarks.run" + " ".join([""] + (argv or sys.argv[1:]))
    t_start = time.perf_counter()
    report = Report(sizes)
    report.load.append(("start", os.getloadavg()))
    info = machine()
    say(f"{command}: {info['nproc']} cores, {info['memory']}, {info['cpu']}; load "
        f"{os.getloadavg()[0]:.2f}")
    workdir = tempfile.mkdtemp(prefix="cedar-bench-")
    try:
        t, data = timed(lambda: Data(sizes, workdir))
        report.notes.append(f"data generation (numpy) and parquet writing: {t:.1f} s")
        # inline first, then Spark, then Ray: each has the CPUs to itself
        inline_outs = run_inline(report, data)
        if "spark" not in args.skip:
            run_spark(report, data, workdir, inline_outs, sizes)
        if "flink" not in args.skip:
            run_flink(report, data, workdir, inline_outs)
        if "ray" not in args.skip:
            import ray

            start_ray()
            try:
                run_ray(report, data, inline_outs)
                del inline_outs
                if "latency" not in args.skip:
                    run_latency(report, sizes, fuse="chains")
                if "memory" not in args.skip:
                    run_memory(report, sizes)
            finally:
                ray.shutdown()
        if "detect" not in args.skip:
            run_detect(report, sizes, ray="ray" not in args.skip, flink="flink" not in args.skip)
        if "nexmark" not in args.skip:
            run_nexmark(report, sizes, ray="ray" not in args.skip, spark="spark" not in args.skip,
                        flink="flink" not in args.skip)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report.load.append(("end", os.getloadavg()))
    total = time.perf_counter() - t_start
    write_results(render(report, info, command, total), args.out)
    say(f"wrote {args.out} ({total:.0f} s)")
    say(result_line(report))
    return report


if __name__ == "__main__":
    main()
