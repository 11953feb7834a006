"""Payload fields that hold times reach parquet as timestamps, as ``start`` and ``end`` do:
a reading's ``ts`` (ticks once its source read it) is written as ``timestamp[us, tz=UTC]``
when the sink is told it holds times (``times=``, :func:`topology.building.times.time_fields` of the
query), row-wise, column-wise and by the exactly-once sink."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

from operators.events import MAX_TIME, Cti, Insert
from topology import Stream
from topology.building.times import time_fields
from topology.spark.sink import TIME_TYPE, FinalRowsSink, result_to_arrow

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TICK0 = 1_767_225_600_000_000


def _readings() -> Stream:
    # a table whose ts is a timestamp column: read as ticks, in the payloads too
    return Stream.from_arrow(pa.table({
        "meter": ["m1"] * 3, "kwh": [0.5] * 3,
        "ts": pa.array([T0 + dt.timedelta(seconds=s) for s in range(3)], TIME_TYPE)}),
        start="ts")


def test_the_time_fields_of_a_query_are_its_timestamp_sources_time_columns():
    assert time_fields(Stream.from_rows([{"ts": T0, "u": T0}], start="ts", end="u",
                                        shape="interval")._node) == {"ts", "u"}
    q = _readings().where(lambda r: r["kwh"] > 0).union(
        Stream.from_rows([{"t": 5}], start="t"))  # plain ticks: no time field
    assert time_fields(q._node) == {"ts"}


def test_a_payload_field_holding_ticks_is_written_as_a_timestamp(tmp_path):
    out = _readings().collect(runtime="inline")
    times = time_fields(_readings()._node)
    table = result_to_arrow(out, times)
    assert table.schema.field("ts").type == TIME_TYPE
    assert table.column("ts").to_pylist() == [T0 + dt.timedelta(seconds=s) for s in range(3)]
    assert table.schema.field("kwh").type == pa.float64()
    # without it, the ticks stay ints (what the demo's outputs showed)
    assert result_to_arrow(out).schema.field("ts").type == pa.int64()
    # the exactly-once sink likewise, ∞ as null
    sink = FinalRowsSink(None, str(tmp_path / "sink"), times=times)
    sink.on_messages([Insert("a", TICK0, TICK0 + 1, {"ts": TICK0, "until": MAX_TIME}),
                      Cti(TICK0 + 10)])
    sink.end()
    written = pq.read_table(str(tmp_path / "sink"))
    assert written.schema.field("ts").type == TIME_TYPE
    assert written.column("ts").to_pylist() == [T0]
    sink_all = FinalRowsSink(None, str(tmp_path / "sink2"), times=["ts", "until"])
    sink_all.on_messages([Insert("a", TICK0, TICK0 + 1, {"ts": TICK0, "until": MAX_TIME}),
                          Cti(TICK0 + 10)])
    assert pq.read_table(str(tmp_path / "sink2")).column("until").to_pylist() == [None]


def test_stream_write_and_the_exactly_once_sink_write_a_readings_ts_as_a_timestamp(tmp_path):
    # Stream.write and Stream.to_spark_stream (parquet, no Spark) name the time fields
    # themselves: the ts a reading was read with comes back a timestamp
    q = _readings().where(lambda r: r["kwh"] > 0)
    q.to_spark_stream(str(tmp_path / "stream"), runtime="inline")
    table = pq.read_table(str(tmp_path / "stream"))
    assert table.schema.field("ts").type == TIME_TYPE
    assert table.column("ts").to_pylist()[0] == T0
