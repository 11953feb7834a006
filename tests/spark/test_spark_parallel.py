"""``from_spark(df, sources=N)``: partition-parallel ingestion of a batch DataFrame.

Spark writes the table as N parquet files, each sorted by time, and N sources (one per file)
feed a union whose CTI is the minimum of theirs::

    DataFrame (partitions in any order)
       │ repartition(N[, id]).sortWithinPartitions(time key).write.parquet(staging)
       ▼
    file 0 ─ spark[0] ─┐
    file 1 ─ spark[1] ─┼─ union (Cti = min) ─ query
    file 2 ─ spark[2] ─┘

So the result is still the query over the whole table: the same CHT as ``from_rows`` over the
rows sorted by time, whatever the order of the partitions. On Ray each source actor reads its
own file (``OperatorShell.pull``); the driver sends no batch.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from operators.aggregates import Count, Sum
from operators.cht import to_cht
from operators.errors import OperatorError
from operators.events import MAX_TIME
from operators.ingress import AdvanceTime
from tests.kit import ON_RAY, assert_equivalent
from topology import Stream
from topology.spark.held_runs import Batches

pytestmark = pytest.mark.spark


def _counts(source: Stream, size: int) -> Stream:
    return source.group_apply(lambda r: r["k"], lambda g: g.tumbling_window(size)
                              .aggregate(Count()))


@st.composite
def tables(draw):
    """Rows of one shape: points, intervals (``until``) or edges (a start row per ``id``,
    and for some ids an end row whose ``until`` closes it)."""
    shape = draw(st.sampled_from(["point", "interval", "edge"]))
    n = draw(st.integers(0, 50))
    rows = []
    for i in range(n):
        ts = draw(st.integers(-20, 40))
        row = {"id": i, "ts": ts, "k": draw(st.sampled_from("ab")), "until": None}
        if shape == "interval":
            row["until"] = ts + draw(st.integers(1, 15))
        rows.append(row)
        if shape == "edge" and draw(st.booleans()):
            rows.append(dict(row, until=ts + draw(st.integers(1, 15))))
    return rows, shape


def _time_key(row: dict) -> int:
    return row["until"] if row["until"] is not None else row["ts"]


@pytest.mark.timeout(240)
@settings(ON_RAY, print_blob=True, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          # each example runs Spark
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(table=tables(), split=st.integers(1, 5), sources=st.sampled_from([2, 4]),
       every=st.integers(1, 6), delay=st.integers(0, 5), size=st.integers(1, 12),
       seed=st.integers(0, 2**16))
def test_any_split_read_by_n_sources_gives_the_sorted_tables_cht(
        spark, runtime, table, split, sources, every, delay, size, seed):
    from pyspark.sql import functions as F

    rows, shape = table
    end = None if shape == "point" else "until"
    id_ = "id" if shape == "edge" else None
    advance = AdvanceTime(every=every, delay=delay)
    df = spark.createDataFrame([tuple(r.values()) for r in rows],
                               "id long, ts long, k string, until long")
    df = df.repartition(split).sortWithinPartitions(F.rand(seed))  # any order at all
    got = Stream.from_spark(df, start="ts", end=end, shape=shape, id=id_, advance=advance,
                            sources=sources)
    ordered = sorted(rows, key=_time_key) if shape == "edge" else sorted(rows,
                                                                         key=lambda r: r["ts"])
    want = Stream.from_rows(ordered, start="ts", end=end, shape=shape, id=id_, advance=advance)
    want_rows = to_cht(want.collect(runtime="inline"))
    assert_equivalent(got.collect(runtime=runtime), want_rows)
    if shape != "edge":  # (a window count of the open edges would only be speculative)
        assert_equivalent(_counts(got, size).collect(runtime=runtime),
                          _counts(want, size).collect(runtime="inline"))
    # the test can fail: every row is in the result, none late
    starts = len([r for r in rows if shape != "edge" or r["until"] is None])
    assert len(want_rows) == starts
    if shape == "edge":
        assert sum(1 for _, e, _ in want_rows if e != MAX_TIME) == len(rows) - starts


def test_partition_order_loses_no_event_with_four_sources(spark, runtime):
    # the finding of issue 13: 40,000 rows over 4 partitions that each span the whole time
    # range, a CTI every 1,000 rows; read in partition order only 1,017 were counted
    rows = [{"ts": (i * 7_919) % 40_000 * 1_000, "k": i % 3} for i in range(40_000)]
    df = spark.createDataFrame(pa.Table.from_pylist(rows)).repartition(4)
    advance = AdvanceTime(every=1_000)
    got = Stream.from_spark(df, start="ts", advance=advance, sources=4)
    # the merge of point parts is a point source: the keyed window path, as with one source
    assert "union(4 parts of one table)" in _counts(got, 1_000_000).explain()
    assert "as one keyed window aggregate" in _counts(got, 1_000_000).explain()
    cht = to_cht(_counts(got, 1_000_000).collect(runtime=runtime))
    assert sum(count for _, _, (_, count) in cht) == 40_000
    ordered = sorted(rows, key=lambda r: r["ts"])
    assert_equivalent(cht, _counts(Stream.from_rows(ordered, start="ts", advance=advance),
                                   1_000_000).collect(runtime="inline"))


@pytest.mark.ray
def test_on_ray_each_source_actor_reads_its_own_file(spark, ray_session, tmp_path):
    n = 30_000
    rows = [{"ts": (i * 7_919) % n, "k": i % 5, "v": float(i)} for i in range(n)]
    df = spark.createDataFrame(pa.Table.from_pylist(rows)).repartition(3)
    s = Stream.from_spark(df, start="ts", advance=AdvanceTime(every=5_000), sources=2,
                          staging=tmp_path / "staging")
    # a table in the driver's memory is fed by the driver, as it always was
    table = Stream.from_arrow(pa.table({"ts": [n, n + 1], "k": [0, 1], "v": [1.0, 2.0]}),
                              start="ts", name="table")
    q = s.where(lambda r: r["v"] >= 0).union(table).deploy("parallel-ingest", history=True)
    try:
        assert q.wait(120)
        stats = q.stats()
        sources = [stats["spark[0]"], stats["spark[1]"]]
        # every batch a source processed, it read itself; none came from a feeder
        assert all(st["batches_in"] == st["batches_pulled"] > 0 for st in sources), sources
        assert sum(st["events_in"] for st in sources) == n
        assert all(0 < st["events_in"] < n for st in sources)  # both did part of the work
        assert stats["table"]["batches_in"] > 0 and "batches_pulled" not in stats["table"]
        assert_equivalent(q.snapshot(), to_cht(Stream.from_rows(
            sorted(rows, key=lambda r: r["ts"]) + [{"ts": n, "k": 0, "v": 1.0},
                                                    {"ts": n + 1, "k": 1, "v": 2.0}],
            start="ts").collect(runtime="inline")))
    finally:
        q.stop()
    assert len(list((tmp_path / "staging").glob("table-*/part-*.parquet"))) == 2


def _failing_batches():
    yield {"ts": [0, 1], "v": [1.0, 2.0]}
    raise OSError("the disk went away")


@pytest.mark.ray
def test_a_source_that_fails_while_reading_fails_the_query_naming_its_step(ray_session):
    # what an unreadable staged file does to a pulled source, without Spark: the error is
    # reported like that of a failed push, with the step
    import numpy as np

    def make():
        for batch in _failing_batches():
            yield {k: np.asarray(v) for k, v in batch.items()}

    s = Stream._batched(Batches(make, feed="actor"), "ts", None, "point", None, None,
                        "reader")
    with pytest.raises(OperatorError, match=r"'reader'.*reading its source failed: OSError: "
                                            r"the disk went away"):
        s.collect(timeout_s=60)


def test_bad_arguments_are_refused_naming_the_column(spark):
    # the same contract as with one source: refused at once, before Spark writes anything
    df = spark.createDataFrame([(1, 2, "2024-01-01", "a")],
                               "ts long, until long, t string, k string")

    def parts(**kw):
        return Stream.from_spark(df, **{"start": "ts", "sources": 2, **kw})

    with pytest.raises(ValueError, match=r"start='nope' is not a column.*'ts'"):
        parts(start="nope")
    with pytest.raises(ValueError, match=r"end='nope' is not a column"):
        parts(end="nope", shape="interval")
    with pytest.raises(ValueError, match=r"id='nope' is not a column"):
        parts(id="nope")
    with pytest.raises(TypeError, match=r"start column 't' is string.*to_timestamp"):
        parts(start="t")
    with pytest.raises(TypeError, match=r"end column 'k' is string"):
        parts(end="k", shape="edge", id="k")
    with pytest.raises(TypeError, match=r"start=.*must be a column name"):
        parts(start=lambda r: r["ts"])
    with pytest.raises(TypeError, match=r"id=.*must be a column name.*same source"):
        parts(id=lambda r: r["k"])
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match=r"sources=.*int >= 1"):
            parts(sources=bad)


@pytest.mark.ray
def test_a_row_without_a_time_is_a_dead_letter_naming_the_column(spark, ray_session):
    df = spark.createDataFrame([(1, "a"), (None, "b"), (3, "c")], "ts long, k string")
    q = Stream.from_spark(df, start="ts", sources=2).deploy("parallel-bad-row", history=True)
    try:
        assert q.wait(120)
        [dead] = q.dead_letters()
        assert "start time is missing (column 'ts')" in dead.reason and dead.item["k"] == "b"
        assert sorted(p["k"] for _, _, p in q.snapshot()) == ["a", "c"]
    finally:
        q.stop()


@pytest.mark.ray
def test_a_from_spark_query_fused_into_one_actor(spark, ray_session):
    # deploy(fuse="all") sends each fused part's plan to its actor: the plan once carried the
    # source's logical node with its data (the DataFrame, which cannot leave the driver)
    rows = [{"ts": i * 1_000, "k": f"m{i % 3}", "v": float(i % 7)} for i in range(3_000)]
    df = spark.createDataFrame(pa.Table.from_pylist(rows))
    meta = Stream.from_rows([{"k": f"m{i}", "ts": 0, "g": i % 2} for i in range(3)],
                            start="ts", id="k", shape="edge", name="meta")
    q = (Stream.from_spark(df, start="ts", advance=AdvanceTime(every=500))
         .join(meta, on=("k", "k"), select=lambda r, m: {"g": m["g"], "v": r["v"]})
         .group_apply(lambda r: r["g"], lambda g: g.tumbling_window(100_000)
                      .aggregate(Sum("v"))))
    assert "one process:" in q.plan(fuse="all").explain()
    live = q.deploy("spark-fused-all", fuse="all", history=True, detached=False)
    try:
        assert live.wait(timeout_s=120)
        assert_equivalent(live.snapshot(), q.collect(runtime="inline"))
    finally:
        live.stop()
