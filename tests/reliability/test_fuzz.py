"""Fuzzing every public entry point with junk: Hypothesis-made rows (``Stream.from_rows``),
physical messages (``Stream.from_events``) and Arrow tables (``topology.building.arrow_reader.
arrow_row_batches``, the Spark-free half of ``from_spark``). Whatever comes in, cedar never
crashes the query, never hangs (each test has a timeout), the output is a valid physical
stream, and every source's accounting equation holds."""

from __future__ import annotations

import datetime as dt
import itertools
import math

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count
from operators.cht import to_cht
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract
from operators.ingress import AdvanceTime
from operators.windows import snapshot_window
from tests.kit import PROPERTY, assert_equivalent, physical_streams, scale
from tests.reference_windows import window as reference_window
from tests.reliability import assert_accounted, records, run_dag
from topology import Stream
from topology.building.arrow_reader import arrow_row_batches

pytestmark = pytest.mark.timeout(60 * scale())

# -- junk rows -------------------------------------------------------------------------------------
times = st.one_of(
    st.integers(-50, 50), st.integers(-50, 50), st.integers(-50, 50),
    st.integers(MIN_TIME - 5, MIN_TIME + 5), st.integers(MAX_TIME - 5, MAX_TIME + 5),
    st.integers(), st.none(), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.text(max_size=6), st.sampled_from(["1970-01-01T00:00:00.000010Z", "", "T"]),
    st.datetimes(min_value=dt.datetime(1969, 12, 31), max_value=dt.datetime(1970, 1, 2)),
    st.lists(st.integers(0, 3), max_size=2), st.just(dt.timedelta(1)),
)
field = st.sampled_from(["t", "e", "k", "v"])
rows = st.lists(st.one_of(
    st.fixed_dictionaries({"t": times}, optional={"e": times, "k": st.integers(0, 4) | st.none(),
                                                  "v": st.integers(0, 9)}),
    st.fixed_dictionaries({"t": st.integers(0, 40)}, optional={
        "e": st.integers(0, 60), "k": st.integers(0, 6)}),
    st.dictionaries(field, times, max_size=3),
    st.none(), st.integers(), st.text(max_size=3), st.tuples(st.integers()),
), max_size=40)
advances = st.builds(AdvanceTime, every=st.sampled_from([None, 1, 3]),
                     delay=st.integers(-1, 5), policy=st.sampled_from(["drop", "adjust"]))


@PROPERTY
@given(rows, st.sampled_from(["point", "interval", "edge"]), advances, st.integers(1, 9))
def test_junk_rows_never_crash_and_every_row_is_accounted_for(data, shape, advance, batch):
    source = Stream.from_rows(data, start="t", end=None if shape == "point" else "e",
                              shape=shape, id="k" if shape == "edge" else None, advance=advance)
    # snapshot windows: output in proportion to the events, whatever their lifetimes (a junk
    # interval [MIN_TIME, MAX_TIME - 1) lies in ~2**62 tumbling windows, each rightly non-empty)
    query = source.where(lambda r: True).snapshot_window().aggregate(Count())
    out, dag, fed = run_dag(query, batch_size=batch)
    src = dag.procs["from_rows#0"]
    stats = src.stats
    assert stats["received"] == len(data) == fed[0]
    assert_accounted(stats)
    assert stats["dead_lettered"] == len(records(dag, "dead_letters"))
    assert stats["dropped"] + stats["adjusted"] == len(records(dag, "late"))
    # what the source sent is a valid stream; the query is the reference over it
    sent, _, _ = run_dag(source, batch_size=batch)
    inserts = sum(type(m) is Insert for m in sent)
    if shape != "edge":
        assert inserts == stats["processed"] + stats["adjusted"]
    assert_equivalent(out, reference_window(sent, snapshot_window(), len))


# -- junk physical messages ------------------------------------------------------------------------
NOT_MESSAGES = [None, 42, "Cti(3)", (0, "a", 1, 2, None), {"id": "a"}, b"\x00", 1.5]


@st.composite
def spoiled(draw):
    """A valid physical stream with junk messages slipped in: each one breaks a stream rule
    (docs/model.md) wherever it lands, given the valid messages before it."""
    valid = draw(physical_streams(max_steps=25))
    out, n_junk = [], 0
    cti, live, used = MIN_TIME, {}, set()
    for msg in valid + [None]:
        for _ in range(draw(st.integers(0, 2)) if draw(st.booleans()) else 0):
            kinds = ["object", "unknown"] + (["duplicate"] if used else []) + (
                ["back", "behind"] if cti > MIN_TIME + 2 else []) + (
                ["mismatch"] if live else [])
            kind = draw(st.sampled_from(kinds))
            if kind == "object":
                junk = draw(st.sampled_from(NOT_MESSAGES))
            elif kind == "unknown":
                junk = Retract(f"never{n_junk}", 0, 5, 0)
            elif kind == "duplicate":
                eid = draw(st.sampled_from(sorted(used)))
                junk = Insert(eid, max(cti, 0), max(cti, 0) + 3, "dup")
            elif kind == "back":
                junk = Cti(cti - draw(st.integers(1, 3)))
            elif kind == "behind":
                junk = Insert(f"late{n_junk}", cti - 1, cti + 5, "late")
            else:
                eid = draw(st.sampled_from(sorted(live)))
                s, e = live[eid]
                wrong = e - 1 if e - 1 > s and e != MAX_TIME else e + 1 if e < MAX_TIME - 1 \
                    else s + 1
                junk = Retract(eid, s, wrong, s)
            out.append(junk)
            n_junk += 1
        if msg is None:
            break
        out.append(msg)
        if type(msg) is Insert:
            live[msg.id] = (msg.start, msg.end)
            used.add(msg.id)
        elif type(msg) is Retract:
            if msg.new_end == msg.start:
                del live[msg.id]
            else:
                live[msg.id] = (msg.start, msg.new_end)
        else:
            cti = msg.time
    return valid, out, n_junk


@PROPERTY
@given(spoiled(), st.integers(1, 9))
def test_junk_messages_are_dead_letters_and_change_nothing_else(case, batch):
    valid, messages, n_junk = case

    def query(msgs):
        return Stream.from_events(msgs).where(lambda p: True).tumbling_window(4).aggregate(len)

    out, dag, fed = run_dag(query(messages), batch_size=batch)
    clean, _, _ = run_dag(query(valid), batch_size=batch)
    dead = records(dag, "dead_letters")
    # received = processed + dead-lettered; exactly the junk was dead-lettered
    assert fed[0] == len(messages) == len(valid) + len(dead)
    assert len(dead) == n_junk
    assert all(d.where == "from_events#0" and d.reason for d in dead)
    assert_equivalent(out, clean)


# -- junk Arrow tables -----------------------------------------------------------------------------
_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": -1_000}
_DAY = 86_400_000_000


def _bound(factor):
    """The raw values of a unit whose ticks fit the time axis (see the xfail test below)."""
    return MAX_TIME // factor if factor > 0 else MAX_TIME


COLUMN_TYPES = [("ts", unit, tz) for unit in _UNITS for tz in (None, "UTC", "+02:00")] + [
    ("date32", None, None), ("date64", None, None), ("int64", None, None),
    ("float64", None, None), ("string", None, None)]


@st.composite
def arrow_tables(draw):
    kind, unit, tz = draw(st.sampled_from(COLUMN_TYPES))
    n = draw(st.integers(0, 25))
    if kind == "ts":
        b = _bound(_UNITS[unit])
        typ = pa.timestamp(unit, tz=tz)
        values = draw(st.lists(st.one_of(st.integers(-b, b), st.integers(-100, 100), st.none()),
                               min_size=n, max_size=n))
    elif kind == "date32":
        b = MAX_TIME // _DAY
        typ = pa.date32()
        values = draw(st.lists(st.integers(-b, b) | st.none(), min_size=n, max_size=n))
    elif kind == "date64":
        b = MAX_TIME // 1_000 // _DAY * _DAY // 1_000  # whole days of ms
        typ = pa.date64()
        values = draw(st.lists(st.integers(-b // 86_400_000, b // 86_400_000).map(
            lambda d: d * 86_400_000) | st.none(), min_size=n, max_size=n))
    elif kind == "int64":
        typ = pa.int64()
        values = draw(st.lists(st.integers(-(2**63), 2**63 - 1) | st.none(),
                               min_size=n, max_size=n))
    elif kind == "float64":
        typ = pa.float64()
        values = draw(st.lists(st.floats(allow_nan=True) | st.integers(-99, 99).map(float)
                               | st.none(), min_size=n, max_size=n))
    else:
        typ = pa.string()
        values = draw(st.lists(st.text(max_size=8) | st.none()
                               | st.sampled_from(["1970-01-01T00:00:01Z", "2010-08-10"]),
                               min_size=n, max_size=n))
    table = pa.table({"ts": pa.array(values, type=typ), "v": list(range(n))})
    return table, kind, unit, values


def _finer_than_ticks(kind, unit, values):
    """Nanosecond timestamps that are not whole microseconds: refused with a clear error,
    never cut silently (docs/errors.md)."""
    return kind == "ts" and unit == "ns" and any(v is not None and v % 1_000 for v in values)


def _expected_ticks(kind, unit, value):
    """The exact ticks of a raw Arrow value (None: it must be a dead letter)."""
    if value is None:
        return None
    if kind == "ts":
        f = _UNITS[unit]
        t = value * f if f > 0 else value // -f
    elif kind == "date32":
        t = value * _DAY
    elif kind == "date64":
        t = value * 1_000
    elif kind == "int64":
        t = value
    elif kind == "float64":
        if not math.isfinite(value) or not value.is_integer():
            return None
        t = int(value)
    else:
        try:
            from operators.ingress import to_ticks

            return to_ticks(value)
        except (TypeError, ValueError):
            return None
    return t if MIN_TIME <= t < MAX_TIME else None


@PROPERTY
@given(arrow_tables(), st.integers(1, 7))
def test_junk_arrow_tables_are_ingested_exactly_or_dead_lettered(case, batch_rows):
    table, kind, unit, values = case
    if _finer_than_ticks(kind, unit, values):
        with pytest.raises(ValueError, match="finer than a microsecond"):
            list(arrow_row_batches([table], start="ts", batch_rows=batch_rows))
        return
    batches = arrow_row_batches([table], start="ts", batch_rows=batch_rows)
    source = Stream.from_rows(itertools.chain.from_iterable(batches), start="ts")
    out, dag, fed = run_dag(source.tumbling_window(1000).aggregate(Count()))
    stats = dag.procs["from_rows#0"].stats
    assert stats["received"] == len(values) == fed[0]
    assert_accounted(stats)
    expected = [_expected_ticks(kind, unit, v) for v in values]
    sent, _, _ = run_dag(Stream.from_rows(
        itertools.chain.from_iterable(arrow_row_batches([table], start="ts")), start="ts"))
    starts = sorted(s for s, _, _ in to_cht(sent))
    assert starts == sorted(t for t in expected if t is not None)
    assert stats["dead_lettered"] == sum(t is None for t in expected)
    # the windowed counts add up to the events processed
    assert sum(c for _, _, c in to_cht(out)) == stats["processed"]


@pytest.mark.parametrize(("typ", "value"), [(pa.timestamp("s"), 10**13),
                                            (pa.date32(), 2**31 - 1),
                                            (pa.timestamp("ms"), -(2**62))])
def test_arrow_times_outside_the_axis_are_dead_letters_not_wrapped(typ, value):
    table = pa.table({"ts": pa.array([value], type=typ)})
    rows = list(itertools.chain.from_iterable(arrow_row_batches([table], start="ts")))
    out, dag, _ = run_dag(Stream.from_rows(rows, start="ts"))
    assert to_cht(out) == []
    assert len(records(dag, "dead_letters")) == 1


@PROPERTY
@given(arrow_tables(), st.integers(1, 7))
def test_junk_arrow_tables_ingest_column_wise_as_row_wise(case, batch_rows):
    # from_arrow sends good batches column-wise and bad ones as rows: the same events, the
    # same counts as the row path
    table, kind, unit, values = case
    if _finer_than_ticks(kind, unit, values):
        with pytest.raises(ValueError, match="finer than a microsecond"):
            Stream.from_arrow(table, start="ts", batch_rows=batch_rows)
        return
    rows = itertools.chain.from_iterable(arrow_row_batches([table], start="ts"))
    by_rows, rows_dag, _ = run_dag(Stream.from_rows(rows, start="ts"))
    by_cols, cols_dag, _ = run_dag(Stream.from_arrow(table, start="ts", batch_rows=batch_rows))
    assert to_cht(by_cols) == to_cht(by_rows)
    assert cols_dag.procs["from_rows#0"].stats == rows_dag.procs["from_rows#0"].stats
    assert_accounted(cols_dag.procs["from_rows#0"].stats)
