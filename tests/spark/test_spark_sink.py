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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht
from operators.columns import Columns, expand
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract
from tests.kit import HEAVY, PROPERTY, physical_streams
from topology.spark.sink import (
    FinalRowsSink,
    _stage,
    cht_batches,
    cht_to_arrow,
    columns_to_arrow,
    result_to_arrow,
    to_spark,
    unify_batches,
    write,
)

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


@HEAVY
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
    from topology.spark.source import spark_row_batches

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


# -- sinks at scale: the column path against the row path ------------------------------------
def _column_payload(form: str, n: int, rng: np.random.Generator) -> Any:
    ints = rng.integers(-5, 5, n)
    if form == "dict":
        return {"k": ints.astype(np.int32), "v": rng.random(n).astype(np.float32),
                "s": np.array([f"m{i}" for i in ints], dtype=object), "ok": ints > 0,
                "start": ints * 2}
    if form == "pair":
        return (np.array([f"g{i % 3}" for i in ints], dtype=object), rng.random(n))
    if form == "nested":  # inner pairs: the layout flattens them, so the row path converts
        return (np.array([f"g{i % 3}" for i in ints], dtype=object),
                np.array([(f"m{i}", int(i)) for i in ints] + [None], dtype=object)[:n])
    if form == "objects":  # dicts in a scalar column: flattened too
        return np.array([{"a": int(i)} for i in ints] + [None], dtype=object)[:n]
    return ints.astype(np.int16)  # scalar


def _row_payload(form: str, value: Any, rng: np.random.Generator) -> Any:
    """A payload of the same shape as the column form's, as a row message carries it; dicts
    sometimes lack a field, hold an int where the columns hold floats, or have another."""
    if form == "dict":
        p = {"k": value, "v": float(value) if rng.random() < 0.5 else value,
             "s": f"m{value}", "ok": value > 0, "start": value}
        if rng.random() < 0.3:
            del p["s"]
        if rng.random() < 0.2:
            p["extra"] = "x"
        return p
    if form in ("pair", "nested"):
        return (f"g{value % 3}", float(value) if form == "pair" else (f"m{value}", value))
    if form == "objects":
        return {"a": value}
    return value


def random_output(seed: int) -> list[Any]:
    """A query's output as the column path delivers it: Columns batches (points or
    intervals, some open to ∞, one starting at MIN_TIME), Inserts, CTIs and retractions that
    shorten, close or delete events of either kind."""
    rng = np.random.default_rng(seed)
    form = str(rng.choice(["dict", "pair", "nested", "objects", "scalar"]))
    msgs: list[Any] = []
    live: dict[Any, tuple[int, int, Any]] = {}
    t, next_id = 0, 0
    for _ in range(int(rng.integers(0, 6))):
        n = int(rng.integers(1, 30))
        starts = t + np.sort(rng.integers(0, 50, n))
        if not msgs and rng.random() < 0.3:
            starts[0] = MIN_TIME
        ends = None if rng.random() < 0.3 else np.where(
            rng.random(n) < 0.2, MAX_TIME, np.maximum(starts, t) + rng.integers(1, 20, n))
        c = Columns(np.arange(next_id, next_id + n), starts, ends,
                    _column_payload(form, n, rng))
        msgs.append(c)
        live.update((i, (s, e, c.payload_at(j))) for j, (i, s, e)
                    in enumerate(zip(c.ids.tolist(), c.starts.tolist(), c.ends.tolist())))
        next_id += n
        for _ in range(int(rng.integers(0, 4))):
            s = t + int(rng.integers(0, 50))
            e = MAX_TIME if rng.random() < 0.3 else s + int(rng.integers(1, 20))
            p = _row_payload(form, int(rng.integers(-5, 5)), rng)
            msgs.append(Insert(f"r{next_id}", s, e, p))
            live[f"r{next_id}"] = (s, e, p)
            next_id += 1
        for eid in rng.permutation(list(live))[:int(rng.integers(0, 4))].tolist():
            eid = int(eid) if str(eid).isdigit() else eid
            s, e, p = live[eid]
            new_end = s if rng.random() < 0.4 or e - s < 2 else s + (min(e, s + 40) - s) // 2
            msgs.append(Retract(eid, s, e, new_end, p))
            if new_end == s:
                del live[eid]
            else:
                live[eid] = (s, new_end, p)
        t += 50
        msgs.append(Cti(t))
    return msgs


def rows_of(table: pa.Table, names: list[str]) -> Counter[Any]:
    """A table's rows as a multiset of tuples in the order of ``names`` (float32 columns hold
    exactly the values the row path gets from ``.item()``: no rounding)."""
    cols = [table.column(n).cast(pa.int64()).to_pylist() if n in ("start", "end")
            else table.column(n).to_pylist() for n in names]  # ticks: MIN_TIME + 1 is no date
    return Counter(tuple(repr(v) for v in row) for row in zip(*cols))


def assert_same_table(got: pa.Table, want: pa.Table) -> None:
    assert sorted(got.column_names) == sorted(want.column_names)
    assert got.column_names[:2] == ["start", "end"]
    for f in want.schema:
        assert got.schema.field(f.name).type == f.type, f.name
    assert rows_of(got, want.column_names) == rows_of(want, want.column_names)


@given(st.integers(0, 2**32 - 1))
@PROPERTY
def test_column_path_equals_row_path_on_random_outputs(seed: int) -> None:
    out = random_output(seed)
    want = cht_to_arrow(to_cht(list(expand(out))))
    assert_same_table(result_to_arrow(out), want)
    # in small chunks and batches too: the schemas of many batches unify to the row path's
    assert_same_table(unify_batches(cht_batches(out, chunk_rows=3)), want)


def test_column_path_covers_payload_forms_and_the_empty_output() -> None:
    c = Columns(np.arange(3), np.array([MIN_TIME, 2, 4]), np.array([1, MAX_TIME, 9]),
                {"k": np.array([1, 2, 3], dtype=np.uint8), "end": np.array([0.5, 1.5, 2.5])})
    t = columns_to_arrow(c)
    assert t is not None and t.schema.names == ["start", "end", "k", "payload_end"]
    assert t.column("k").type == pa.int64() and t.column("start").null_count == 1
    assert t.column("end").null_count == 1
    nested = Columns(np.arange(1), np.array([0]), None,
                     (np.array(["g"], dtype=object), np.array([("m", 1), None], dtype=object)[:1]))
    assert columns_to_arrow(nested) is None  # flattened by the row path instead
    assert result_to_arrow([nested]).to_pylist() == cht_to_arrow(
        [(0, 1, ("g", ("m", 1)))]).to_pylist()
    for empty in ([], [Cti(5)], [c, *(Retract(i, s, e, s, p) for i, s, e, p in c.inserts())]):
        got = result_to_arrow(empty)
        assert got.num_rows == 0 and got.column_names[:2] == ["start", "end"]
    with pytest.raises(TypeError, match="payload field 'v' cannot be stored in one column"):
        result_to_arrow([Columns(np.arange(1), np.array([0]), None, {"v": np.array([1])}),
                         Insert("x", 1, 2, {"v": "one"})])


def test_staged_parts_share_one_schema(tmp_path) -> None:
    out = random_output(7) + [Columns(np.arange(100, 140), np.arange(40), None,
                                      {"k": np.arange(40), "v": np.arange(40) * 0.5})]
    want = result_to_arrow(out)
    schema = _stage(cht_batches(out, chunk_rows=5), str(tmp_path), part_rows=16)
    parts = sorted(os.listdir(tmp_path))
    assert len(parts) > 2 and all(pq.read_schema(tmp_path / p) == schema for p in parts)
    assert_same_table(pq.read_table(str(tmp_path)), want)


@pytest.mark.spark
def test_to_spark_and_write_at_scale_equal_the_row_path(spark, tmp_path) -> None:
    n = 30_000  # ten column batches; open ends and a retraction among them
    rng = np.random.default_rng(3)
    starts = np.sort(rng.integers(0, 10**9, n))
    ends = np.where(rng.random(n) < 0.1, MAX_TIME, starts + rng.integers(1, 1000, n))
    out: list[Any] = [Columns(np.arange(i, min(i + 3_000, n)), starts[i:i + 3_000],
                              ends[i:i + 3_000],
                              {"k": rng.integers(0, 50, len(starts[i:i + 3_000])),
                               "v": rng.random(len(starts[i:i + 3_000]))})
                      for i in range(0, n, 3_000)]
    s0, e0, p0 = out[0].starts[0].item(), out[0].ends[0].item(), out[0].payload_at(0)
    out += [Retract(0, s0, e0, s0, p0), Insert("late", 5, MAX_TIME, {"k": 1, "v": 0.5})]
    want = cht_to_arrow(to_cht(list(expand(out))))
    df = to_spark(spark, out)
    assert df.columns == ["start", "end", "k", "v"] and df.count() == n
    assert_same_table(df.toArrow(), want)
    write(spark, out, str(tmp_path / "t"))
    assert_same_table(spark.read.parquet(str(tmp_path / "t")).toArrow(), want)
    # an explicit staging directory is left empty once written
    write(spark, out[:2], str(tmp_path / "j"), format="json", staging=str(tmp_path / "stage"))
    back = (spark.read.schema("start timestamp, `end` timestamp, k long, v double")
            .option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX").json(
                str(tmp_path / "j")))
    assert_same_table(back.toArrow(), cht_to_arrow(to_cht(list(expand(out[:2])))))
    assert os.listdir(tmp_path / "stage") == []
    empty = to_spark(spark, [Cti(3)])
    assert empty.columns == ["start", "end"] and empty.count() == 0


@pytest.mark.spark
def test_stream_sinks_keep_the_column_batches(spark, tmp_path, runtime) -> None:
    """from_arrow -> a column-wise select -> write / to_spark: the output reaches the sink as
    Columns (nothing expanded on the way) and Spark gets what the row path gives."""
    from topology import Stream

    n = 5_000
    table = pa.table({"ts": np.arange(n) * 3, "k": np.arange(n) % 7,
                      "v": np.linspace(0, 1, n)})
    q = Stream.from_arrow(table, start="ts").select(lambda r: (r["k"], r["v"] * 2))
    assert any(type(m) is Columns for m in q.collect(runtime, columns=True))
    want = cht_to_arrow(to_cht(q.collect(runtime)))
    q.write(str(tmp_path / "out"), spark=spark, runtime=runtime)
    assert_same_table(spark.read.parquet(str(tmp_path / "out")).toArrow(), want)
    assert_same_table(q.to_spark(spark, runtime=runtime).toArrow(), want)


FIELD_NAMES = st.sampled_from(["v", "w", "key", "start", "end", 7])
FIELD_VALUES = st.one_of(st.integers(-3, 3), st.floats(allow_nan=False, width=32), st.none())


@given(keys=st.lists(FIELD_NAMES, min_size=1, max_size=4, unique=True),
       paired=st.booleans(), odd=st.sampled_from([None, "keys", "scalar", "nested"]),
       data=st.data())
@PROPERTY
def test_uniform_payloads_are_converted_field_by_field_as_row_by_row(keys, paired, odd,
                                                                     data) -> None:
    """Rows whose payloads are all dicts of one set of keys (or group pairs of them) take the
    one-pass path of cht_to_arrow; any other mix the row-by-row path. Both give one table."""
    from topology.spark import arrow as spark_arrow

    n = data.draw(st.integers(1, 6))
    rows: list[tuple[int, int, Any]] = []
    for i in range(n):
        inner = {k: data.draw(FIELD_VALUES) for k in keys}
        rows.append((i, i + 1, (f"g{i % 2}", inner) if paired else inner))
    if odd == "keys":
        rows.append((n, n + 1, ("g", {"other": 1}) if paired else {"other": 1}))
    elif odd == "scalar":
        rows.append((n, n + 1, 5))
    elif odd == "nested":
        rows.append((n, n + 1, ("g", ("h", dict.fromkeys(keys, 1)))))
    fast = spark_arrow._uniform_fields(rows)
    assert (fast is not None) == (odd is None and not (paired and "key" in keys))
    try:
        want: pa.Table | str = cht_to_arrow_row_by_row(rows)
    except TypeError as exc:  # a field with mixed types (ints and floats are fine)
        want = str(exc)
    try:
        got: pa.Table | str = cht_to_arrow(rows)
    except TypeError as exc:
        got = str(exc)
    assert got == want if isinstance(want, str) else got.equals(want), (got, want)


def cht_to_arrow_row_by_row(rows: list[tuple[int, int, Any]]) -> pa.Table:
    """cht_to_arrow with its one-pass path switched off."""
    from unittest import mock

    from topology.spark import arrow as spark_arrow

    with mock.patch.object(spark_arrow, "_uniform_fields", return_value=None):
        return cht_to_arrow(rows)
