"""The span operators' column-wise paths give the per-event path's CHT: random physical streams
whose runs of inserts arrive as ``Columns`` batches (cut at random, points sometimes without an
end column) among retractions and CTIs, a checkpoint and restore midway; every case of
``test_span_operators`` (the ends of the time axis included, where a batch goes event by
event) against the from-scratch reference and the per-event run (same output CTI, same dead
letters). End to end, inline and on Ray: ``from_arrow`` (column batches, interval and edge
events) through the span operators gives what ``from_rows`` (payload dicts, per event) and
``from_events`` (messages) give."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count
from operators.alter_lifetime import AlterLifetime
from operators.cht import to_cht, validate
from operators.clip_duration import ClipDuration
from operators.columns import Columns, expand, row_at
from operators.events import MAX_TIME, Cti, Insert
from operators.shift import Shift
from operators.to_points import ToPoints
from tests.kit import PROPERTY, assert_equivalent, final_time, physical_streams
from tests.operators.test_span_operators import CASES
from topology import Stream


def _columns(run: list[Insert], rng: random.Random) -> Columns:
    points = all(m.end == m.start + 1 for m in run) and rng.random() < 0.5
    return Columns(np.array([m.id for m in run], dtype=object),
                   np.array([m.start for m in run], dtype=np.int64),
                   None if points else np.array([m.end for m in run], dtype=np.int64),
                   np.array([m.payload for m in run], dtype=np.int64))


def batches(stream: list, rng: random.Random) -> list[list]:
    """The stream in batches of a few messages, runs of inserts as Columns (cut at random)."""
    out, run = [], []
    for msg in stream:
        if type(msg) is Insert and rng.random() < 0.85:
            run.append(msg)
            if rng.random() < 0.2:
                out.append([_columns(run, rng)])
                run = []
            continue
        if run:
            out.append([_columns(run, rng)])
            run = []
        out.append([msg])
    if run:
        out.append([_columns(run, rng)])
    # a few batches hold several messages (Columns among messages in one batch)
    merged: list[list] = []
    for b in out:
        if merged and rng.random() < 0.3:
            merged[-1].extend(b)
        else:
            merged.append(b)
    return merged


def run_columns(factory, feed, restore_at):
    op, out = factory(), []
    for n, batch in enumerate(feed):
        if n == restore_at:
            state = op.snapshot()
            op = factory()
            op.restore(state)
        out.extend(op.process(batch))
        op._check()
    return out, op


#: the span operators' cases (where/select: tests/operators/test_ingress_columns.py and others)
SPAN = sorted(c for c, row in CASES.items()
              if isinstance(row[0](), (AlterLifetime, ToPoints, ClipDuration)))


@pytest.mark.parametrize("case", SPAN)
@PROPERTY
@given(stream=physical_streams(), data=st.data())
def test_column_batches_give_the_per_event_cht(case, stream, data):
    factory, reference, _ = CASES[case]
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    feed = batches(stream, rng)
    out, op = run_columns(factory, feed, data.draw(st.integers(0, len(feed)), label="at"))
    flat = list(expand(out))
    validate(flat, name=f"output of {case}")
    assert_equivalent(flat, reference(to_cht(stream)))
    slow_op = factory()
    slow = slow_op.process(stream)
    assert_equivalent(flat, slow)
    assert final_time(flat) == final_time(slow)
    assert [d.reason for d in op.dead_letters] == [d.reason for d in slow_op.dead_letters]


#: case -> (factory, the output of a batch holding 0 [0, 3) and 1 [5, ∞)) on the column path
COLUMN_WISE = {
    "shift": (lambda: Shift(4), [(4, 7), (9, MAX_TIME)]),
    "traced start": (lambda: AlterLifetime(start=lambda s: s - s % 4), [(0, 3), (4, MAX_TIME)]),
    "untraced start": (lambda: AlterLifetime(start=lambda s: max(s, 2), duration=3),
                       [(2, 5), (5, 8)]),
    "to_points": (ToPoints, [(0, 1), (5, 6)]),
    "clip_duration": (lambda: ClipDuration(2), [(0, 2), (5, 7)]),
}


@pytest.mark.parametrize("case", sorted(COLUMN_WISE))
def test_these_batches_stay_column_wise(case):
    factory, lifetimes = COLUMN_WISE[case]
    batch = Columns(np.arange(2), np.array([0, 5]), np.array([3, MAX_TIME]), np.arange(2))
    [out] = factory().process([batch])
    assert type(out) is Columns
    assert list(zip(out.starts.tolist(), out.ends.tolist())) == lifetimes


def test_a_batch_at_the_end_of_the_axis_goes_event_by_event():
    batch = Columns(np.arange(2), np.array([0, MAX_TIME - 5]), None, np.arange(2))
    op = Shift(10)
    assert op.process([batch]) == [Insert(0, 10, 11, 0)]
    assert "at or past the end of the time axis" in op.dead_letters[0].reason


def test_a_decreasing_start_function_fails_on_columns_too():
    op = AlterLifetime(start=lambda s: s if s < 15 else s - 20, duration=5)
    op.process([Insert("a", 10, 20, None), Cti(12)])
    with pytest.raises(Exception, match="never decrease"):
        op.process([Columns(np.arange(1), np.array([16]), None, np.arange(1))])


# -- end to end ---------------------------------------------------------------------------------
N = 3_000
RNG = np.random.default_rng(3)
_T = np.sort(RNG.integers(0, 20 * N, N))
COLS = {"t": _T, "u": np.where(RNG.random(N) < 0.1, MAX_TIME, _T + RNG.integers(1, 60, N)),
        "v": RNG.integers(0, 9, N)}
QUERIES = {
    "alter traced start": lambda s: s.alter_lifetime(start=lambda t: t - t % 50),
    "alter start + duration": lambda s: s.alter_lifetime(start=lambda t: max(t, 100),
                                                         duration=7),
    "to_points": lambda s: s.to_points().shift(3),
    "clip_duration": lambda s: s.clip_duration(20).where(lambda p: p["v"] > 2),
    # the planner takes the keyed window for it over rows and columns (from_events: not)
    "to_points, keyed window": lambda s: s.to_points().group_apply(
        lambda p: p["v"], lambda g: g.hopping_window(300, 100).aggregate(Count())),
}


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_from_arrow_through_span_operators_equals_the_rows(runtime, query):
    from operators.ingress import AdvanceTime

    q, adv = QUERIES[query], AdvanceTime(every=512)
    got = q(Stream.from_arrow(pa.table(COLS), start="t", end="u", shape="interval",
                              advance=adv, batch_rows=700)).collect(runtime)
    rows = [row_at(COLS, i) for i in range(N)]
    slow = q(Stream.from_rows(rows, start="t", end="u", shape="interval", advance=adv))
    assert len(to_cht(got)) > 100
    assert_equivalent(got, slow.collect("inline"))
    inserts = [Insert(i, r["t"], r["u"], r) for i, r in enumerate(rows)]
    assert_equivalent(got, q(Stream.from_events([*inserts, Cti(MAX_TIME)])).collect("inline"))


def test_a_cti_at_infinity_stays_on_the_axis():
    assert Shift(3).process([Insert("a", 0, 1, None), Cti(MAX_TIME)])[-1] == Cti(MAX_TIME)


def test_the_planner_sees_points_after_to_points():
    from operators.windows.keyed import KeyedWindowAggregate

    def keyed(src: Stream) -> bool:
        q = QUERIES["to_points, keyed window"](src)
        return any(isinstance(s.factory(), KeyedWindowAggregate)
                   for s in q.plan().stages.values() if s.role == "operator")

    assert keyed(Stream.from_arrow(pa.table(COLS), start="t", end="u", shape="interval"))
    assert keyed(Stream.from_rows([], start="t").alter_lifetime(duration=9).clip_duration(1))
    # an edge source retracts (to_points passes the full retractions): the general path
    assert not keyed(Stream.from_rows([], start="t", end="u", shape="edge", id="k"))
    assert not keyed(Stream.from_events([]))
