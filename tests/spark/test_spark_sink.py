"""The Spark sinks: CHT rows as Arrow / Spark tables, and the exactly-once final-rows sink.

The exactly-once property is checked against the definition: whatever the crashes and
replays, the files hold the result's CHT rows that end before the last CTI (all of them after
``end()``), each exactly once -- the same as a run without faults.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.cht import to_cht
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract
from tests.kit import EXAMPLES, physical_streams
from topology.spark_sink import FinalRowsSink, cht_to_arrow, to_spark, write

UTC = dt.UTC


def ts(ticks: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=ticks)


class Reading(NamedTuple):
    meter: str
    kwh: float


@dataclass
class Alert:
    level: int


# -- cht_to_arrow ---------------------------------------------------------------------------
def test_dict_payloads_become_columns_and_infinity_becomes_null() -> None:
    rows = [(0, 10, {"meter": "m1", "kwh": 1.5}), (5, MAX_TIME, {"meter": "m2", "note": "x"}),
            (MIN_TIME, 3, {"meter": "m3", "kwh": 2})]
    t = cht_to_arrow(rows)
    assert t.schema.field("start").type == pa.timestamp("us", tz="UTC")
    assert t.schema.field("end").type == pa.timestamp("us", tz="UTC")
    assert t.column_names == ["start", "end", "meter", "kwh", "note"]
    assert t.to_pylist() == [
        {"start": ts(0), "end": ts(10), "meter": "m1", "kwh": 1.5, "note": None},
        {"start": ts(5), "end": None, "meter": "m2", "kwh": None, "note": "x"},
        {"start": None, "end": ts(3), "meter": "m3", "kwh": 2.0, "note": None},
    ]


def test_payload_shapes() -> None:
    group = cht_to_arrow([(0, 1, ("m1", {"avg": 2.5})), (1, 2, ("m2", {"avg": 1.0}))])
    assert group.column_names == ["start", "end", "key", "avg"]
    assert group.column("key").to_pylist() == ["m1", "m2"]
    nested = cht_to_arrow([(0, 1, ("north", ("m1", 7)))])
    assert nested.to_pylist()[0] == {"start": ts(0), "end": ts(1), "key": "north",
                                     "key2": "m1", "value": 7}
    named = cht_to_arrow([(0, 1, Reading("m1", 0.5)), (2, 4, Alert(3))])
    assert named.column_names == ["start", "end", "meter", "kwh", "level"]
    assert named.column("level").to_pylist() == [None, 3]
    scalar = cht_to_arrow([(0, 1, 42), (3, 4, 7)])
    assert scalar.column_names == ["start", "end", "value"]
    clash = cht_to_arrow([(0, 1, {"start": 9, "end": 10, "k": 1})])
    assert clash.column_names == ["start", "end", "payload_start", "payload_end", "k"]
    empty = cht_to_arrow([])
    assert empty.num_rows == 0 and empty.column_names == ["start", "end"]


def test_schema_fixes_types_and_order_and_mixed_types_are_explained() -> None:
    first = cht_to_arrow([(0, 1, {"a": 1.0, "b": "x"})])
    later = cht_to_arrow([(1, 2, {"c": True, "a": 2})], schema=first.schema)
    assert later.column_names == ["start", "end", "a", "b", "c"]
    assert later.schema.field("a").type == pa.float64()
    assert later.to_pylist()[0] == {"start": ts(1), "end": ts(2), "a": 2.0, "b": None,
                                    "c": True}
    with pytest.raises(TypeError, match="payload field 'v' cannot be stored in one column"):
        cht_to_arrow([(0, 1, {"v": 1}), (1, 2, {"v": "one"})])


# -- FinalRowsSink, without Spark -----------------------------------------------------------
def read_rows(path: str) -> list[tuple[int, int, Any]]:
    """The sink's files as CHT rows (null ends are ∞ again), in canonical order."""
    names = [n for n in os.listdir(path) if n.endswith(".parquet")]
    if not names:
        return []
    t = pq.read_table(path)
    starts = t.column("start").cast(pa.int64()).to_pylist()
    ends = t.column("end").cast(pa.int64()).to_pylist()
    payloads = t.column("value").to_pylist()
    return sorted((MIN_TIME if s is None else s, MAX_TIME if e is None else e, p)
                  for s, e, p in zip(starts, ends, payloads))


def feed(sink: FinalRowsSink, messages: list[Any], rng: random.Random) -> None:
    i = 0
    while i < len(messages):
        n = rng.randint(1, 4)
        sink.on_messages(messages[i:i + n])
        sink._check()
        i += n


def test_each_cti_appends_the_rows_it_made_final(tmp_path) -> None:
    # a [0, 4)   b [2, ∞) closed at 9   c [5, 7) deleted   d [6, 8)
    #  time: 0 . . . 4 . . . 8 9
    #  Cti(3):  nothing ends before 3                  -> no file
    #  Cti(5):  a ends at 4 < 5                         -> epoch 5: a
    #  Cti(8):  d ends at 8: it can still grow          -> no file
    #  Cti(10): b [2, 9), d [6, 8)                      -> epoch 10: b, d
    stream = [Insert("a", 0, 4, 1), Insert("b", 2, MAX_TIME, 2), Cti(3), Insert("c", 5, 7, 3),
              Cti(5), Insert("d", 6, 8, 4), Retract("c", 5, 7, 5, 3), Cti(8),
              Retract("b", 2, MAX_TIME, 9, 2), Cti(10)]
    sink = FinalRowsSink(None, str(tmp_path))
    sink.on_messages(stream[:5])
    assert read_rows(str(tmp_path)) == [(0, 4, 1)] and sink.committed == 5
    sink.on_messages(stream[5:8])
    assert sink.committed == 5 and sink.pending() == [(2, MAX_TIME, 2), (6, 8, 4)]
    sink.on_messages(stream[8:])
    assert read_rows(str(tmp_path)) == [(0, 4, 1), (2, 9, 2), (6, 8, 4)]
    assert sink.epochs_written == 2 and sink.state_size() == 0 and sink.dead_letters == []
    files = sorted(n for n in os.listdir(tmp_path) if not n.startswith("_"))
    assert len(files) == 2 and files == sorted(files)  # named by CTI, in CTI order


def test_end_writes_rows_that_end_at_the_last_cti_and_open_edges(tmp_path) -> None:
    # e [3, 6)  f [4, ∞)   Cti(6) (a source's final CTI): e can still grow to [3, 7)
    sink = FinalRowsSink(None, str(tmp_path))
    sink.on_messages([Insert("e", 3, 6, 1), Insert("f", 4, MAX_TIME, 2), Cti(6)])
    assert read_rows(str(tmp_path)) == [] and sink.state_size() == 2
    sink.end()
    assert read_rows(str(tmp_path)) == [(3, 6, 1), (4, MAX_TIME, 2)]
    assert sink.committed == MAX_TIME


def test_deleted_open_rows_do_not_pile_up(tmp_path) -> None:
    # speculative output to ∞, replaced 1000 times before time moves: [0, ∞) -> deleted -> ...
    sink = FinalRowsSink(None, str(tmp_path))
    for i in range(1000):
        sink.on_messages([Insert(i, 0, MAX_TIME, i), Retract(i, 0, MAX_TIME, 0, i)])
        sink._check()
    sink.on_messages([Insert("last", 0, 5, 7), Cti(6)])
    assert sink.state_size() == 0 and len(sink.events.by_end) <= 64
    assert read_rows(str(tmp_path)) == [(0, 5, 7)]


def test_bad_messages_go_to_dead_letters(tmp_path) -> None:
    sink = FinalRowsSink(None, str(tmp_path))
    sink.on_messages([Insert("a", 5, 9, 1), Cti(6), Insert("b", 2, 3, 2),
                      Retract("zz", 1, 2, 1, 0), Retract("a", 5, 8, 7, 1), Cti(4)])
    reasons = [d.reason for d in sink.dead_letters]
    assert len(reasons) == 4
    assert "behind the CTI" in reasons[0] and "unknown id" in reasons[1]
    assert "does not match" in reasons[2] and "goes back" in reasons[3]
    with pytest.raises(ValueError, match="format='parquet'"):
        FinalRowsSink(None, str(tmp_path / "other"), format="json")


def test_recovery_removes_uncommitted_files(tmp_path) -> None:
    # A sink died after renaming the file of Cti(7) but before logging the commit: the replay
    # uses other CTIs (6, then 9), so the orphan would double [1, 5) if it stayed.
    path = str(tmp_path)
    first = FinalRowsSink(None, path)
    first.on_messages([Insert("a", 0, 2, 1), Cti(3)])
    orphan = cht_to_arrow([(1, 5, 2)])
    pq.write_table(orphan, os.path.join(path, "epoch-99999999999999999999.parquet"))
    pq.write_table(orphan, os.path.join(path, ".tmp-halfwritten"))
    again = FinalRowsSink(None, path)
    left = sorted(os.listdir(path))
    assert len(left) == 2 and left[0] == "_cedar_commits.json" and left[1].startswith("epoch-")
    again.on_messages([Insert("x", 0, 2, 1), Insert("y", 1, 5, 2), Cti(6), Insert("z", 7, 8, 3),
                       Cti(9)])
    assert read_rows(path) == [(0, 2, 1), (1, 5, 2), (7, 8, 3)]


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(stream=physical_streams(), data=st.data())
def test_exactly_once_across_crashes(stream, data) -> None:
    """Crash after a random prefix; the new sink restarts from the beginning or from a
    snapshot taken at an earlier point: the files equal a fault-free run, which holds the
    CHT rows that end before the last CTI, and after end() the whole CHT."""
    rng = random.Random(data.draw(st.integers(0, 2**16), label="seed"))
    crash = data.draw(st.integers(0, len(stream)), label="crash")
    snap_at = data.draw(st.one_of(st.none(), st.integers(0, crash)), label="snapshot at")
    ctis = [m.time for m in stream if type(m) is Cti]
    last = ctis[-1] if ctis else MIN_TIME
    cht = to_cht(stream)
    with tempfile.TemporaryDirectory() as clean, tempfile.TemporaryDirectory() as faulty:
        reference = FinalRowsSink(None, clean)
        feed(reference, stream, rng)
        expected = sorted((s, e, p) for s, e, p in cht if e < last or last == MAX_TIME)
        assert read_rows(clean) == expected
        assert sorted(reference.pending() + expected) == sorted(cht)

        doomed = FinalRowsSink(None, faulty)
        snapshot = doomed.snapshot() if snap_at == 0 else None
        for i, msg in enumerate(stream[:crash], 1):
            doomed.on_messages([msg])
            if i == snap_at:
                snapshot = doomed.snapshot()
        del doomed  # the crash: the object is gone, the files stay

        restarted = FinalRowsSink(None, faulty)
        if snapshot is None:
            feed(restarted, stream, rng)
        else:
            restarted.restore(snapshot)
            feed(restarted, stream[snap_at:], rng)
        assert read_rows(faulty) == expected
        restarted.end()
        reference.end()
        assert read_rows(faulty) == read_rows(clean) == sorted(cht)
        assert Counter(read_rows(faulty)) == Counter(cht)


# -- through Spark -------------------------------------------------------------------------
@pytest.mark.spark
def test_to_spark_schema_and_values(spark) -> None:
    messages = [Insert("a", 0, 10, ("m1", {"avg": 2.5, "n": 2})), Insert("b", 5, MAX_TIME,
                ("m2", {"avg": 1.0, "n": 1})), Retract("a", 0, 10, 8, ("m1", {"avg": 2.5, "n": 2})),
                Cti(6)]
    df = to_spark(spark, messages)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("start", "timestamp"), ("end", "timestamp"), ("key", "string"), ("avg", "double"),
        ("n", "bigint")]
    got = sorted(tuple(r.values()) for r in df.toArrow().to_pylist())
    assert got == [(ts(0), ts(8), "m1", 2.5, 2), (ts(5), None, "m2", 1.0, 1)]
    scalars = to_spark(spark, [(0, 1, 3), (1, MAX_TIME, 4)]).toArrow()
    assert scalars.column_names == ["start", "end", "value"]
    assert scalars.column("end").to_pylist() == [ts(1), None]


@pytest.mark.spark
def test_write_round_trip_and_sink_files_read_by_spark(spark, tmp_path) -> None:
    rows = [(0, 4, {"meter": "m1", "kwh": 1.5}), (2, MAX_TIME, {"meter": "m2", "kwh": 0.5})]
    out = str(tmp_path / "table")
    write(spark, rows, out)
    back = spark.read.parquet(out).toArrow()
    assert sorted(back.to_pylist(), key=lambda r: r["meter"]) == cht_to_arrow(rows).to_pylist()
    with pytest.raises(Exception, match=r"(?i)already exists"):
        write(spark, rows, out)
    write(spark, rows[:1], out, mode="overwrite")
    write(spark, rows[1:], out, mode="append")
    assert spark.read.parquet(out).count() == 2
    with pytest.raises(ValueError, match="mode must be one of"):
        write(spark, rows, out, mode="upsert")

    # the exactly-once sink's directory, after a crash and a replay, is a plain parquet table
    stream = [Insert(i, i, i + 3, {"meter": f"m{i % 2}", "kwh": float(i)}) for i in range(6)]
    stream = [m for i, ins in enumerate(stream) for m in ([ins, Cti(i)] if i % 2 else [ins])]
    sink_dir = str(tmp_path / "final")
    FinalRowsSink(spark, sink_dir).on_messages(stream[:5])
    again = FinalRowsSink(spark, sink_dir)
    again.on_messages(stream)
    again.end()
    table = spark.read.parquet(sink_dir).toArrow()
    assert sorted(r["kwh"] for r in table.to_pylist()) == [float(i) for i in range(6)]
    assert table.num_rows == 6 and table.column("end").null_count == 0


@pytest.mark.spark
def test_end_to_end_counts_agree_with_spark(spark, tmp_path) -> None:
    """DataFrame -> Stream.from_rows (inline) -> per-meter tumbling counts -> Spark, checked
    against Spark's own ``groupBy(window(ts, '4 seconds'), meter).count()``."""
    from itertools import chain

    from pyspark.sql import functions as F

    from operators.aggregates import Count
    from operators.ingress import AdvanceTime
    from topology import Stream
    from topology.spark_source import spark_row_batches

    df = spark.sql("SELECT timestamp_seconds(1700000000 + (id * 7) % 23) AS ts, "
                   "concat('m', CAST(id % 3 AS STRING)) AS meter FROM range(0, 40)")
    rows = chain.from_iterable(spark_row_batches(df, start="ts", batch_rows=16))
    q = (Stream.from_rows(rows, start="ts", advance=AdvanceTime(every=5, delay=30_000_000))
         .group_apply(lambda r: r["meter"], lambda g: g.tumbling_window(4_000_000)
                      .aggregate(Count())))
    out = q.collect(runtime="inline")
    got = {(r["start"], r["end"], r["key"], r["value"])
           for r in to_spark(spark, out).toArrow().to_pylist()}
    theirs = df.groupBy(F.window("ts", "4 seconds"), "meter").count().select(
        F.col("window.start").alias("start"), F.col("window.end").alias("end"), "meter",
        "count")
    assert got == {tuple(r.values()) for r in theirs.toArrow().to_pylist()}

    sink = FinalRowsSink(None, str(tmp_path / "final"))
    sink.on_messages(out)
    sink.end()
    assert sorted(tuple(r.values()) for r in spark.read.parquet(str(tmp_path / "final"))
                  .toArrow().to_pylist()) == sorted(got)


@pytest.mark.spark
def test_sink_in_another_format_writes_through_spark(spark, tmp_path) -> None:
    # a [0, 2)  b [1, ∞)   Cti(3) -> epoch 3: a     end() -> epoch ∞: b (end null)
    # (times in µs: the json files must keep microseconds)
    path = str(tmp_path / "json")
    sink = FinalRowsSink(spark, path, format="json")
    sink.on_messages([Insert("a", 0, 2, {"v": 1}), Insert("b", 1, MAX_TIME, {"v": 2}), Cti(3)])
    sink.end()
    files = sorted(n for n in os.listdir(path) if not n.startswith(("_", ".")))
    assert len(files) == 2 and all(n.startswith("epoch-") and n.endswith(".json") for n in files)
    again = FinalRowsSink(spark, path, format="json")  # replay: nothing new, nothing removed
    again.on_messages([Insert("a", 0, 2, {"v": 1}), Cti(3)])
    assert sorted(n for n in os.listdir(path) if not n.startswith(("_", "."))) == files
    back = (spark.read.schema("start timestamp, `end` timestamp, v long")
            .option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX").json(path))
    assert sorted(tuple(r.values()) for r in back.toArrow().to_pylist()) == [
        (ts(0), ts(2), 1), (ts(1), None, 2)]
    with pytest.raises(ValueError, match="holds 'json' files"):
        FinalRowsSink(spark, path)


@pytest.mark.spark
def test_the_active_session_is_used_when_none_is_given(spark) -> None:
    df = to_spark(None, [Insert("a", 0, 2, 5), Cti(2)])
    assert df.sparkSession is spark or df.sparkSession._jsparkSession.equals(
        spark._jsparkSession)
    assert df.columns == ["start", "end", "value"]
