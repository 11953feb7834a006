"""A batch DataFrame of time-ordered parquet files read by pyarrow, no row through the JVM.

When ``df`` is a projection of columns of parquet files whose row groups all carry statistics
of the time column, the reader merges the row groups itself
(:func:`topology.spark.direct.merged_groups`): in the order of their earliest time, each row
group read with pyarrow, the rows before the next group's earliest time handed on sorted
(Arrow's sort only when they are not in order already). Spark only plans which files the
DataFrame is. The meaning must not change: the rows sorted by time, null times first, the
schema Spark's ``toArrow`` gives, and the driver holds a bounded number of rows.
"""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit import PROPERTY
from topology.spark import direct as spark_direct
from topology.spark import source as spark_source

SCHEMA = pa.schema([("ts", pa.int64()), ("k", pa.string()), ("v", pa.int64())])


def _write(path: str, chunks: list[list[dict]], files: int, group_rows: int,
           statistics: bool = True, schema: pa.Schema = SCHEMA) -> list[str]:
    """``chunks`` dealt to ``files`` parquet files in turn, row groups of ``group_rows``."""
    os.makedirs(path, exist_ok=True)
    uris = []
    for f in range(files):
        name = os.path.join(path, f"part-{f:03d}.parquet")
        with pq.ParquetWriter(name, schema, write_statistics=statistics) as out:
            for chunk in chunks[f::files]:
                out.write_table(pa.Table.from_pylist(chunk, schema), row_group_size=group_rows)
        uris.append("file://" + name)
    return uris


def _merged(uris: list[str], limit: int, watch: dict | None = None) -> pa.Table | None:
    plan = spark_direct.parquet_plan(uris, ["ts", "k", "v"], SCHEMA, "ts", limit)
    if plan is None:
        return None
    batches = list(spark_direct.merged_groups(plan, "ts", {} if watch is None else watch))
    return pa.Table.from_batches(batches, SCHEMA)


def _check_sorted(got: pa.Table, rows: list[dict]) -> None:
    times = got["ts"].to_pylist()
    nulls = sum(r["ts"] is None for r in rows)
    assert times[:nulls] == [None] * nulls
    assert times[nulls:] == sorted(r["ts"] for r in rows if r["ts"] is not None)
    assert sorted(zip(got["v"].to_pylist(), times, got["k"].to_pylist())) == sorted(
        (r["v"], r["ts"], r["k"]) for r in rows)


@st.composite
def layouts(draw):
    """Rows near time order (each moved by up to ``jitter``: row groups overlap), a few null
    times and ties, cut into chunks dealt to files in a random order."""
    n = draw(st.integers(1, 120))
    jitter = draw(st.integers(0, 30))
    nulls = draw(st.sampled_from([0.0, 0.05, 1.0]))
    ties = draw(st.sampled_from([1, 3]))
    rng = random.Random(draw(st.integers(0, 2**16)))
    rows = [{"ts": None if rng.random() < nulls else i // ties + rng.randrange(jitter + 1),
             "k": "ab"[i % 2], "v": i} for i in range(n)]
    chunk = draw(st.integers(1, 40))
    chunks = [rows[i:i + chunk] for i in range(0, n, chunk)]
    rng.shuffle(chunks)
    return rows, chunks, draw(st.integers(1, 4)), draw(st.integers(1, 20))


@settings(PROPERTY, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts(), limit=st.integers(1, 150))
def test_the_merged_row_groups_are_the_rows_sorted_by_time(tmp_path_factory, layout, limit):
    # the merge against a sort of the whole table: null times first, then every row in time
    # order (ties in any order), each row once; refused only when it would hold more than
    # ``limit`` rows, and then never holding more
    rows, chunks, files, group_rows = layout
    uris = _write(str(tmp_path_factory.mktemp("t")), chunks, files, group_rows)
    watch: dict = {}
    got = _merged(uris, limit, watch)
    whole = _merged(uris, len(rows))
    assert whole is not None  # with room for the whole table the merge always reads it
    _check_sorted(whole, rows)
    if got is not None:
        _check_sorted(got, rows)
        assert watch["held_peak_rows"] <= limit


def test_row_groups_without_statistics_are_not_merged(tmp_path):
    rows = [{"ts": i, "k": "a", "v": i} for i in range(50)]
    uris = _write(str(tmp_path), [rows], 1, 10, statistics=False)
    assert _merged(uris, 1_000) is None


def test_in_order_groups_are_not_sorted_again_and_disordered_ones_are(tmp_path):
    ordered = [{"ts": i, "k": "a", "v": i} for i in range(100)]
    watch: dict = {}
    got = _merged(_write(str(tmp_path / "a"), [ordered], 1, 10), 1_000, watch)
    assert got is not None and got["v"].to_pylist() == list(range(100))
    assert watch["sorted_groups"] == 0
    shuffled = ordered[:]
    random.Random(1).shuffle(shuffled)
    watch = {}
    got = _merged(_write(str(tmp_path / "b"), [shuffled], 1, 100), 1_000, watch)
    assert got is not None and got["ts"].to_pylist() == list(range(100))
    assert watch["sorted_groups"] == 1


# -- through Spark ----------------------------------------------------------------------------
def _table(tmp_path, n=40_000, files=8, group_rows=500, seed=5):
    """``n`` rows of timestamps in clustered row groups, dealt to ``files`` files in no
    order (a table appended in time order by several writers)."""
    rng = random.Random(seed)
    rows = sorted(({"ts": rng.randrange(0, 10**9), "k": "ab"[i % 2], "v": i}
                   for i in range(n)), key=lambda r: r["ts"])
    chunks = [rows[i:i + group_rows] for i in range(0, n, group_rows)]
    rng.shuffle(chunks)
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("k", pa.string()),
                        ("v", pa.int64())])
    _write(str(tmp_path), chunks, files, group_rows, schema=schema)
    return rows


@pytest.mark.spark
def test_time_ordered_parquet_is_merged_without_a_spark_job(spark, tmp_path):
    # no row leaves the JVM (no Spark job at all), the driver holds about two row groups,
    # and the rows and their schema are exactly Spark's own, sorted
    rows = _table(tmp_path / "t")
    df = spark.read.parquet(str(tmp_path / "t"))
    sc = spark.sparkContext
    sc.setJobGroup("cedar-direct-test", "the direct read")
    watch: dict = {}
    base = pa.total_allocated_bytes()
    peak, got = 0, []
    for batch in spark_source.ordered_record_batches(df, "ts", partition_rows=1_000,
                                                     watch=watch):
        peak = max(peak, pa.total_allocated_bytes() - base)
        got.extend(batch.column(2).to_pylist())  # only the ids are kept here
        del batch
    assert list(sc.statusTracker().getJobIdsForGroup("cedar-direct-test")) == []
    sc.setJobGroup("other", "")
    assert watch["path"] == "direct" and watch["ranges"] == 80
    assert watch["held_peak_rows"] <= 2 * 500
    by_v = {r["v"]: r["ts"] for r in rows}
    assert [by_v[v] for v in got] == [r["ts"] for r in rows]
    whole = pa.Table.from_pylist(rows).nbytes
    assert peak < whole / 5, (peak, whole)
    first = next(spark_source.ordered_record_batches(df, "ts", partition_rows=1_000))
    assert first.schema.equals(df.toArrow().schema)


@pytest.mark.spark
def test_only_a_projection_of_columns_of_files_is_merged(spark, tmp_path):
    # a filter, a computed column or a partition column (not in the files) is Spark's to
    # compute: those are read through Spark; a projection of columns is merged, in its
    # columns' order and types
    from pyspark.sql import functions as F

    _table(tmp_path / "t", n=2_000)
    df = spark.read.parquet(str(tmp_path / "t"))

    def path_of(frame):
        watch: dict = {}
        got = pa.Table.from_batches(list(spark_source.ordered_record_batches(
            frame, "ts", partition_rows=10_000, watch=watch)))
        assert got["ts"].to_pylist() == sorted(got["ts"].to_pylist())
        return watch["path"], got

    path, got = path_of(df.select("v", "ts"))
    assert path == "direct" and got.schema.equals(df.select("v", "ts").toArrow().schema)
    assert path_of(df.where(F.col("v") > 3))[0] != "direct"
    assert path_of(df.withColumn("v", F.col("v") * 2))[0] != "direct"
    df.withColumn("day", F.lit(1)).write.partitionBy("day").parquet(str(tmp_path / "p"))
    assert path_of(spark.read.parquet(str(tmp_path / "p")))[0] != "direct"
