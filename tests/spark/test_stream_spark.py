"""The Stream's Spark entry points: from_spark (batch and streaming; the streaming source's
restarts are in test_from_spark_stream.py), to_spark, write and the exactly-once
to_spark_stream, inline and on Ray."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from operators.aggregates import Count
from operators.cht import to_cht
from operators.ingress import AdvanceTime, ingest
from tests.kit import assert_equivalent
from topology import Stream
from topology.spark.sink import FinalRowsSink, cht_to_arrow

pytestmark = pytest.mark.spark

ROWS = [{"meter": f"m{i % 3}", "ts": 1_000_000 * i + (7 if i % 5 == 0 else 0), "kwh": i / 10}
        for i in range(60)]


def _query(source: Stream) -> Stream:
    return (source.where(lambda r: r["kwh"] > 0.5)
            .group_apply(lambda r: r["meter"],
                         lambda g: g.tumbling_window(10_000_000).aggregate(Count())))


def _expected() -> list:
    return to_cht(_query(Stream.from_rows(ROWS, start="ts")).collect(runtime="inline"))


def test_from_spark_batch_equals_from_rows(spark, runtime):
    df = spark.createDataFrame(pa.Table.from_pylist(ROWS))
    out = _query(Stream.from_spark(df, start="ts")).collect(runtime=runtime)
    assert_equivalent(out, _expected())


def test_from_spark_streaming_reads_micro_batches(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    table = pa.Table.from_pylist(ROWS)
    pq.write_table(table.slice(0, 30), src / "a.parquet")
    pq.write_table(table.slice(30), src / "b.parquet")
    os.utime(src / "a.parquet", (1, 1))
    os.utime(src / "b.parquet", (2, 2))
    schema = spark.createDataFrame(table).schema
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))
    source = Stream.from_spark(df, start="ts", advance=AdvanceTime(every=10),
                               checkpoint=str(tmp_path / "checkpoint"))
    out = _query(source).collect(runtime="inline")
    assert_equivalent(out, _expected())


def test_to_spark_and_write(spark, tmp_path):
    q = _query(Stream.from_rows(ROWS, start="ts"))
    df = q.to_spark(spark, runtime="inline")
    assert df.columns == ["start", "end", "key", "value"]
    assert df.count() == len(_expected())
    q.write(str(tmp_path / "out"), spark=spark, runtime="inline")
    back = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(r["value"] for r in back.collect()) == sorted(p[1] for _, _, p in _expected())


@pytest.mark.parametrize("runtime", ["inline", pytest.param("ray", marks=pytest.mark.ray)])
def test_to_spark_stream_is_exactly_once_across_a_restart(runtime, tmp_path, request):
    if runtime == "ray":
        request.getfixturevalue("ray_session")
    path = str(tmp_path / "sink")
    q = _query(Stream.from_rows(ROWS, start="ts", advance=AdvanceTime(every=7)))
    first = q.to_spark_stream(path, runtime=runtime)
    assert first.committed
    # a restart on the same path: the query runs again from the beginning, nothing is doubled
    q.to_spark_stream(path, runtime=runtime)
    files = pq.read_table(path).to_pylist()
    expected = cht_to_arrow(_expected()).to_pylist()
    key = lambda r: (r["start"], r["end"], r["key"], r["value"])  # noqa: E731
    assert sorted(files, key=key) == sorted(expected, key=key)
    assert isinstance(first, FinalRowsSink)


def test_ingest_counts_agree(spark):
    # the same rows through Spark and through plain ingestion give the same messages
    df = spark.createDataFrame(pa.Table.from_pylist(ROWS))
    via_spark = Stream.from_spark(df, start="ts").collect(runtime="inline")
    assert via_spark == ingest(ROWS, start="ts")
