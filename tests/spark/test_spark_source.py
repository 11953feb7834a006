"""The batch Spark source: DataFrames through Arrow into the same Ingress as ``from_rows``.

Every Spark test checks ``ingest_spark`` against ``operators.ingress.ingest`` over the same rows
written by hand with integer ticks, so the Spark path can only pass by producing exactly the
messages ``Stream.from_rows`` would.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from operators.events import MAX_TIME, Cti, Insert, Retract
from operators.ingress import AdvanceTime, Ingress, ingest, to_ticks
from topology.building.arrow_reader import arrow_row_batches
from topology.spark.source import ingest_spark, spark_row_batches

UTC = dt.UTC
T0 = dt.datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
S = 1_000_000  # ticks per second


def accounted(ingress: Ingress) -> bool:
    s = ingress.stats
    return s["received"] == s["processed"] + s["dropped"] + s["adjusted"] + s["dead_lettered"]


# -- Arrow -> rows, without Spark -----------------------------------------------------------
def test_time_columns_become_ticks_and_nulls_stay() -> None:
    t = pa.table({
        "ts": pa.array([T0, None, dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)],
                       pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2024, 3, 1), dt.date(1969, 12, 31), None], pa.date32()),
        "other": pa.array([T0, T0, T0], pa.timestamp("us", tz="UTC")),
    })
    [rows] = list(arrow_row_batches([t], start="ts", end="day"))
    assert [r["ts"] for r in rows] == [to_ticks(T0), None, -1]
    assert [r["day"] for r in rows] == [to_ticks(dt.date(2024, 3, 1)), -86_400 * S, None]
    assert rows[0]["other"] == T0  # columns that are not times of the event stay datetimes


def test_other_units_become_microseconds_and_finer_ones_are_refused() -> None:
    # whole microseconds in nanoseconds are read exactly; a finer one is refused, never cut
    ns = pa.array([-1_000, 1_000, None], pa.timestamp("ns"))
    s = pa.array([1, 2, 3], pa.timestamp("s", tz="Europe/Paris"))
    [rows] = list(arrow_row_batches([pa.table({"a": ns, "b": s})], start="a", end="b"))
    assert [r["a"] for r in rows] == [-1, 1, None]
    assert [r["b"] for r in rows] == [S, 2 * S, 3 * S]  # zoned timestamps are UTC instants
    finer = pa.table({"a": pa.array([-1, 1_999], pa.timestamp("ns")), "b": s[:2]})
    with pytest.raises(ValueError, match="finer than a microsecond"):
        list(arrow_row_batches([finer], start="a", end="b"))


def test_batches_hold_at_most_batch_rows() -> None:
    t = pa.table({"t": list(range(7))})
    sizes = [len(b) for b in arrow_row_batches([t, t.to_batches()[0]], "t", batch_rows=3)]
    assert sizes == [3, 3, 1, 3, 3, 1]
    with pytest.raises(ValueError, match="batch_rows"):
        next(arrow_row_batches([t], "t", batch_rows=0))


# -- DataFrames -----------------------------------------------------------------------------
@pytest.mark.spark
def test_timestamp_points_match_from_rows_sorted_by_time(spark) -> None:
    # A batch DataFrame means its whole table: it is read in time order, null times first.
    # table:  a 0s   b 2s   c 1s   d null   e 5s   f 3s          AdvanceTime(every=2, delay=0)
    # read:   d (no time: dead letter)  a  c  Cti(1s)  b  f  Cti(3s)  e   end: Cti(5s + 1)
    # In the table's own order c would have been late behind Cti(2s); sorted, nothing is.
    secs = [0, 2, 1, None, 5, 3]
    names = list("abcdef")
    table = pa.table({
        "ts": pa.array([None if s is None else T0 + dt.timedelta(seconds=s) for s in secs],
                       pa.timestamp("us", tz="UTC")),
        "name": names,
        "kwh": [float(i) for i in range(6)],
    })
    df = spark.createDataFrame(table)
    advance = AdvanceTime(every=2)
    messages, ingress = ingest_spark(df, start="ts", advance=advance)

    by_hand = [{"ts": None if s is None else to_ticks(T0) + s * S, "name": n, "kwh": float(i)}
               for i, (s, n) in enumerate(zip(secs, names))]
    in_time = sorted(by_hand, key=lambda r: -1 if r["ts"] is None else r["ts"])
    assert messages == ingest(in_time, start="ts", advance=advance, name="spark")
    assert messages[0] == Insert(0, to_ticks(T0), to_ticks(T0) + 1, by_hand[0])
    assert [m.time for m in messages if type(m) is Cti] == [
        to_ticks(T0) + 1 * S, to_ticks(T0) + 3 * S, to_ticks(T0) + 5 * S + 1]
    assert [d.item["name"] for d in ingress.dead_letters] == ["d"]
    assert "start time is missing" in ingress.dead_letters[0].reason
    assert ingress.late == []
    assert ingress.stats["received"] == 6 and ingress.stats["dead_lettered"] == 1
    assert accounted(ingress)


@pytest.mark.spark
def test_interval_and_edge_shapes_from_int_ticks(spark) -> None:
    # interval: [10, 20) ok, [30, 25) end before start -> dead letter, [40, null) -> dead letter
    # edge k1:  opens at 5 (no end) ... closed at 50 by a later row with an end
    schema = "k string, s long, e long, v int"
    df = spark.createDataFrame(
        [("i1", 10, 20, 1), ("i2", 30, 25, 2), ("i3", 40, None, 3)], schema)
    messages, ingress = ingest_spark(df, start="s", end="e", shape="interval", id="k",
                                     batch_rows=1)
    rows = [{"k": "i1", "s": 10, "e": 20, "v": 1}]
    assert messages == [Insert("i1", 10, 20, rows[0]), Cti(20)]
    assert [d.item["k"] for d in ingress.dead_letters] == ["i2", "i3"]
    assert "not after start" in ingress.dead_letters[0].reason
    assert "end time is missing" in ingress.dead_letters[1].reason
    assert accounted(ingress)

    edges = spark.createDataFrame(
        [("k1", 5, None, 1), ("k2", 7, None, 2), ("k1", None, 50, 3)], schema)
    messages, ingress = ingest_spark(edges, start="s", end="e", shape="edge", id="k")
    open_k1 = {"k": "k1", "s": 5, "e": None, "v": 1}
    open_k2 = {"k": "k2", "s": 7, "e": None, "v": 2}
    assert messages == [Insert("k1", 5, MAX_TIME, open_k1), Insert("k2", 7, MAX_TIME, open_k2),
                        Retract("k1", 5, MAX_TIME, 50, open_k1), Cti(50)]
    assert ingress.state_size() == 1 and accounted(ingress)  # k2 is still open


@pytest.mark.spark
def test_date_column_and_batching_do_not_change_the_stream(spark) -> None:
    df = spark.sql("SELECT date_add(DATE'2024-01-01', CAST(id % 5 AS INT)) AS d, id "
                   "FROM range(0, 23)")
    big, _ = ingest_spark(df, start="d", advance=AdvanceTime(every=4, delay=86_400 * S))
    small, ingress = ingest_spark(df, start="d", advance=AdvanceTime(every=4, delay=86_400 * S),
                                  batch_rows=3)
    assert big == small
    day0 = to_ticks(dt.date(2024, 1, 1))
    inserts = [m for m in big if type(m) is Insert]
    assert {m.start for m in inserts} <= {day0 + k * 86_400 * S for k in range(5)}
    assert ingress.stats["received"] == 23 and accounted(ingress)
    assert len(inserts) == ingress.stats["processed"]


@pytest.mark.spark
def test_mistakes_are_reported_where_they_are_made(spark) -> None:
    df = spark.createDataFrame([(1,)], "t long")
    with pytest.raises(ValueError, match="'ts' is not a column"):
        spark_row_batches(df, start="ts")
    stream = spark.readStream.format("rate").load()
    with pytest.raises(ValueError, match="SparkStreamFeeder"):
        spark_row_batches(stream, start="timestamp")
    # a batch DataFrame is read sorted by its time column, so that column must exist in Spark
    with pytest.raises(TypeError, match="must be a column name"):
        spark_row_batches(df, start=lambda row: row["t"])
    text = spark.createDataFrame([("2024-01-01",)], "t string")
    with pytest.raises(TypeError, match=r"'t' is string.*to_timestamp"):
        spark_row_batches(text, start="t")
