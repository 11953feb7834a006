"""The Nexmark suite, cedar beside Spark: ``python -m benchmarks.nexmark.run [--quick]``.

One run generates the events once (:mod:`.generator`, written to parquet), then runs every
query of :mod:`.queries`

1. inline (``collect(runtime="inline", columns=True)``) on the Arrow tables, and
2. on Ray (``collect(columns=True)`` with its defaults: stateless steps in the actor of the step
   before them; after a warm-up run of the same query on a small input), its CHT checked equal
   to the inline one: inline and on Ray in turn, ``--runs`` times each (default 3; the best
   counts, every run's seconds are printed, the outputs compared are the first runs'), so that
   each pair of runs shares the machine's load; a query whose first inline or Ray run took
   more than ``--long`` seconds (default 10) runs ``--long-runs`` times (default 1), which
   the table's ``runs`` column says,
3. in Spark Structured Streaming over the parquet directories (``readStream``,
   ``trigger(availableNow=True)``, append mode): timed into the ``noop`` sink, then run again
   into a parquet sink whose rows are read back and compared with cedar's as multisets of
   rows (:class:`.queries.Query` says which rows are comparable),

Timed is the query to its output at the driver, as column batches where the output has them
(Spark's ``noop`` sink keeps its rows in its own format too); turning them into one Python
``Insert`` per event for the comparison is not timed. Then it prints a markdown table:
query, input events, cedar's runs, events/s inline and on Ray (best runs) and in Spark, the
ratio cedar on Ray ÷ Spark (events/s), and whether the outputs are equal. Spark's session
start and a warm-up run of each query on a small input (5,000 events) are not timed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from operators.cht import check_equivalent, to_cht
from operators.columns import expand

from ..common import read_rows, say, start_ray, timed
from . import generator as gen
from . import queries as nq

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICK_EVENTS = 100_000
#: --quick: an event every 500 µs of event time (not Nexmark's 100 µs), so that 100,000 events
#: span 50 s and the 10 s windows of Q5 and Q7 close several times.
QUICK_DELAY = 500
#: cedar's runs of each query, inline and on Ray in turn (the best counts): Flink's is best of 3
RUNS = 3
#: A query whose first run (inline or on Ray) took longer than this many seconds runs only
#: :data:`LONG_RUNS` times (Q9, Q18 and Q19 took 11-25 s each at 1M events): the suite's
#: total time stays reasonable.
LONG_S = 10.0
LONG_RUNS = 1


def events_of(q: nq.Query, tables: dict[str, Any]) -> int:
    return sum(tables[i.removesuffix("_iv")].num_rows for i in q.inputs)


def latest_of(q: nq.Query, tables: dict[str, Any]) -> int:
    """The latest event time over the query's inputs (the smallest of their maxima: Spark's
    global watermark is the minimum over the inputs)."""
    import pyarrow.compute as pc

    return min(pc.max(tables[i.removesuffix("_iv")]["date_time"]).cast("int64").as_py()
               for i in q.inputs)


def cedar_query(q: nq.Query, tables: dict[str, Any]) -> Any:
    src = nq.sources(tables)
    return q.cedar(*(src[i] for i in q.inputs))


# -- Spark ----------------------------------------------------------------------------------------
def spark_schema(spark: Any, path: str) -> Any:
    return spark.read.parquet(path).schema


def spark_streams(spark: Any, q: nq.Query, paths: dict[str, str]) -> list[Any]:
    return [spark.readStream.schema(spark_schema(spark, paths[i])).parquet(paths[i])
            for i in q.spark_inputs]


def run_sss(df: Any, sink: str, out: str | None = None) -> float:
    """Run a streaming DataFrame to the end of its input (availableNow, append) into the
    ``noop`` sink or, with ``out``, into parquet files there; seconds."""
    ckpt = tempfile.mkdtemp(prefix="nexmark-sss-")
    try:
        w = (df.writeStream.format(sink).outputMode("append")
             .option("checkpointLocation", ckpt).trigger(availableNow=True))
        if out is not None:
            w = w.option("path", out)
        t0 = time.perf_counter()
        w.start().awaitTermination()
        return time.perf_counter() - t0
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def compare(q: nq.Query, cedar: list[Any], spark: list[dict[str, Any]], latest: int) -> str:
    """"yes (rows compared; what)" when the comparable rows are equal as multisets."""
    a = Counter(q.cedar_rows(cedar, latest))
    b = Counter(q.spark_rows(spark, latest))
    if a == b:
        n = sum(a.values())
        of = f" of cedar's {len(cedar):,}" if len(cedar) != n else ""
        return f"yes ({n:,} rows{of}{'; ' + q.note if q.note else ''})"
    only_c, only_s = a - b, b - a
    return (f"NO: {sum(only_c.values())} rows only in cedar (e.g. {list(only_c)[:2]}), "
            f"{sum(only_s.values())} only in Spark (e.g. {list(only_s)[:2]})")


# -- the run --------------------------------------------------------------------------------------
def fmt_eps(events: int, seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{events / seconds:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=None,
                    help="events generated (persons + auctions + bids; default 1,000,000)")
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_EVENTS:,} events (unless --events)")
    ap.add_argument("--delay", type=int, default=None,
                    help=f"inter-event delay in µs (default {gen.INTER_EVENT_DELAY}; "
                         f"--quick {QUICK_DELAY})")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", default=",".join(nq.DEFAULT),
                    help="the queries to run (default: all but the slow ones, "
                         f"{', '.join(sorted(set(nq.QUERIES) - set(nq.DEFAULT)))})")
    ap.add_argument("--runs", type=int, default=RUNS,
                    help=f"cedar's runs of each query, inline and on Ray in turn; the best "
                         f"counts (default {RUNS})")
    ap.add_argument("--long", type=float, default=LONG_S,
                    help=f"a query whose first run takes longer than this many seconds runs "
                         f"--long-runs times (default {LONG_S:g})")
    ap.add_argument("--long-runs", type=int, default=LONG_RUNS,
                    help=f"runs of such a query (default {LONG_RUNS})")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--no-flink", action="store_true")
    args = ap.parse_args(argv)
    n = args.events or (QUICK_EVENTS if args.quick else 1_000_000)
    delay = args.delay or (QUICK_DELAY if args.quick else gen.INTER_EVENT_DELAY)
    names = [s.strip() for s in args.queries.split(",") if s.strip()]
    for flag, value in (("--runs", args.runs), ("--long-runs", args.long_runs)):
        if value < 1:
            ap.error(f"{flag} {value}: give at least 1 run")
    result = measure(n, delay, names, seed=args.seed, ray=not args.no_ray,
                     spark=not args.no_spark, flink=not args.no_flink,
                     runs=Runs(args.runs, args.long, args.long_runs))
    say("")
    say(result.table())
    for note in result.notes:
        say(note)
    return 0


@dataclass(frozen=True)
class Runs:
    """How many times cedar runs each query (see the module doc): ``n``, or ``long_runs`` for
    a query whose first run took more than ``long_s`` seconds."""

    n: int = RUNS
    long_s: float = LONG_S
    long_runs: int = LONG_RUNS

    def of(self, first: list[float]) -> int:
        """The runs of a query whose first runs (inline, on Ray) took ``first`` seconds."""
        return min(self.n, self.long_runs) if max(first) > self.long_s else self.n


def fmt_runs(times: list[float]) -> str:
    """``best 0.41 s of 0.52, 0.41, 0.44`` (every run, in order)."""
    if len(times) == 1:
        return f"{times[0]:.2f} s (1 run)"
    return f"best {min(times):.2f} s of " + ", ".join(f"{t:.2f}" for t in times)


def runs_note(r: dict[str, Any], runs: Runs) -> str:
    """The table's ``runs`` cell: how many runs the best is of, and why fewer."""
    n = len(r.get("inline_runs", ()))
    if not n:
        return "n/a"
    return f"{n} (first > {runs.long_s:g} s)" if n < runs.n else str(n)


@dataclass
class Suite:
    """One run of the suite: per query its seconds (``inline``, ``ray``, ``spark`` or
    ``spark_batch``) and whether the outputs are equal (``equal``), and the input tables."""

    names: list[str]
    rows: dict[str, dict[str, Any]]
    tables: dict[str, Any]
    events: int
    delay_us: int
    notes: list[str] = field(default_factory=list)
    runs: Runs = field(default_factory=Runs)

    def table(self) -> str:
        return table(self.names, self.rows, self.tables, self.runs)

    def ratios(self, engine: str = "spark") -> dict[str, float]:
        """cedar on Ray ÷ ``engine`` (``"spark"``: SSS, or ``"flink"``) in events/s, for every
        query both ran."""
        return {name: r[engine] / r["ray"] for name, r in self.rows.items()
                if r.get("ray") and r.get(engine)}


def measure(n: int, delay: int, names: list[str], seed: int = 1, ray: bool = True,
            spark: bool = True, flink: bool = True, runs: Runs | None = None) -> Suite:
    """Generate ``n`` events ``delay`` µs apart and run the queries ``names`` inline and on
    Ray in turn (unless not ``ray``; a Ray instance of its own, shut down at the end), best
    of ``runs``, and in Spark SSS (unless not ``spark``; a session of its own, stopped at the
    end)."""
    runs = runs or Runs()
    workdir = tempfile.mkdtemp(prefix="nexmark-")
    try:
        t, tables = timed(lambda: gen.generate(n, seed=seed, inter_event_delay=delay))
        tables["side_input"] = gen.side_input()  # Q13's
        small = gen.generate(5_000, seed=seed + 1, inter_event_delay=delay)
        small["side_input"] = gen.side_input()
        paths = gen.write_parquet(tables, os.path.join(workdir, "data"))
        warm_paths = gen.write_parquet(small, os.path.join(workdir, "warm"))
        say(f"generated {n:,} events ({delay} µs apart) in {t:.2f} s: " +
            ", ".join(f"{k} {v.num_rows:,}" for k, v in tables.items()))
        rows: dict[str, dict[str, Any]] = {name: {} for name in names}
        inline_out: dict[str, list[Any]] = {}
        run_cedar(names, rows, tables, small, inline_out, runs, ray)
        if spark:
            run_spark(names, rows, tables, paths, warm_paths, inline_out, workdir)
        notes: list[str] = []
        if flink:
            notes.append(run_flink(names, rows, tables, inline_out, workdir))
        return Suite(names, rows, tables, n, delay, notes, runs)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_cedar(names: list[str], rows: dict[str, dict[str, Any]], tables: dict[str, Any],
              small: dict[str, Any], inline_out: dict[str, list[Any]], runs: Runs,
              ray: bool) -> None:
    """Every query inline and (with ``ray``) on Ray in turn, :class:`Runs` times each: into
    ``rows[name]`` the best seconds (``inline``, ``ray``) and every run's (``inline_runs``,
    ``ray_runs``); the first inline output, expanded, into ``inline_out``, which the first
    Ray output's CHT must equal."""
    say("cedar: inline" + (" and on Ray in turn" if ray else "") + f", best of {runs.n}")
    if ray:
        start_ray()
    try:
        for name in names:
            q = nq.QUERIES[name]
            if ray:
                cedar_query(q, small).collect()  # actors started, imports done
            times: dict[str, list[float]] = {"inline": [], "ray": []}
            planned = runs.n
            while len(times["inline"]) < planned:
                seconds, out = timed(lambda q=q: cedar_query(q, tables).collect(
                    runtime="inline", columns=True))
                times["inline"].append(seconds)
                if name not in inline_out:
                    inline_out[name] = list(expand(out))
                del out
                if ray:
                    seconds, out = timed(lambda q=q: cedar_query(q, tables).collect(
                        columns=True))
                    times["ray"].append(seconds)
                    if len(times["ray"]) == 1:
                        check_equivalent(list(expand(out)), inline_out[name])
                    del out
                if len(times["inline"]) == 1:
                    planned = runs.of(times["inline"] + times["ray"])
            rows[name]["inline"], rows[name]["inline_runs"] = min(times["inline"]), times["inline"]
            line = f"  {name}: {events_of(q, tables):,} events; inline {fmt_runs(times['inline'])}"
            if ray:
                rows[name]["ray"], rows[name]["ray_runs"] = min(times["ray"]), times["ray"]
                line += f"; Ray {fmt_runs(times['ray'])} (CHT equal to inline)"
            say(line)
    finally:
        if ray:
            import ray as ray_

            ray_.shutdown()


def run_spark(names: list[str], rows: dict[str, dict[str, Any]], tables: dict[str, Any],
              paths: dict[str, str], warm_paths: dict[str, str],
              inline_out: dict[str, list[Any]], workdir: str) -> None:
    """Every query in Spark SSS (timed into ``noop``, then again into parquet, read back and
    compared with cedar's inline output), or as a Spark batch query where SSS cannot."""
    from benchmarks.spark_sss import session

    say("spark: starting local[2]")
    spark = session()
    try:
        for name in names:
            q = nq.QUERIES[name]
            if q.spark is not None:  # the JVM warmed on this query's plan: not timed
                run_sss(q.spark(*spark_streams(spark, q, warm_paths)), "noop")
            latest = latest_of(q, tables)
            out_dir = os.path.join(workdir, f"spark-{name}")
            if q.spark is not None:
                rows[name]["spark"] = run_sss(
                    q.spark(*spark_streams(spark, q, paths)), "noop")
                run_sss(q.spark(*spark_streams(spark, q, paths)), "parquet", out_dir)
                spark_rows = read_rows(out_dir)
            else:
                assert q.spark_batch is not None
                batch = [spark.read.parquet(paths[i]) for i in q.spark_inputs]
                seconds, result = timed(lambda q=q, b=batch: q.spark_batch(*b).collect())
                rows[name]["spark_batch"] = seconds
                spark_rows = [r.asDict() for r in result]
            rows[name]["equal"] = compare(q, to_cht(inline_out[name]), spark_rows, latest)
            say(f"  {name}: {rows[name].get('spark', rows[name].get('spark_batch')):.2f}"
                f" s; equal: {rows[name]['equal']}")
    finally:
        spark.stop()


def run_flink(names: list[str], rows: dict[str, dict[str, Any]], tables: dict[str, Any],
              inline_out: dict[str, list[Any]], workdir: str) -> str:
    """Every query with a Flink SQL form (:mod:`.flink_sql`) in Flink, over the same tables as
    CSV (:mod:`benchmarks.flink`): best of 3 runs into ``blackhole``, then its rows collected
    and compared with cedar's inline output. Returns a note: the JVM's start, or why Flink
    did not run (it never fails the suite)."""
    from benchmarks import flink as fl

    from . import flink_sql

    todo = [name for name in names if name in flink_sql.SQL]
    try:
        python = fl.flink_python()
    except fl.FlinkUnavailable as exc:
        say(f"flink: not run: {exc}")
        return f"Flink not run: {exc}"
    say(f"flink: {python}")
    csv = {name: (os.path.join(workdir, "csv", name),
                  fl.write_csv(tables[name], os.path.join(workdir, "csv", name, "part.csv")))
           for name in ("person", "auction", "bid", "side_input")}
    jobs = [fl.Job(name, flink_sql.SQL[name],
                   [fl.table_spec(t, csv[t][0], csv[t][1], "date_time")
                    for t in flink_sql.INPUTS[name]],
                   repeat=3, rows_to=os.path.join(workdir, f"flink-{name}.json"))
            for name in todo]
    try:
        result = fl.run_jobs(jobs, python)
    except fl.FlinkUnavailable as exc:
        say(f"flink: failed: {exc}")
        return f"Flink failed: {exc}"
    for name in todo:
        if name in result.errors:
            rows[name]["flink_equal"] = f"n/a (Flink: {result.errors[name]})"
            say(f"  {name}: Flink failed: {result.errors[name]}")
            continue
        rows[name]["flink"] = result.seconds[name]
        q = nq.QUERIES[name]
        latest = latest_of(q, tables)
        a = Counter(q.cedar_rows(to_cht(inline_out[name]), latest))
        b = Counter(flink_sql.comparable(name, result.rows.get(name, []), latest))
        rows[name]["flink_equal"] = (f"yes ({sum(a.values()):,} rows)" if a == b else
                                     f"NO: {sum((a - b).values())} rows only in cedar, "
                                     f"{sum((b - a).values())} only in Flink")
        say(f"  {name}: Flink {result.seconds[name]:.2f} s (net {result.net_s[name]}); "
            f"equal: {rows[name]['flink_equal']}")
    return f"Flink: JVM start-up {result.startup_s:.1f} s (not timed), parallelism {fl.PARALLELISM}"


def table(names: list[str], rows: dict[str, dict[str, Any]], tables: dict[str, Any],
          runs: Runs | None = None) -> str:
    """The suite's markdown table; ``runs``: how many runs cedar's best is of (Flink: best of
    3; Spark: one run)."""
    runs = runs or Runs()
    out = ["| query | events | cedar runs | events/s inline | events/s Ray | events/s Spark SSS "
           "| cedar Ray ÷ Spark | events/s Flink | cedar Ray ÷ Flink | outputs equal (Spark) "
           "| outputs equal (Flink) |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for name in names:
        q, r = nq.QUERIES[name], rows[name]
        n = events_of(q, tables)
        ray_s, spark_s = r.get("ray"), r.get("spark")
        if spark_s is not None:
            spark_col = fmt_eps(n, spark_s)
        elif "spark_batch" in r:
            spark_col = f"n/a (batch: {fmt_eps(n, r['spark_batch'])})"
        else:
            spark_col = "n/a"
        ratio = (f"{spark_s / ray_s:.2f}" if ray_s is not None and spark_s is not None
                 else "n/a")
        flink_s = r.get("flink")
        flink_ratio = f"{flink_s / ray_s:.2f}" if ray_s and flink_s else "n/a"
        out.append(f"| {name} | {n:,} | {runs_note(r, runs)} | {fmt_eps(n, r.get('inline'))} | "
                   f"{fmt_eps(n, ray_s)} | {spark_col} | {ratio} | {fmt_eps(n, flink_s)} | "
                   f"{flink_ratio} | {r.get('equal', 'n/a (not run)')} | "
                   f"{r.get('flink_equal', 'n/a (not run)')} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
