"""The column-wise path end to end, inline and on Ray: ``Stream.from_arrow`` → vectorised
``where``/``select`` → the keyed window aggregate (or the general operators, for what the
fast path does not take) must give the CHT the row-wise path (``Stream.from_rows``, a general
``group_apply`` per key) gives, and the reference evaluator's windows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.aggregates import Aggregates, Count, Max, Sum
from operators.cht import to_cht
from operators.columns import expand
from operators.events import Insert
from operators.ingress import AdvanceTime, Ingress
from operators.windows import hopping_window
from operators.windows.keyed import KeyedWindowAggregate
from tests.kit import ON_RAY, assert_equivalent
from tests.operators.test_keyed_window import reference_per_key
from tests.reference_joins import join as join_reference
from tests.reference_windows import window as reference_window
from topology import Stream

N = 30_000


def _columns(seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(N, dtype=np.int64) * 10 + rng.integers(0, 50, N)  # disorder up to 50 ticks
    return {"t": t, "k": rng.integers(0, 40, N), "v": rng.random(N),
            "tag": np.array([f"m{i % 7}" for i in range(N)], dtype=object)}


def _rows(cols):
    names = list(cols)
    return [dict(zip(names, vals)) for vals in zip(*(cols[k].tolist() for k in names))]


ADVANCE = AdvanceTime(every=2_000, delay=40)


def _query(src: Stream, window: str, partitions: int) -> Stream:
    spec = {"tumbling": lambda g: g.tumbling_window(1_000),
            "hopping": lambda g: g.hopping_window(3_000, 1_000)}[window]
    return (src.where(lambda r: r["v"] >= 0.25)  # works on whole columns
            .select(lambda r: (r["k"], r["v"], r["tag"]))
            .group_apply(lambda p: p[0],
                         lambda g: spec(g).aggregate(
                             Aggregates(n=Count(), total=Sum(1), top=Max(1))),
                         partitions=partitions))


@pytest.mark.parametrize(("window", "partitions"), [("tumbling", 1), ("hopping", 2)])
def test_column_wise_query_equals_the_row_wise_one(runtime, window, partitions):
    cols = _columns()
    fast = _query(Stream.from_arrow(cols, start="t", advance=ADVANCE, batch_rows=4_096),
                  window, partitions)
    slow = _query(Stream.from_rows(_rows(cols), start="t", advance=ADVANCE), window,
                  partitions)
    got = fast.collect(runtime=runtime)
    assert_equivalent(got, slow.collect(runtime="inline"))
    assert len(to_cht(got)) > 100


def test_the_planner_takes_the_fast_path_only_over_points():
    cols = _columns()
    table = pa.table(cols)
    points = _query(Stream.from_arrow(table, start="t", advance=ADVANCE), "tumbling", 1)
    [step] = [s for s in points.plan().stages.values() if s.role == "operator"
              and isinstance(s.factory(), KeyedWindowAggregate)]
    assert step.step.startswith("group_apply")
    intervals = _query(Stream.from_arrow(table, start="t", end="t", shape="interval",
                                         advance=ADVANCE), "tumbling", 1)
    assert not any(isinstance(s.factory(), KeyedWindowAggregate)
                   for s in intervals.plan().stages.values() if s.role == "operator")


def test_a_function_that_is_not_elementwise_runs_per_event(runtime):
    # bool(...) of a column raises: where falls back to calling the predicate per event
    cols = _columns(2)
    q = (Stream.from_arrow(cols, start="t", advance=ADVANCE)
         .where(lambda r: bool(r["v"] >= 0.5))
         .tumbling_window(5_000).aggregate(Count()))
    expected = [(s, e, int(((cols["t"] >= s) & (cols["t"] < e) & (cols["v"] >= 0.5)).sum()))
                for s, e, _ in to_cht(q.collect(runtime="inline"))]
    assert to_cht(q.collect(runtime=runtime)) == expected


@st.composite
def _point_tables(draw):
    n = draw(st.integers(1, 3_000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n, dtype=np.int64) * draw(st.sampled_from([1, 7])) - rng.integers(0, 30, n)
    return {"t": t, "k": rng.integers(0, 5, n), "v": rng.random(n)}


@settings(ON_RAY, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cols=_point_tables(), size=st.integers(1, 60), hop=st.integers(1, 60),
       delay=st.integers(0, 40), partitions=st.sampled_from([1, 3]))
def test_column_wise_path_matches_the_reference(runtime, cols, size, hop, delay, partitions):
    # from_arrow → where → select (both column-wise) → keyed window aggregate, against the
    # reference evaluator applied to the ingested events, per key
    advance = AdvanceTime(every=256, delay=delay)
    spec = hopping_window(size, hop)
    q = (Stream.from_arrow(cols, start="t", advance=advance, batch_rows=700)
         .where(lambda r: r["v"] >= 0.2).select(lambda r: (r["k"], r["v"]))
         .group_apply(lambda p: p[0], lambda g: g.hopping_window(size, hop).aggregate(
             Aggregates(n=Count(), total=Sum(1))), partitions=partitions))
    src = Ingress(start="t", advance=advance)
    events = [m for m in expand(src.push(cols) + src.end())
              if type(m) is not Insert or m.payload["v"] >= 0.2]
    events = [Insert(m.id, m.start, m.end, (m.payload["k"], m.payload["v"]))
              if type(m) is Insert else m for m in events]
    expected = reference_per_key(events, lambda p: p[0], spec,
                                 lambda: Aggregates(n=Count(), total=Sum(1)), "window")
    assert_equivalent(q.collect(runtime=runtime), expected)


def _ingested(cols, advance):
    """The events a point source makes of ``cols`` (the reference's input)."""
    src = Ingress(start="t", advance=advance)
    return list(expand(src.push(cols) + src.end()))


@settings(ON_RAY, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cols=_point_tables(), size=st.integers(1, 60), hop=st.integers(1, 60),
       delay=st.integers(0, 40), emit=st.sampled_from(["speculative", "final"]))
def test_a_window_over_points_without_group_apply_matches_the_reference(runtime, cols, size,
                                                                        hop, delay, emit):
    # the planner runs it as the column-wise window aggregate with one group
    advance = AdvanceTime(every=256, delay=delay)
    q = (Stream.from_arrow(cols, start="t", advance=advance, batch_rows=700)
         .hopping_window(size, hop, emit=emit).aggregate(Aggregates(n=Count(), total=Sum("v"))))
    assert "column-wise window aggregate" in q.explain()
    expected = reference_window(_ingested(cols, advance), hopping_window(size, hop),
                                Aggregates(n=Count(), total=Sum("v")), output="window")
    assert_equivalent(q.collect(runtime=runtime), expected)


def _pair(a, b):
    return (a["k"], a["v"], b["v"])


def _untraced_pair(a, b):
    return (a["k"], a["v"] if a["v"] > b["v"] else b["v"])


@settings(ON_RAY, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(left=_point_tables(), right=_point_tables(), life=st.integers(1, 80),
       delay=st.integers(0, 40), select=st.sampled_from([None, _pair, _untraced_pair]))
def test_a_join_of_column_batches_matches_the_reference(runtime, left, right, life, delay,
                                                        select):
    # from_arrow on both sides → alter_lifetime (column-wise) → the join's column path
    advance = AdvanceTime(every=256, delay=delay)

    def side(cols, name):
        return (Stream.from_arrow(cols, start="t", advance=advance, batch_rows=500, name=name)
                .alter_lifetime(duration=life))

    q = side(left, "left").join(side(right, "right"), on=("k", "k"), select=select)

    def rows(cols):
        return [(s, s + life, p) for s, _, p in to_cht(_ingested(cols, advance))]

    expected = join_reference(rows(left), rows(right), on=("k", "k"), select=select)
    assert_equivalent(q.collect(runtime=runtime), expected)
