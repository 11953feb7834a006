"""Smoke test of the benchmark suite (``python -m benchmarks.run``): its data generator, its
three queries and its report, inline on a few thousand events (no Spark, no Ray).

The queries' results are checked against numpy computations of the same aggregates, so a
benchmark that measured a wrong query would fail here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from collections import Counter, defaultdict

import numpy as np
import pytest

from benchmarks import run as bench
from benchmarks import workloads as wl
from operators.cht import to_cht

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_points_are_the_same_whole_or_in_chunks():
    whole = wl.points(3_000, keys=10, seed=7)
    again = wl.points(3_000, keys=10, seed=7)
    assert all(np.array_equal(whole[c], again[c]) for c in whole)
    # a long stream is generated chunk by chunk: event i depends on (seed, chunk start) only
    progress = [0]
    chunked = list(wl.table_stream(3_000, keys=10, seed=7, chunk=1_000, progress=progress))
    assert progress == [3_000] and [t.num_rows for t in chunked] == [1_000] * 3
    assert chunked[1]["ts"].to_pylist() == \
        wl.points(1_000, keys=10, seed=7, first=1_000)["ts"].tolist()
    # disorder stays below the sources' AdvanceTime delay: nothing is late
    ts = whole["ts"]
    assert (np.maximum.accumulate(ts) - ts).max() < wl.JITTER_TICKS
    assert 0.85 < (whole["v"] >= wl.WHERE_CUT).mean() < 0.95


def test_w1_counts_and_sums_every_key_and_second():
    cols = wl.points(5_000, keys=20, seed=1, rate_eps=1_000)  # 5 s of event time
    out = wl.w1(wl.source(cols)).collect(runtime="inline")
    # row by row (from_rows, the general group_apply) or column-wise: the same rows
    assert to_cht(out) == to_cht(wl.w1(wl.source(wl.rows(cols))).collect(runtime="inline"))
    got = {(p[0], s): (p[1]["count"], p[1]["sum"]) for s, e, p in to_cht(out)}
    keep = cols["v"] >= wl.WHERE_CUT
    want: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0, 0.0])
    for t, k, v in zip(cols["ts"][keep], cols["k"][keep], cols["v"][keep]):
        acc = want[(int(k), int(t) // wl.TUMBLE_TICKS * wl.TUMBLE_TICKS)]
        acc[0] += 1
        acc[1] += v
    assert got.keys() == want.keys()
    for key, (count, total) in want.items():
        assert got[key][0] == count
        assert got[key][1] == pytest.approx(total, rel=1e-12)


def test_w2_time_weighted_average_of_points():
    cols = wl.points(2_000, keys=5, seed=2, rate_eps=200)  # 10 s of event time
    out = wl.w2(wl.source(wl.rows(cols))).collect(runtime="inline")
    rows = to_cht(out)
    keep = cols["v"] >= wl.WHERE_CUT
    ts, ks, vs = cols["ts"][keep], cols["k"][keep], cols["v"][keep]
    assert rows and all(e - s == wl.HOP_SIZE_TICKS for s, e, _ in rows)
    for s, e, (k, twa) in rows[:: max(1, len(rows) // 40)]:
        inside = (ks == k) & (ts >= s) & (ts < e)
        # a point lives one tick: its weight is 1 / (window length)
        assert twa == pytest.approx(vs[inside].sum() / wl.HOP_SIZE_TICKS, rel=1e-12)


def test_w3_joins_pairs_closer_than_the_lifetime():
    left = wl.points(800, keys=30, seed=3, rate_eps=2_000)
    right = wl.points(800, keys=30, seed=4, rate_eps=2_000)
    out = wl.w3(wl.source(wl.rows(left)), wl.source(wl.rows(right))).collect(runtime="inline")
    gap = np.abs(left["ts"][:, None] - right["ts"][None, :])
    pairs = (left["k"][:, None] == right["k"][None, :]) & (gap < wl.JOIN_LIFETIME_TICKS)
    rows = to_cht(out)
    assert len(rows) == int(pairs.sum()) > 0
    i, j = np.nonzero(pairs)
    assert sorted(p for _, _, p in rows) == sorted(
        (int(left["k"][a]), float(left["v"][a]), float(right["v"][b])) for a, b in zip(i, j))


def test_paced_source_keeps_its_rate_and_records_every_cti():
    cols = wl.points(2 * wl.CTI_EVERY + 7, keys=3, seed=5)
    paced = bench.Paced(cols, rate_eps=100_000)
    t0 = time.perf_counter()
    assert sum(t.num_rows for t in paced) == len(cols["ts"])
    assert time.perf_counter() - t0 >= 0.9 * len(cols["ts"]) / 100_000
    assert len(paced.ctis) == 2
    assert paced.ctis[0][0] == cols["ts"][:wl.CTI_EVERY].max() - wl.JITTER_TICKS
    assert all(sent >= due - 0.002 for _, due, sent in paced.ctis)
    # the same CTIs as the source's Ingress
    messages = wl.source(cols).collect(runtime="inline")
    assert [m.time for m in messages if type(m).__name__ == "Cti"][:2] == \
        [c for c, _, _ in paced.ctis]


def test_the_report_ends_with_the_result_line(tmp_path):
    sizes = bench.Sizes(w1=2_000, w2=500, w3=500, latency_s=0.1, rate_eps=50_000,
                        memory=1_000, keys=50, join_keys=100)
    report = bench.Report(sizes)
    data = bench.Data(sizes, str(tmp_path / "data"))
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == \
        ["left", "right", "w1", "w1-quarter", "w2", "warm"]
    outs = bench.run_inline(report, data)
    assert set(outs) == {"W1", "W2", "W3"} and all(report.eps[w]["inline"] > 0 for w in outs)
    path = tmp_path / "RESULTS.md"
    path.write_text(f"old figures\n{bench.MARKER}\nkept analysis\n")
    bench.write_results(bench.render(report, {"nproc": "2"}, "test", 1.0), str(path))
    text = path.read_text()
    assert text.endswith(f"{bench.MARKER}\nkept analysis\n") and "old figures" not in text
    assert "| nproc |" in text and "| W1: tumbling" in text
    line = bench.result_line(report)
    assert re.fullmatch(
        r"RESULT inline_eps=\d+ ray_eps=nan from_spark_eps=nan spark_sss_eps=nan "
        r"ratio_ray_inline=nan ratio_cedar_spark=nan p99_ms=nan pss_growth_mb=nan "
        r"join_ray_eps=nan join_ratio_spark=nan w2_inline_eps=\d+ nexmark_ratio_min=nan "
        r"flink_ratio_min=nan flink_ratio_geomean=nan flink_net_min_s=nan nexmark_queries=0",
        line), line


def test_flink_ties_are_compared_as_each_query_defines_them():
    """Nexmark's Q5 outputs every auction tied for the most bids, as cedar's Q5 does: Flink's
    rows are compared as they are. Q7 keeps the largest by the tuple order, and
    Flink's rows are compared after the same pick."""
    from benchmarks.nexmark import flink_sql
    from benchmarks.nexmark import queries as nq

    w = nq.WINDOW
    q5 = [{"auction": a, "num": n, "window_start": 0, "window_end": w}
          for a, n in ((9, 3), (7, 3))]
    assert sorted(flink_sql.comparable("Q5", q5, latest=w)) == [(0, w, 7, 3), (0, w, 9, 3)]
    q7 = [{"auction": a, "price": 50, "bidder": b, "date_time": t, "extra": ""}
          for a, b, t in ((1, 4, 5), (2, 1, 7), (1, 9, w + 1))]
    assert flink_sql.comparable("Q7", q7, latest=2 * w) == [(0, w, 50, 2, 1),
                                                            (w, 2 * w, 50, 1, 9)]
    assert set(flink_sql.SQL) == set(flink_sql.INPUTS) <= set(nq.QUERIES)


def test_spark_rows_are_compared_with_cedars_sentinel_left_out():
    from benchmarks import spark_sss as sp

    cols = wl.points(3_000, keys=5, seed=1, rate_eps=1_000)
    w1 = to_cht(wl.w1(wl.source(cols)).collect(runtime="inline"))
    # Spark adds in another order: sums equal to 1e-9 relative
    spark_w1 = [{"start": s, "end": e, "k": k, "count": agg["count"],
                 "sum": agg["sum"] * (1 + 1e-12)} for s, e, (k, agg) in w1]
    sentinel = {"start": 0, "end": 1, "k": sp.SENTINEL_KEY, "count": 1, "sum": 0.5}
    assert sp.compare("W1", w1, [*spark_w1, sentinel]).startswith("W1: equal (16 window rows")
    with pytest.raises(AssertionError, match="1 windows only in cedar"):
        sp.compare("W1", w1, spark_w1[1:])
    # W3: Spark's pair (lts, rts) has cedar's lifetime, the overlap of the two events'
    life = wl.JOIN_LIFETIME_TICKS
    w3 = [(120, 100 + life, (7, 0.25, 0.5))]
    assert sp.compare("W3", w3, [{"lts": 100, "rts": 120, "lk": 7, "lv": 0.25, "rv": 0.5}])
    with pytest.raises(AssertionError):
        sp.compare("W3", w3, [{"lts": 100, "rts": 121, "lk": 7, "lv": 0.25, "rv": 0.5}])


def test_marginal_rates_and_both_sizes_in_the_report():
    assert bench.marginal(100, 1.5, 400, 2.0) == pytest.approx(600.0)
    report = bench.Report(bench.QUICK)
    report.by_size = {100_000: (1.0, 0.5), 400_000: (2.5, 1.0)}
    report.spark_latency = {"latencies_ms": [100.0, 200.0], "rows": 10, "batches": 3,
                            "trigger": "500 milliseconds", "keys": 100}
    text = bench.render(report, {"nproc": "2"}, "test", 1.0)
    assert "| marginal, 100,000 → 400,000 | 200,000 | 600,000 | 0.333 |" in text
    assert "| Spark SSS, event due → its window's row written | 100 | 200 | 200 | 2 |" in text


def test_w1_scale_table_is_the_stream_dealt_to_files_in_no_order(tmp_path):
    import pyarrow.parquet as pq

    from benchmarks import spark_w1_scale as scale

    path = scale.write_table(5_000, str(tmp_path / "t"), files=4, keys=7)
    parts = [pq.read_table(f) for f in sorted((tmp_path / "t").iterdir())]
    assert len(parts) == 4 and path == str(tmp_path / "t")
    ts = np.concatenate([p["ts"].cast("int64").to_numpy() for p in parts])
    # chunk by chunk: the same events (a chunk of the stream depends on its first event only)
    chunk = 5_000 // 16 + 1
    want = np.concatenate([wl.points(min(chunk, 5_000 - f), 7, scale.SEED, f)["ts"]
                           for f in range(0, 5_000, chunk)])
    assert sorted(ts.tolist()) == sorted(want.tolist())
    # in no order: the files' chunks are not the stream's order
    assert not (np.diff(ts) > -wl.JITTER_TICKS).all()


def test_idle_cost_counts_steps_and_the_actors_each_fusion_level_deploys():
    """The idle-cost benchmark's step and stage counts (no Ray): the five shapes' 21 steps
    deploy as 21 actors unfused, 17 with the stateless steps fused, 15 with every chain (the
    join's two sources, a partitioned group_apply's partitions and the sinks stay apart)."""
    from benchmarks import idle_cost

    counts = [idle_cost.step_counts(f) for f in ("none", "stateless", "chains", "all")]
    assert counts == [(21, 21), (21, 17), (21, 15), (21, 15)]


@pytest.mark.slow
@pytest.mark.ray
def test_idle_cost_runs_and_prints_the_cost_per_idle_step(tmp_path):
    """The benchmark itself, briefly, in a process of its own (it starts its own Ray)."""
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.idle_cost", "--queries", "5", "--fuse", "all",
         "--settle", "1", "--seconds", "1", "--bare", "1"],
        cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip().splitlines()[-1]
    got = dict(kv.split("=") for kv in line.split()[2:])
    assert line.startswith("RESULT idle_cost fuse=all"), done.stdout
    steps, actors = int(got["steps"]), int(got["actors"])
    from benchmarks import idle_cost

    want_steps, stages = idle_cost.step_counts("all")
    # (a query fed by this driver, as these are, has no host actor)
    assert steps == want_steps and stages <= actors <= stages + 5
    assert float(got["per_step_pct"]) >= 0
    # where the CPU goes: Ray's main thread (Linux /proc), and cedar's own timer, asleep
    assert float(got["main_thread_pct"]) >= 0 and float(got["cedar_timer_wakes_per_s"]) <= 2


def test_nexmark_times_cedar_best_of_its_runs_and_says_how_many():
    """benchmarks.nexmark.run times each query inline (and on Ray) ``--runs`` times, keeps the
    best and every run's seconds; a query whose first run is long runs fewer times, and the
    table says so."""
    from benchmarks.nexmark import run as nr

    suite = nr.measure(3_000, 500, ["Q0", "Q2"], ray=False, spark=False, flink=False,
                       runs=nr.Runs(3, long_s=60.0, long_runs=1))
    for name in ("Q0", "Q2"):
        r = suite.rows[name]
        assert len(r["inline_runs"]) == 3 and r["inline"] == min(r["inline_runs"])
        assert "ray" not in r
    # query | stream | events | runs
    assert [line.split(" | ")[3] for line in suite.table().splitlines()[2:]] == ["3", "3"]
    short = nr.measure(3_000, 500, ["Q0"], ray=False, spark=False, flink=False,
                       runs=nr.Runs(3, long_s=0.0, long_runs=1))
    assert len(short.rows["Q0"]["inline_runs"]) == 1
    assert "| 1 (first > 0 s) |" in short.table()
    assert nr.fmt_runs([0.5, 0.25, 0.375]) == "best 0.25 s of 0.50, 0.25, 0.38"


def test_nexmark_runs_in_a_process_of_its_own_and_sends_back_no_table():
    """The suite's Nexmark part runs apart (its tables and expected rows leave with its
    process) and comes back as the same small Suite a run in this process gives."""
    import pickle

    from benchmarks.nexmark import run as nr

    runs = nr.Runs(1)
    here = nr.measure(3_000, 500, ["Q1"], ray=False, spark=False, flink=False, runs=runs)
    apart = nr.measure_apart(3_000, 500, ["Q1"], ray=False, spark=False, flink=False,
                             runs=runs)
    assert apart.events == here.events and here.events["Q1"] > 0
    assert apart.sizes == here.sizes and set(apart.rows["Q1"]) == set(here.rows["Q1"])
    assert len(pickle.dumps(apart)) < 10_000


@pytest.mark.slow
def test_a_spark_session_ended_takes_its_jvm_and_the_next_has_its_own_settings():
    """In a process of its own: this session's Spark (one JVM per process) stays whole."""
    code = textwrap.dedent("""
        from pyspark import SparkContext
        from benchmarks import spark_sss as sp

        spark = sp.session("1g")
        proc = SparkContext._gateway.proc
        assert spark.range(3).count() == 3
        sp.end_session(spark)
        assert proc.poll() is not None and SparkContext._gateway is None
        spark = sp.session("2g")
        assert spark.sparkContext.getConf().get("spark.driver.memory") == "2g"
        sp.end_session(spark)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_nexmark_streams_cut_from_one_and_outputs_compared_fast():
    """Each Nexmark query runs over the first N events of one generated stream (persons,
    auctions and bids in Nexmark's proportions); a query that reads no bids gets its own
    stream's persons and auctions, the same as a stream of that size with bids has. Outputs
    of column batches are compared as sorted Arrow tables, others by their CHT; other
    engines' rows as counted rows, or as row hashes past EXACT_ROWS."""
    from benchmarks.nexmark import generator as gen
    from benchmarks.nexmark import queries as nq
    from benchmarks.nexmark import run as nr
    from operators.columns import Columns

    of = {"Q0": 5_000, "Q2": 2_000, "Q3": 2_000}
    by_key, _ = nr.streams(of, seed=1, delay=100)
    q2, q3 = by_key[nr.key(of, "Q2")], by_key[nr.key(of, "Q3")]
    assert [q2[e].num_rows for e in gen.ENTITIES] == [40, 120, 1_840]  # 1 : 3 : 46
    assert sorted(q3) == ["auction", "person"]
    assert q3["auction"].equals(gen.generate(2_000, seed=1, inter_event_delay=100)["auction"])
    whole = by_key[nr.key(of, "Q0")]
    assert q2["bid"].equals(whole["bid"].slice(0, 1_840))

    a = Columns(np.arange(3), np.arange(3), None, {"v": np.array([1.0, 2.0, 3.0])})
    b = Columns(np.arange(3), np.array([2, 0, 1]), None, {"v": np.array([3.0, 1.0, 2.0])})
    nr.check_same_output([b], [a])  # the same rows in another order
    with pytest.raises(AssertionError):
        nr.check_same_output([b], [Columns(np.arange(3), np.arange(3), None,
                                           {"v": np.array([1.0, 2.0, 4.0])})])

    rows = [(1, "a"), (2, "b"), (2, "b")]
    for limit in (10, 1):  # counted, then hashed
        old, nr.EXACT_ROWS = nr.EXACT_ROWS, limit
        try:
            want = nr.Expected.of(rows, 3)
        finally:
            nr.EXACT_ROWS = old
        q = nq.QUERIES["Q2"]
        assert nr.compare(q, want, [(2, "b"), (1, "a"), (2, "b")]).startswith("yes (3 rows")
        assert nr.compare(q, want, [(1, "a"), (2, "b")], "Flink").startswith(
            "NO: 1 rows only in cedar")


def test_nexmark_output_rows_of_column_batches_are_the_cht():
    from benchmarks.nexmark import generator as gen
    from benchmarks.nexmark import queries as nq
    from benchmarks.nexmark import run as nr
    from operators.cht import cht_rows

    tables = gen.generate(3_000, seed=2)
    for name in ("Q0", "Q5"):  # insert-only column batches; a window's output
        out = nr.collect(nq.QUERIES[name], tables, runtime="inline")
        assert sorted(map(repr, nr.output_rows(out))) == sorted(map(repr, cht_rows(out)))


def test_detect_long_run_stays_bounded_and_the_report_has_its_section():
    from benchmarks import detect as bd

    long = bd.long_run(300_000)
    assert long["bounded"] and len(long["samples"]) >= 4
    assert long["most"] <= bd.WITHIN_TICKS and long["samples"][-1][0] == 300_000
    report = bench.Report(bench.QUICK)
    report.detect = {"column_eps": 2e6, "column_cpu_eps": 2e6, "column_load": 0.5,
                     "long": long, "long_load": 0.5}
    lines = bench.detect_lines(report, lambda ok: "met" if ok else "missed")
    assert "## detect" in lines and sum(line.endswith("| met |") for line in lines) == 2
    # Flink's WITHIN: the same interval, written as minutes and seconds (SECOND alone has a
    # leading precision of 2 digits)
    assert "'1:40.001' MINUTE TO SECOND" in bd.flink_sql(bd.FLINK_WITHIN_TICKS)


def test_detect_beside_flink_compares_the_same_matches_inline():
    from benchmarks import detect as bd

    table = bd.arrow(bd.generate(30_000, seed=3, step=bd.FLINK_STEP_TICKS))
    ours = bd.matches(bd.query(table).collect(runtime="inline"))
    op = bd.detect(within=bd.FLINK_WITHIN_TICKS)
    _, _, out = bd.run(op, list(bd.generate(30_000, seed=3, step=bd.FLINK_STEP_TICKS)),
                       rows=False)
    assert ours == Counter((p["A"][0]["k"], s, e - 1, sum(map(len, p.values())))
                           for s, e, p in bd.to_cht(out)) and ours


def test_per_key_benchmark_runs_and_its_outputs_are_equal():
    """The per-key cost benchmark itself, briefly, in a process of its own."""
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-m", "benchmarks.per_key", "--events", "20000",
                           "--no-ray"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "output CHTs equal" in done.stdout
    line = done.stdout.strip().splitlines()[-1]
    got = dict(kv.split("=") for kv in line.split()[1:])
    assert line.startswith("RESULT ") and float(got["inline_per_key_eps"]) > 0
