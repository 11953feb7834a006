"""``detect("A B+ C")`` over 1,000 keys: the row path against the column path inline, cedar
beside Flink's ``MATCH_RECOGNIZE``, and the state and memory of a long run.

The input is N point events in start order, one every ``step`` ticks, each with a key out of
:data:`KEYS` (uniform at random) and a value ``v`` in ``[0, 100)``; ``A`` is ``v < 10``, ``B``
``10 <= v < 90``, ``C`` ``v >= 90`` (predicates of the payload only, which trace column-wise),
``within`` about 50 rows of a key (:data:`WITHIN_TICKS` at a step of one tick).

* **Row path against column path** (the default): the events go to one
  :class:`~operators.detect.Detect` in ``Columns`` batches of :data:`BATCH` rows with a CTI
  after each (the column path), and as ``Insert`` messages in the same batches (the row path);
  both outputs must have the same CHT and the same CTIs. Printed: events/s of each path, the
  machine's load, and the state size along a run of a pattern that never completes
  (``A B+ D``, no row is a ``D``), which stays bounded by ``within`` however long the input.
* **Beside Flink** (``--flink N``): the same kind of rows, one every 2 ms (Flink's event time
  has millisecond precision and its ``MATCH_RECOGNIZE`` orders a partition by it: distinct
  times leave no tie to break), through Flink SQL ``MATCH_RECOGNIZE`` (:data:`FLINK_SQL`, run
  by :mod:`benchmarks.flink` as the Nexmark suite runs it: Nexmark's configuration, one warm
  environment, parallelism 1 and 2, the shortest net job runtime) and through cedar's query
  :func:`query` (``Stream.from_arrow(...).detect(..., key="k")``) inline and deployed on a
  local Ray (after a warm-up run on a small input; best of :data:`RUNS`). Both compute the
  same measures (key, first and last time, rows); the sets of matches must be equal.
* **Flat memory** (``--long N``): N events through ``A B+ D`` inline, generated batch by
  batch (never all in memory), a CTI after each; every ~1M events the operator's state rows
  and the process's RSS are printed, and the run fails if either grows past its bound.

``--flink`` and ``--long`` run instead of the default part (both may be given).

    python -m benchmarks.detect                   # N = 200,000
    python -m benchmarks.detect --events 1000000
    python -m benchmarks.detect --flink 1000000   # Flink's net runtime ~20 s here
    python -m benchmarks.detect --long 10000000   # state and RSS every ~1M events
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from operators.cht import to_cht
from operators.columns import Columns
from operators.detect import Detect
from operators.events import Cti, Message

from . import deps  # first: psutil before Ray's vendored copy (see benchmarks.deps)

KEYS = 1_000
BATCH = 65_536
#: about 50 rows of a key: each key sees a row every ~1,000 ticks
WITHIN_TICKS = 50_000
#: Beside Flink: a row every 2 ms (µs ticks), so a key every ~2 s, and ``within`` ~50 of a
#: key's rows: 100.001 s, an odd number of ms, which no difference of two times (even ms)
#: equals, so ``<`` (cedar: last - first < within) and ``<=`` read it alike.
FLINK_STEP_TICKS = 2_000
FLINK_WITHIN_TICKS = 100_001_000
#: cedar's timed runs (inline and on Ray) beside Flink; the best counts.
RUNS = 3
#: Rows of the warm-up runs (cedar on Ray, Flink), not timed.
WARM_EVENTS = 20_000
#: The long run: state and RSS sampled every this many events.
SAMPLE_EVERY = 1_000_000
#: The long run fails if RSS grows by more than this after its first sample (MB).
RSS_GROWTH_MB = 64


def generate(n: int, seed: int = 1, step: int = 1) -> Iterator[Columns]:
    """``n`` events as ``Columns`` of :data:`BATCH` rows, made as they are read: start
    ``i * step`` for the ``i``-th, ``k`` uniform in ``[0, KEYS)``, ``v`` in ``[0, 100)``."""
    rng = np.random.default_rng(seed)
    for a in range(0, n, BATCH):
        b = min(n, a + BATCH)
        t = np.arange(a, b, dtype=np.int64) * step
        yield Columns(t, t, None, {"k": rng.integers(0, KEYS, b - a),
                                   "v": rng.integers(0, 100, b - a)})


def batches(n: int, seed: int = 1, step: int = 1) -> list[Columns]:
    return list(generate(n, seed, step))


def a(p: Any, m: Any) -> Any:
    return p["v"] < 10


def b(p: Any, m: Any) -> Any:
    return (p["v"] >= 10) & (p["v"] < 90)


def c(p: Any, m: Any) -> Any:
    return p["v"] >= 90


def never(p: Any, m: Any) -> Any:
    return p["v"] < 0


def key(p: Any) -> Any:
    return p["k"]


def detect(pattern: str = "A B+ C", emit: str = "speculative",
           within: int = WITHIN_TICKS) -> Detect:
    define = {"A": a, "B": b, "C": c, "D": never}
    return Detect(pattern, {s: f for s, f in define.items() if s in pattern},
                  within=within, key=key, emit=emit)


def run(op: Detect, data: list[Columns], rows: bool) -> tuple[float, float, list[Message]]:
    """Feed ``data`` (a CTI after each batch; as inserts when ``rows``): wall seconds, CPU
    seconds of this process (what a shared machine's load does not inflate as much) and the
    output."""
    feed = [c.inserts() + with_cti(c)[1:] if rows else with_cti(c) for c in data]
    out: list[Message] = []
    # (the garbage of what came before -- a previous run, the feed's making -- collected
    # before the clock starts; the run's own collections are timed)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    for msgs in feed:
        out.extend(op.process(msgs))
    out.extend(op.finish())
    return time.perf_counter() - t0, time.process_time() - c0, out


def with_cti(cols: Columns) -> list[Any]:
    """A batch and a CTI one tick past its last start."""
    return [cols, Cti(int(cols.starts[-1]) + 1)]


def ctis(out: list[Message]) -> list[int]:
    return [m.time for m in out if type(m) is Cti]


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


# -- row path against column path ----------------------------------------------------------------
def column_path(n: int, emit: str = "speculative",
                data: list[Columns] | None = None) -> tuple[float, float, list[Message]]:
    """The column path over ``n`` events, best of 3: wall and CPU seconds, the output."""
    data = batches(n) if data is None else data
    t_cols, cpu_cols = float("inf"), float("inf")
    out_cols: list[Message] = []
    for _ in range(3):
        out_cols = []  # (the last run's output is not in the heap of the next)
        wall, cpu, out_cols = run(detect(emit=emit), data, rows=False)
        t_cols, cpu_cols = min(t_cols, wall), min(cpu_cols, cpu)
    return t_cols, cpu_cols, out_cols


def paths(n: int, emit: str) -> bool:
    data = batches(n)
    print(f"detect 'A B+ C', {n:,} events over {KEYS:,} keys, batches of {BATCH:,}, "
          f"within {WITHIN_TICKS:,} ticks, emit={emit}; {load()} on {os.cpu_count()} CPUs")
    # (the column path first: its runs' heap holds the input, not the row path's output,
    # whose many objects every full collection in them would go over again)
    t_cols, cpu_cols, out_cols = column_path(n, emit, data)
    cols_load = load()
    t_rows, cpu_rows, out_rows = run(detect(emit=emit), data, rows=True)
    print(f"  row path     {n / t_rows:>12,.0f} events/s  ({t_rows:.2f} s; "
          f"{n / cpu_rows:,.0f} per CPU second; {load()})")
    print(f"  column path  {n / t_cols:>12,.0f} events/s  ({t_cols:.2f} s, best of 3; "
          f"{n / cpu_cols:,.0f} per CPU second; {cols_load})  {t_rows / t_cols:.1f}x")
    same = to_cht(out_rows) == to_cht(out_cols) and ctis(out_rows) == ctis(out_cols)
    print(f"  outputs equal: {same} ({len(to_cht(out_cols)):,} matches)")
    # state bounded by within: a pattern that never completes
    op = detect("A B+ D")
    sizes = []
    for cols in generate(max(n, 1_000_000), seed=2):
        op.process(with_cti(cols))
        sizes.append(op.state_size())
    print(f"  'A B+ D' (never completes): state after each batch: max {max(sizes):,} rows, "
          f"last {sizes[-1]:,} (bounded by within)")
    return same


# -- beside Flink ---------------------------------------------------------------------------------
#: ``A B+ C`` in Flink SQL over a table ``d`` of ``ts`` (µs), ``k``, ``v`` with the rowtime
#: ``rt`` (ms, made from ``ts`` by :mod:`benchmarks.flink_job`; watermark without delay: the
#: rows come in time order). ONE ROW PER MATCH and AFTER MATCH SKIP PAST LAST ROW are cedar's
#: semantics (docs/patterns.md#detect); ``B`` and ``C`` exclude each other, so greedy and
#: reluctant ``B+`` find the same matches. The measures are the ones :func:`summary` gives.
FLINK_SQL = """
SELECT k, first_ts, last_ts, n
FROM d
MATCH_RECOGNIZE (
  PARTITION BY k
  ORDER BY rt
  MEASURES A.ts AS first_ts, C.ts AS last_ts, COUNT(B.v) + 2 AS n
  ONE ROW PER MATCH
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B+ C) WITHIN INTERVAL '{within}' MINUTE TO SECOND
  DEFINE A AS A.v < 10, B AS B.v >= 10 AND B.v < 90, C AS C.v >= 90
)"""


def flink_sql(within_ticks: int) -> str:
    """:data:`FLINK_SQL` with ``within`` (µs, a whole number of ms) as ``'M:SS.mmm'``."""
    ms = within_ticks // 1_000
    if ms * 1_000 != within_ticks:
        raise ValueError(f"within={within_ticks} µs is not a whole number of ms (Flink's "
                         "event time has millisecond precision)")
    return FLINK_SQL.format(within=f"{ms // 60_000}:{ms // 1_000 % 60:02d}.{ms % 1_000:03d}")


def summary(m: dict[str, tuple[Any, ...]]) -> tuple[int, int]:
    """A match's measures beside Flink's: its key and how many rows it has."""
    return (int(m["A"][0]["k"]), len(m["A"]) + len(m["B"]) + len(m["C"]))


def query(table: Any, within: int = FLINK_WITHIN_TICKS) -> Any:
    """cedar's ``A B+ C`` over an Arrow table of ``ts``, ``k``, ``v``: per key ``k``, the
    measures :func:`summary`."""
    from operators.ingress import AdvanceTime
    from topology import Stream

    return (Stream.from_arrow(table, start="ts", shape="point", advance=AdvanceTime(every=BATCH))
            .detect("A B+ C", {"A": a, "B": b, "C": c}, within=within, key="k",
                    measures=summary))


def arrow(data: Iterator[Columns]) -> Any:
    """Generated batches as one Arrow table of ``ts`` (µs), ``k``, ``v``."""
    import pyarrow as pa

    parts = [pa.table({"ts": cols.starts, **cols.payload}) for cols in data]
    return pa.concat_tables(parts)


def matches(out: list[Message]) -> Counter[tuple[int, int, int, int]]:
    """cedar's matches as ``(key, first time, last time, rows)``."""
    return Counter((p[0], s, e - 1, p[1]) for s, e, p in to_cht(out))


def best(fn: Callable[[], Any], runs: int = RUNS) -> tuple[float, Any, list[float]]:
    """``fn`` ``runs`` times: the shortest seconds, the last output, every run's seconds."""
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out, times


def beside_flink(n: int, repeat: int = 2) -> dict[str, Any]:
    """cedar inline, cedar on Ray and Flink over the same ``n`` events (see the module
    docstring); returns the figures (``equal``: whether the three sets of matches are).
    Raises :class:`benchmarks.flink.FlinkUnavailable` where Flink cannot run or fails."""
    from . import flink as fl
    from .common import start_ray

    table = arrow(generate(n, seed=3, step=FLINK_STEP_TICKS))
    warm = table.slice(0, WARM_EVENTS)
    print(f"beside Flink: 'A B+ C', {n:,} events over {KEYS:,} keys, a row every "
          f"{FLINK_STEP_TICKS / 1000:g} ms, within {FLINK_WITHIN_TICKS / 1e6:g} s; {load()}")
    res: dict[str, Any] = {"events": n, "load": [os.getloadavg()]}
    work = tempfile.mkdtemp(prefix="cedar-detect-")
    try:
        cols = fl.write_csv(table, os.path.join(work, "d", "part.csv"))
        warm_cols = fl.write_csv(warm, os.path.join(work, "warm", "part.csv"))
        t0 = time.perf_counter()
        import pyarrow.csv as pcsv
        pcsv.read_csv(os.path.join(work, "d", "part.csv"), read_options=pcsv.ReadOptions(
            column_names=["ts", "k", "v"]))
        res["csv_read_s"] = time.perf_counter() - t0
        job = fl.Job("detect", flink_sql(FLINK_WITHIN_TICKS),
                     [fl.table_spec("d", os.path.join(work, "d"), cols, "ts")], repeat,
                     os.path.join(work, "rows.json"),
                     [fl.table_spec("d", os.path.join(work, "warm"), warm_cols, "ts")])
        print(f"  flink ({fl.flink_python()}): {len(fl.PARALLELISMS)} parallelisms x {repeat} "
              f"runs after a warm-up run; {load()}")
        flink = fl.run_jobs([job])
        if "detect" in flink.errors:
            raise fl.FlinkUnavailable(f"Flink failed: {flink.errors['detect']}")
        net, wall = flink.net_s["detect"], flink.wall_s["detect"]
        theirs = Counter((r["k"], r["first_ts"], r["last_ts"], r["n"])
                         for r in flink.rows("detect"))
        res.update(flink_s=flink.seconds["detect"], flink_net_s=net, flink_wall_s=wall,
                   flink_p=flink.best_parallelism["detect"], flink_runs=flink.describe("detect"),
                   flink_startup_s=flink.startup_s)
        res["load"].append(os.getloadavg())
        print(f"  Flink net    {n / flink.seconds['detect']:>12,.0f} events/s  (net "
              f"{net if net is None else round(net, 2)} s, wall {wall:.2f} s at parallelism "
              f"{res['flink_p']}; {flink.describe('detect')}; JVM start "
              f"{flink.startup_s or 0:.1f} s not counted; {load()})")
        print(f"  Flink wall   {n / wall:>12,.0f} events/s")
        t_in, out_in, times = best(lambda: query(table).collect(runtime="inline"))
        res.update(inline_s=t_in, inline_runs=times)
        res["load"].append(os.getloadavg())
        print(f"  cedar inline {n / t_in:>12,.0f} events/s  ({t_in:.2f} s, best of {RUNS}: "
              f"{', '.join(f'{t:.2f}' for t in times)}; {load()})")
        ours = matches(out_in)
        import ray

        start_ray()
        try:
            query(warm).collect()  # actors started, imports done: not the steady state
            t_ray, out_ray, times = best(lambda: query(table).collect())
        finally:
            ray.shutdown()
        res.update(ray_s=t_ray, ray_runs=times)
        res["load"].append(os.getloadavg())
        print(f"  cedar on Ray {n / t_ray:>12,.0f} events/s  ({t_ray:.2f} s, best of {RUNS}: "
              f"{', '.join(f'{t:.2f}' for t in times)}; {load()})")
        print(f"  (pyarrow reads the CSV Flink reads in {res['csv_read_s']:.2f} s; cedar's "
              "runs read the table from memory, as the Nexmark suite's do)")
        res["ratio"] = flink.seconds["detect"] / t_ray
        print(f"  cedar on Ray / Flink net: {res['ratio']:.2f}x (target >= 2x: "
              f"{'met' if res['ratio'] >= 2 else 'NOT met'})")
        same_ray = matches(out_ray) == ours
        res["equal"] = same = same_ray and theirs == ours
        print(f"  outputs equal: {same} ({sum(ours.values()):,} matches inline; on Ray "
              f"{'the same' if same_ray else 'DIFFERENT'}; Flink {sum(theirs.values()):,}"
              f"{'' if theirs == ours else ', DIFFERENT: ' + diff(ours, theirs)})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return res


def diff(ours: Counter[Any], theirs: Counter[Any]) -> str:
    only_ours, only_theirs = ours - theirs, theirs - ours
    return (f"{sum(only_ours.values())} only in cedar (e.g. {list(only_ours)[:3]}), "
            f"{sum(only_theirs.values())} only in Flink (e.g. {list(only_theirs)[:3]})")


# -- flat memory ----------------------------------------------------------------------------------
def rss_mb() -> float:
    """This process's resident set (MB): from ``/proc`` where there is one (no psutil, which
    a test run that imported Ray first would find only as Ray's copy), else psutil's."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float(deps.psutil().Process().memory_info().rss) / 2**20


def long_run(n: int) -> dict[str, Any]:
    """``A B+ D`` (never completes) over ``n`` events inline, generated batch by batch, a CTI
    after each: ``samples``, every ~:data:`SAMPLE_EVERY` events (ten at least), ``(events,
    state rows, RSS MB)``; ``most``, the most state rows after any batch; ``growth``, RSS MB
    from the first sample to the last; ``bounded``: the state stayed within its bound (every
    row of one ``within``: at one row per tick, ``within`` rows) and RSS grew by at most
    :data:`RSS_GROWTH_MB`."""
    op = detect("A B+ D")
    print(f"long run: 'A B+ D' (never completes), {n:,} events over {KEYS:,} keys, batches of "
          f"{BATCH:,}, a CTI after each, within {WITHIN_TICKS:,} ticks; {load()}")
    samples: list[tuple[int, int, float]] = []
    every = max(BATCH, min(SAMPLE_EVERY, n // 10))  # ten samples at least
    seen, next_at, t0 = 0, every, time.perf_counter()
    most = 0
    for cols in generate(n, seed=2):
        op.process(with_cti(cols))
        seen += len(cols)
        most = max(most, op.state_size())
        if seen >= next_at or seen == n:
            samples.append((seen, op.state_size(), rss_mb()))
            print(f"  {seen:>12,} events  state {samples[-1][1]:>7,} rows (max so far "
                  f"{most:,})  RSS {samples[-1][2]:8.1f} MB  "
                  f"{seen / (time.perf_counter() - t0):>10,.0f} events/s  {load()}", flush=True)
            next_at += every
    growth = samples[-1][2] - samples[0][2]
    bounded = most <= WITHIN_TICKS and growth <= RSS_GROWTH_MB
    print(f"  state at most {most:,} rows (bound: {WITHIN_TICKS:,}, the rows of one within); "
          f"RSS {samples[0][2]:.1f} -> {samples[-1][2]:.1f} MB ({growth:+.1f} MB after the "
          f"first sample; bound +{RSS_GROWTH_MB} MB): {'bounded' if bounded else 'NOT bounded'}")
    return {"events": n, "samples": samples, "most": most, "growth": growth,
            "bounded": bounded, "eps": n / (time.perf_counter() - t0)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--emit", default="speculative", choices=("speculative", "final"))
    parser.add_argument("--flink", type=int, metavar="N",
                        help="cedar inline, on Ray and Flink's MATCH_RECOGNIZE over N events")
    parser.add_argument("--long", type=int, metavar="N",
                        help="state rows and RSS along N events of a pattern that never completes")
    args = parser.parse_args(argv)
    if args.flink is None and args.long is None and not paths(args.events, args.emit):
        raise SystemExit("the row path and the column path disagree")
    if args.flink is not None and not beside_flink(args.flink)["equal"]:
        raise SystemExit("cedar and Flink disagree")
    if args.long is not None and not long_run(args.long)["bounded"]:
        raise SystemExit("the long run's state or memory grew past its bound")


if __name__ == "__main__":
    main()
