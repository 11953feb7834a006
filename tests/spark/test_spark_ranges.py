"""A batch DataFrame over parquet files read without a shuffle: one filtered scan per range.

When ``df`` is a projection and filter of parquet files whose row groups each hold a narrow
span of time (a table appended in time order, whatever the order of its files), the reader
skips Spark's sort: each range ``[lo, hi)`` of the sampled bounds is one Spark job
``df.where(lo <= key < hi)`` (parquet's statistics skip the row groups outside it), sorted
in the driver with Arrow, the next range read while this one is consumed
(:func:`topology.spark.ranges.sorted_ranges`). The meaning must not change: the CHT is the
query over the rows sorted by time, whatever the files' order, ties and null times (dead
letters) included, and the driver holds at most two ranges.
"""

from __future__ import annotations

import math
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.aggregates import Count
from operators.ingress import AdvanceTime
from tests.kit import ON_RAY, assert_equivalent
from topology import Stream
from topology.spark import direct as spark_direct
from topology.spark import ranges as spark_ranges
from topology.spark import source as spark_source

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::UserWarning")]


def _counts(source: Stream, size: int) -> Stream:
    return source.group_apply(lambda r: r["k"], lambda g: g.tumbling_window(size)
                              .aggregate(Count()))


def _write(path: str, rows: list[dict], files: int, group_rows: int, seed: int,
           clustered: bool, timestamps: bool = False, statistics: bool = True) -> str:
    """``rows`` as ``files`` parquet files of row groups of ``group_rows`` rows: with
    ``clustered``, chunks of the rows sorted by time dealt to the files in a random order
    (each row group a narrow span of time, the files in no order); else the rows shuffled."""
    rng = random.Random(seed)
    if clustered:
        ordered = sorted(rows, key=lambda r: (r["ts"] is None, r["ts"] or 0))
        chunks = [ordered[i:i + group_rows] for i in range(0, len(ordered), group_rows)]
        rng.shuffle(chunks)
    else:
        shuffled = rows[:]
        rng.shuffle(shuffled)
        chunks = [shuffled[i:i + group_rows] for i in range(0, len(shuffled), group_rows)]
    kind = pa.timestamp("us", tz="UTC") if timestamps else pa.int64()
    schema = pa.schema([("ts", kind), ("k", pa.string()), ("v", pa.int64())])
    os.makedirs(path, exist_ok=True)
    for f in range(files):
        with pq.ParquetWriter(os.path.join(path, f"part-{f:03d}.parquet"), schema,
                              write_statistics=statistics) as out:
            for chunk in chunks[f::files]:
                out.write_table(pa.Table.from_pylist(chunk, schema), row_group_size=group_rows)
    return path


@st.composite
def tables(draw):
    n = draw(st.integers(1, 80))
    rows = [{"ts": None if draw(st.integers(0, 12)) == 0 else draw(st.integers(-20, 40)),
             "k": draw(st.sampled_from("ab")), "v": i} for i in range(n)]
    return rows


@settings(ON_RAY, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=tables(), files=st.integers(1, 4), group_rows=st.integers(1, 12),
       partition_rows=st.integers(2, 30), how=st.sampled_from(["direct", "scan", "sort"]),
       clustered=st.booleans(), every=st.integers(1, 6), delay=st.integers(0, 5),
       size=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_parquet_ranges_give_the_sorted_tables_cht(
        spark, tmp_path_factory, rows, files, group_rows, partition_rows, how, clustered,
        every, delay, size, seed):
    # every way of reading (the row groups merged by pyarrow, filtered scans, or Spark's sort
    # when the scans would cost more) gives the query over the rows sorted by time; null
    # times are dead letters
    path = _write(str(tmp_path_factory.mktemp("t")), rows, files, group_rows, seed, clustered)
    df = spark.read.parquet(path)
    before, direct = spark_ranges._SCAN_FACTOR, spark_direct._DIRECT
    scan = how == "scan"
    spark_ranges._SCAN_FACTOR = math.inf if scan else 0.0
    spark_direct._DIRECT = how == "direct"
    try:
        watch: dict = {}
        got = pa.Table.from_batches(list(spark_source.ordered_record_batches(
            df, "ts", partition_rows=partition_rows, watch=watch)))
        advance = AdvanceTime(every=every, delay=delay)
        stream = Stream.from_spark(df, start="ts", advance=advance,
                                   partition_rows=partition_rows)
        out = stream.collect(runtime="inline")
        counted = _counts(stream, size).collect(runtime="inline")
        messages, ingress = spark_source.ingest_spark(df, "ts", partition_rows=partition_rows)
    finally:
        spark_ranges._SCAN_FACTOR, spark_direct._DIRECT = before, direct
    ranges = -(-len(rows) // partition_rows)
    nulls = sum(r["ts"] is None for r in rows)
    if how == "direct" and len(rows) <= partition_rows:  # every group fits: no refusal
        assert watch["path"] == "direct"
    elif how != "direct" and ranges > 1 and nulls < len(rows):
        assert watch["path"] == ("scan" if scan else "sort")
    times = got["ts"].to_pylist()
    assert times[:nulls] == [None] * nulls and times[nulls:] == sorted(times[nulls:])
    assert sorted(got["v"].to_pylist()) == list(range(len(rows)))
    if watch["path"] in ("scan", "one"):
        assert watch["held_peak"] <= 2 and sum(watch["range_rows"]) == len(rows)
    if watch["path"] == "direct":
        assert watch["held_peak_rows"] <= 2 * partition_rows
    ordered = sorted((r for r in rows if r["ts"] is not None), key=lambda r: r["ts"])
    want = Stream.from_rows(ordered, start="ts", advance=advance)
    assert_equivalent(out, want.collect(runtime="inline"))
    assert_equivalent(counted, _counts(want, size).collect(runtime="inline"))
    assert len(ingress.dead_letters) == nulls
    assert all("start time is missing" in d.reason for d in ingress.dead_letters)
    assert_equivalent(messages, want.collect(runtime="inline"))


def test_time_ordered_files_are_read_without_a_shuffle_two_ranges_at_a_time(
        spark, tmp_path, monkeypatch):
    # 40,000 rows of timestamps in clustered row groups, 8 files in no order, ranges of 1,000
    # rows: one filtered scan per range, no sort in Spark, and the driver never holds more
    # than two ranges (checked by the reader's count and by Arrow's own allocations)
    rng = random.Random(3)
    rows = [{"ts": rng.randrange(0, 10**9), "k": "ab"[i % 2], "v": i} for i in range(40_000)]
    df = spark.read.parquet(_write(str(tmp_path / "t"), rows, 8, 500, 5, True, True))
    assert spark_ranges.time_ordered_files(df, "ts")
    monkeypatch.setattr(spark_direct, "_DIRECT", False)  # Spark's scans (the merge: below)
    watch: dict = {}
    base = pa.total_allocated_bytes()
    peak, latest, count = 0, None, 0
    for batch in spark_source.ordered_record_batches(df, "ts", partition_rows=1_000,
                                                     watch=watch):
        peak = max(peak, pa.total_allocated_bytes() - base)
        ts = batch.column(0).cast(pa.int64()).to_pylist()
        assert ts == sorted(ts) and (latest is None or ts[0] >= latest)
        latest, count = ts[-1], count + batch.num_rows
        del batch
    assert count == 40_000
    assert watch["path"] == "scan" and watch["ranges"] >= 36
    assert watch["held_peak"] <= 2
    assert max(watch["range_rows"]) <= 1_500  # each range about partition_rows
    whole = pa.Table.from_pylist(rows).nbytes
    assert peak < whole / 5, (peak, whole)  # ~2 of 40 ranges (and their sort), not the table


def test_shuffled_files_or_no_statistics_are_sorted_by_spark(spark, tmp_path):
    # where the filtered scans would each read most of the table (row groups spanning all
    # times, or no statistics to skip by), Spark's one sort is cheaper: the reader takes it
    rows = [{"ts": (i * 7_919) % 5_000, "k": "a", "v": i} for i in range(5_000)]
    for name, clustered, statistics in (("shuffled", False, True), ("nostats", True, False)):
        df = spark.read.parquet(_write(str(tmp_path / name), rows, 4, 250, 1, clustered,
                                       statistics=statistics))
        watch: dict = {}
        got = pa.Table.from_batches(list(spark_source.ordered_record_batches(
            df, "ts", partition_rows=500, watch=watch)))
        assert watch["path"] == "sort", name
        assert got["ts"].to_pylist() == sorted(r["ts"] for r in rows)


def test_only_a_deterministic_projection_of_files_is_scanned_by_range(spark, tmp_path):
    # a time computed at random, or a plan that is more than a scan (an aggregate, a join),
    # would be computed again by every range's scan: those are sorted by Spark
    from pyspark.sql import functions as F

    rows = [{"ts": i, "k": "a", "v": i} for i in range(100)]
    df = spark.read.parquet(_write(str(tmp_path / "t"), rows, 2, 10, 1, True))
    assert spark_ranges.time_ordered_files(df, "ts")
    assert spark_ranges.time_ordered_files(df.where(F.col("v") > 3).select("ts", "v"), "ts")
    assert not spark_ranges.time_ordered_files(
        df.withColumn("ts", F.col("ts") + (F.rand(1) * 10).cast("long")), "ts")
    assert not spark_ranges.time_ordered_files(df.groupBy("ts").count(), "ts")
    assert not spark_ranges.time_ordered_files(df.join(df.select("v"), "v"), "ts")
    assert not spark_ranges.time_ordered_files(spark.range(10).withColumnRenamed("id", "ts"),
                                               "ts")
