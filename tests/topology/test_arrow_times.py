"""Arrow time columns of every integer and timestamp unit (issue #28, item 7).

Before, a ``uint64`` time column failed with Arrow's raw ``ArrowInvalid`` once a value passed
int64, and a nanosecond timestamp column was cut to microseconds silently. Now a uint64 column
is read as ticks like an int64 one, a value beyond int64 being a time outside the axis (a dead
letter that names the column, as an int64 or timestamp too far out is); a nanosecond column is
read when every value is a whole microsecond, and one finer than that is refused with how to
cast it (Spark refuses nanosecond Parquet timestamps; Arrow's own safe cast refuses to lose
them), where the stream is built for a table, on reading for a stream of batches.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from operators.cht import to_cht
from operators.errors import OperatorError
from tests.reliability import records, run_dag
from topology import Stream
from topology.building.arrow_reader import arrow_batches

BIG = 2**63 + 4  # beyond int64


def test_a_uint64_time_column_is_read_as_ticks(runtime):
    unsigned = pa.table({"ts": pa.array([5, 1, 3], pa.uint64()), "v": [1, 2, 3]})
    signed = pa.table({"ts": pa.array([5, 1, 3], pa.int64()), "v": [1, 2, 3]})
    got = to_cht(Stream.from_arrow(unsigned, start="ts").collect(runtime))
    assert got == to_cht(Stream.from_arrow(signed, start="ts").collect(runtime))
    assert [(s, e) for s, e, _ in got] == [(1, 2), (3, 4), (5, 6)]


def test_a_uint64_time_beyond_int64_is_a_dead_letter_naming_the_column():
    table = pa.table({"ts": pa.array([1, BIG, 2], pa.uint64()),
                      "te": pa.array([9, 9, BIG], pa.uint64()), "v": [1, 2, 3]})
    out, dag, _ = run_dag(Stream.from_arrow(table, start="ts"))
    [dead] = records(dag, "dead_letters")
    assert dead.item["ts"] == BIG and dead.item["v"] == 2
    assert "column 'ts'" in dead.reason and "outside" in dead.reason
    assert [s for s, _, _ in to_cht(out)] == [1, 2]
    # an end column too: each row names its own column
    out, dag, _ = run_dag(Stream.from_arrow(table, start="ts", end="te", shape="interval"))
    reasons = sorted(d.reason for d in records(dag, "dead_letters"))
    assert len(reasons) == 2 and "column 'te'" in reasons[0] and "column 'ts'" in reasons[1]
    assert to_cht(out) == [(1, 9, {"ts": 1, "te": 9, "v": 1})]


def test_a_uint64_time_beyond_int64_on_ray(ray_session):
    table = pa.table({"ts": pa.array([1, BIG, 2], pa.uint64()), "v": [1, 2, 3]})
    q = Stream.from_arrow(table, start="ts").deploy("uint64-times", history=True)
    try:
        q.wait()
        [dead] = q.dead_letters()
        assert dead.item["ts"] == BIG and "column 'ts'" in dead.reason
        assert sorted(s for s, _, _ in q.snapshot()) == [1, 2]
    finally:
        q.stop()


def test_whole_microseconds_in_a_nanosecond_column_are_read(runtime):
    table = pa.table({"ts": pa.array([3_000, 1_000, 2_000_000], pa.timestamp("ns", "UTC"))})
    got = to_cht(Stream.from_arrow(table, start="ts").collect(runtime))
    assert [s for s, _, _ in got] == [1, 3, 2_000]


def test_a_nanosecond_column_finer_than_microseconds_is_refused_where_it_is_built():
    table = pa.table({"ts": pa.array([1_000, 2_001, 3_999], pa.timestamp("ns", "UTC"))})
    with pytest.raises(ValueError) as error:
        Stream.from_arrow(table, start="ts")
    message = str(error.value)
    assert "time column 'ts' holds nanosecond timestamps finer than a microsecond" in message
    assert "(2 of 3 values, the first 1970-01-01T00:00:00.000002001)" in message
    assert "pyarrow.timestamp('us', tz='UTC'), safe=False" in message
    # the cast the message gives is accepted, truncated as Spark truncates
    import pyarrow.compute as pc

    fixed = table.set_column(0, "ts", pc.cast(table["ts"], pa.timestamp("us", tz="UTC"),
                                              safe=False))
    got = to_cht(Stream.from_arrow(fixed, start="ts").collect("inline"))
    assert [s for s, _, _ in got] == [1, 2, 3]


def test_a_finer_nanosecond_batch_is_refused_on_reading(runtime):
    # a stream of batches is read lazily: the batch that holds the value fails the run
    table = pa.table({"ts": pa.array([1_000, 2_500], pa.timestamp("ns")), "v": [1, 2]})
    with pytest.raises(ValueError, match="cast the column to microseconds"):
        next(arrow_batches([table], start="ts"))
    q = Stream.from_arrow(iter([table]), start="ts")
    with pytest.raises((ValueError, OperatorError), match="finer than a microsecond"):
        q.collect(runtime)
