"""The keyed window aggregate's final rows leave as one column batch per window when keys and
results are plain numbers, so that a join after it (Nexmark Q8: persons joined with the sellers
counted per window) keeps its column-wise state; the CHT is the one of the ``Insert`` rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count, Max, Sum
from operators.columns import Columns, expand
from operators.events import Cti
from operators.join import Join
from operators.windows import WindowPolicy, tumbling_window
from operators.windows.keyed import KeyedWindowAggregate
from tests.kit import PROPERTY, assert_equivalent

FINAL = WindowPolicy(emit="final")


def _key(p):
    return p[0]


def _value(p):
    return p[1]


def _points(rows: list[tuple[int, int, float]]) -> Columns:
    return Columns(np.array([f"e{i}" for i in range(len(rows))], dtype=object),
                   np.array([t for t, _, _ in rows], dtype=np.int64), None,
                   (np.array([k for _, k, _ in rows]), np.array([v for _, _, v in rows])))


@PROPERTY
@given(rows=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 4),
                               st.floats(-5, 5, allow_nan=False)), max_size=40),
       udm=st.sampled_from(["count", "sum", "max"]))
def test_final_rows_as_columns_have_the_rows_cht(rows, udm):
    rows.sort()
    make = {"count": Count, "sum": lambda: Sum(_value), "max": lambda: Max(_value)}[udm]
    batch = [_points(rows), Cti(50)] if rows else [Cti(50)]
    op = KeyedWindowAggregate(_key, tumbling_window(10), make(), FINAL, name="kw")
    got = op.process(batch)
    groups: dict[tuple[int, int], list] = {}
    for t, k, v in rows:
        groups.setdefault((t - t % 10, k), []).append((k, v))
    expected = [(w, w + 10, (k, make().compute(ps))) for (w, k), ps in groups.items()]
    assert_equivalent(list(expand(got)), expected)
    for m in got:
        if type(m) is Columns:
            assert len(m) >= 1 and isinstance(m.payload, tuple)


def test_a_join_after_final_counts_stays_column_wise():
    rows = [(t, t % 3, 1.0) for t in range(30)]
    counts = KeyedWindowAggregate(_key, tumbling_window(10), Count(), FINAL,
                                  name="kw").process([_points(rows), Cti(30)])
    assert [type(m) for m in counts] == [Columns, Columns, Columns, Cti]
    join = Join(on=(_key, _key))
    people = Columns(np.array(["p0", "p1"], dtype=object), np.array([0, 0]), np.array([30, 30]),
                     (np.array([1, 2]), np.array([7, 8])))
    join.process([people, Cti(0)], 0)
    out = join.process([m for m in counts if type(m) is Columns], 1)
    assert join.columns is not None  # still the arrays, not per-event records
    assert sorted((m.start, m.payload) for c in out for m in c.inserts()) == [
        (s, ((k, v), (k, sum(1 for t in range(s, s + 10) if t % 3 == k))))
        for s in (0, 10, 20) for k, v in ((1, 7), (2, 8))]


def test_a_window_without_groups_sends_its_one_final_row_as_columns():
    """Nexmark Q5: the maximum count per 2 s window (one row per window, no group_apply) is
    joined with the counts; as a column batch of one row it keeps the join column-wise."""
    rows = [(t, t % 3, float(t)) for t in range(30)]
    most = KeyedWindowAggregate(lambda p: None, tumbling_window(10), Max(_value), FINAL,
                                keyed=False, name="kw").process([_points(rows), Cti(30)])
    assert [type(m) for m in most] == [Columns, Columns, Columns, Cti]
    assert [(m.start, m.payload) for c in most[:3] for m in c.inserts()] == [
        (0, 9.0), (10, 19.0), (20, 29.0)]
    join = Join(on=(_value, lambda p: p))
    join.process([_points(rows), Cti(0)], 0)
    out = join.process(most[:3], 1)
    assert join.columns is not None  # still the arrays, not per-event records
    assert sorted(m.payload[0][1] for c in out for m in c.inserts()) == [9.0, 19.0, 29.0]
