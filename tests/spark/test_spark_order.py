"""A batch DataFrame means its whole table, whatever the order of its partitions.

``Stream.from_spark`` reads a batch DataFrame sorted by time (:mod:`topology.spark.source`),
so a query over it equals the same query over its rows sorted by time (``from_rows``), however
Spark happened to split and order them, and with CTIs generated as often as one likes.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.aggregates import Count
from operators.cht import to_cht
from operators.ingress import AdvanceTime
from tests.kit import ON_RAY, assert_equivalent
from topology import Stream

pytestmark = pytest.mark.spark


def _counts(source: Stream, size: int) -> Stream:
    return source.group_apply(lambda r: r["k"], lambda g: g.tumbling_window(size)
                              .aggregate(Count()))


def test_partition_order_loses_no_event(spark, runtime):
    # The finding: 40,000 rows repartitioned 4 ways (each partition spans the whole time
    # range, as the files of a multi-file table do), a CTI every 1,000 rows. Read in partition
    # order, the windows counted 1,017 events; the rest were "late" behind CTIs from earlier
    # partitions and dropped.
    rows = [{"ts": (i * 7_919) % 40_000 * 1_000, "k": i % 3} for i in range(40_000)]
    df = spark.createDataFrame(pa.Table.from_pylist(rows)).repartition(4)
    advance = AdvanceTime(every=1_000)
    out = _counts(Stream.from_spark(df, start="ts", advance=advance), 1_000_000).collect(
        runtime=runtime)
    cht = to_cht(out)
    assert sum(count for _, _, (_, count) in cht) == 40_000
    ordered = sorted(rows, key=lambda r: r["ts"])
    assert_equivalent(cht, _counts(Stream.from_rows(ordered, start="ts", advance=advance),
                                   1_000_000).collect(runtime="inline"))


@st.composite
def tables(draw):
    n = draw(st.integers(0, 60))
    shape = draw(st.sampled_from(["point", "interval"]))
    rows = [{"ts": draw(st.integers(-20, 40)), "k": draw(st.sampled_from("ab")), "v": i}
            for i in range(n)]
    if shape == "interval":
        for r in rows:
            r["until"] = r["ts"] + draw(st.integers(1, 15))
    return rows, shape


@settings(ON_RAY, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(table=tables(), split=st.integers(1, 5), partition_rows=st.integers(1, 30),
       every=st.integers(1, 6), delay=st.integers(0, 5), size=st.integers(1, 12),
       seed=st.integers(0, 2**16))
def test_any_split_of_a_table_gives_the_sorted_tables_cht(
        spark, table, split, partition_rows, every, delay, size, seed):
    from pyspark.sql import functions as F

    rows, shape = table
    end = "until" if shape == "interval" else None
    advance = AdvanceTime(every=every, delay=delay)
    schema = "ts long, k string, v long" + (", until long" if end else "")
    df = spark.createDataFrame([tuple(r.values()) for r in rows], schema)
    df = df.repartition(split).sortWithinPartitions(F.rand(seed))  # any order at all
    got = Stream.from_spark(df, start="ts", end=end, shape=shape, advance=advance,
                            partition_rows=partition_rows)
    ordered = sorted(rows, key=lambda r: r["ts"])
    want = Stream.from_rows(ordered, start="ts", end=end, shape=shape, advance=advance)
    assert_equivalent(got.collect(runtime="inline"), want.collect(runtime="inline"))
    assert_equivalent(_counts(got, size).collect(runtime="inline"),
                      _counts(want, size).collect(runtime="inline"))


def test_every_column_type_reads_as_spark_collects_it(spark):
    # the ranges are read as raw Arrow record batches with the schema PySpark derives; every
    # kind of column must come out as toArrow() gives it
    df = spark.sql("""
        SELECT CAST(id % 7 AS BIGINT) AS ts, CAST(id AS STRING) AS s, id / 3.0 AS d,
               CAST(id / 3.0 AS DECIMAL(10, 3)) AS dec, id % 2 = 0 AS b,
               date_add(DATE'2024-01-01', CAST(id AS INT)) AS day,
               CAST(timestamp_micros(id) AS TIMESTAMP_NTZ) AS ntz,
               array(id, id + 1) AS arr, map('k', id) AS m, named_struct('x', id, 'y', 'z') AS st,
               CAST(NULL AS STRING) AS nothing
        FROM range(0, 40)""").repartition(3)
    from topology.spark.source import spark_row_batches

    got = [r for rows in spark_row_batches(df, start="ts", partition_rows=9) for r in rows]
    want = sorted(df.toArrow().to_pylist(), key=lambda r: (r["ts"], r["s"]))
    assert [r["ts"] for r in got] == sorted(r["ts"] for r in got)
    assert sorted(got, key=lambda r: (r["ts"], r["s"])) == want


@pytest.mark.parametrize("kind", ["timestamp", "date", "int"])
def test_ranges_cut_from_a_sample_come_in_time_order(spark, kind):
    # the ranges' bounds come from a sample of the key column and each row is hash-partitioned
    # by its range's label (topology.spark.ranges.sampled_ranges): range i must be partition
    # i, nulls first, every row once, whatever the order of the input's partitions
    from pyspark.sql import functions as F

    from topology.spark.ranges import sampled_ranges
    from topology.spark.source import ordered_record_batches

    column = {"timestamp": F.timestamp_micros(F.col("t") * 1_000_003),
              "date": F.date_from_unix_date((F.col("t") % 9_000).cast("int")),
              "int": F.col("t").cast("int")}[kind]
    df = (spark.range(0, 3_000).select(((F.col("id") * 7_919) % 3_001).alias("t"),
                                       F.col("id").alias("row"))
          .select(F.when(F.col("row") % 97 == 5, None).otherwise(column).alias("ts"), "row")
          .repartition(3))
    assert sampled_ranges(df, "ts", 6, 3_000) is not None  # not Spark's range partitioning
    batches = list(ordered_record_batches(df, "ts", partition_rows=500))
    got = pa.Table.from_batches(batches)
    assert sorted(got["row"].to_pylist()) == list(range(3_000))
    times = got["ts"].cast(pa.int32() if kind == "date" else pa.int64()).to_pylist()
    nulls = times.count(None)
    assert nulls == 31 and times[:nulls] == [None] * nulls
    assert times[nulls:] == sorted(times[nulls:])


def test_ranges_out_of_order_are_an_error_not_a_wrong_result(spark, monkeypatch):
    # if Spark ever placed the hashed labels otherwise, the reader must say so
    from pyspark.sql import functions as F

    from topology.spark import ranges as spark_ranges
    from topology.spark import source as spark_source

    df = spark.range(0, 2_000).select(((F.col("id") * 7_919) % 2_000).alias("ts")).repartition(2)
    monkeypatch.setattr(spark_ranges, "sampled_ranges",
                        lambda df, name, ranges, rows: (ranges, F.col(name)))  # any placement
    with pytest.raises(RuntimeError, match="'ts' out of order"):
        list(spark_source.ordered_record_batches(df, "ts", partition_rows=200))


@pytest.mark.parametrize("shape", ["point", "edge"])
def test_one_range_is_sorted_without_a_sample(spark, monkeypatch, shape):
    # a table of one range needs no bounds: no sampling job, just the sort (cedar demo reads
    # its readings so, four times)
    from pyspark.sql import functions as F

    from topology.spark import ranges as spark_ranges
    from topology.spark import source as spark_source

    def no_sample(*args):
        raise AssertionError("one range needs no sample")

    monkeypatch.setattr(spark_ranges, "sampled_ranges", no_sample)
    monkeypatch.setattr(type(spark.range(1)), "repartitionByRange", no_sample)
    df = (spark.range(0, 500).select(((F.col("id") * 7_919) % 500).alias("ts"),
                                     F.lit(None).cast("long").alias("until"), "id")
          .repartition(3))
    got = pa.Table.from_batches(list(spark_source.ordered_record_batches(
        df, "ts", "until" if shape == "edge" else None, shape=shape)))
    assert got["ts"].to_pylist() == list(range(500))
    assert sorted(got["id"].to_pylist()) == list(range(500))
