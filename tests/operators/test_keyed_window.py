"""The keyed window aggregate (the planner's fast path for ``group_apply(key, window →
aggregate)`` over points) against the general ``GroupApply`` of a window operator.

Random point sources (disorder, late rows dropped, count-based CTIs) are ingested column-wise;
the fast operator gets the ``Columns`` batches (and, in a second run, the same events one
Insert at a time) and must give the CHT the general operator gives, with a valid output
stream, across a snapshot/restore.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Aggregates, Avg, Count, Max, Min, Sum, TimeWeightedAverage
from operators.cht import to_cht, validate
from operators.columns import Columns, expand
from operators.errors import OperatorError
from operators.events import Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.udm import TimeSensitiveAggregate, field_getter
from operators.windows import WindowPolicy, hopping_window, make_window, tumbling_window
from operators.windows.keyed import KeyedWindowAggregate, supports
from tests.kit import PROPERTY, assert_equivalent
from tests.reference_windows import window as reference_window


def _values(values):
    """A non-incremental aggregate whose result depends on the order of its values."""
    return tuple(round(v["v"], 3) for v in values[:3])


class Spans(TimeSensitiveAggregate):
    """A time-sensitive one: the clipped lifetimes it sees, relative to the window."""

    def compute(self, events, window):
        return tuple((s - window.start, e - window.start) for s, e, _ in events[:4])


def _parity_value(r):
    return (r["k"] % 2, r["v"])


UDMS = {"count": Count, "sum": lambda: Sum("v"), "max": lambda: Max("v"),
        "min_int": lambda: Min("k"), "max_pair": lambda: Max(_parity_value),
        "first3": lambda: _values, "avg": lambda: Avg("v"),
        "several": lambda: Aggregates(n=Count(), total=Sum("v"), top=Max("v")),
        "twa": lambda: TimeWeightedAverage("v"), "spans": Spans}
KEYS = {"field": "k", "mod": lambda r: r["k"] % 3, "text": lambda r: f"k{r['k']}"}


def reference_per_key(events, key, spec, make_udm, output):
    """The CHT definition applied literally: each key's events (with the stream's CTIs) through
    the reference window evaluator, payloads paired with the key."""
    get = field_getter(key)
    ctis = [m for m in events if type(m) is Cti]
    keys = {get(m.payload) for m in events if type(m) is Insert}
    return [(s, e, (k, r)) for k in keys
            for s, e, r in reference_window(
                [m for m in events if type(m) is Insert and get(m.payload) == k] + ctis,
                spec, make_udm(), output=output)]


def run_keyed(factory, feed, size, restore):
    """``feed`` through a fresh ``factory()`` operator ``size`` messages at a time (restored
    from its own snapshot halfway when ``restore``), checked after each step; its output,
    validated, with no state left at the end."""
    op, out = factory(), []
    for i in range(0, len(feed), size):
        if restore and i // size == len(feed) // size // 2:
            state = op.snapshot()
            op = factory()
            op.restore(state)
        out += op.process(feed[i:i + size])
        op._check()
    out += op.finish()
    out = list(expand(out))  # (final rows may leave as column batches)
    validate(out, name="keyed window output")
    assert op.state_size() == 0
    return out


@st.composite
def point_sources(draw):
    n = draw(st.integers(1, 1500))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n, dtype=np.int64) // draw(st.sampled_from([1, 3, 10])) \
        - rng.integers(0, draw(st.integers(1, 40)), n)
    scale = draw(st.sampled_from([1.0, 1e-300, 1e300, -3.0]))
    cols = {"t": t, "k": rng.integers(0, 6, n), "v": rng.random(n) * scale}
    cut = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3))))
    return [{k: c[a:b] for k, c in cols.items()} for a, b in zip([0, *cut], [*cut, n])]


@PROPERTY
@given(batches=point_sources(), size=st.integers(1, 30), hop=st.integers(1, 30),
       alignment=st.integers(-7, 7), udm=st.sampled_from(sorted(UDMS)),
       key=st.sampled_from(sorted(KEYS)), output=st.sampled_from(["window", "point_end"]),
       delay=st.integers(0, 30), restore=st.booleans(),
       emit=st.sampled_from(["speculative", "final"]))
def test_keyed_window_equals_group_apply_of_the_window(batches, size, hop, alignment, udm, key,
                                                       output, delay, restore, emit):
    spec = hopping_window(size, hop, alignment)
    src = Ingress(start="t", advance=AdvanceTime(every=256, delay=delay))
    stream = [m for b in batches for m in src.push(b)] + src.end()
    events = list(expand(stream))

    def fast():
        return KeyedWindowAggregate(KEYS[key], spec, UDMS[udm](),
                                    WindowPolicy(output=output, emit=emit),
                                    name="kw")

    expected = GroupApply(KEYS[key], lambda: make_window(spec, UDMS[udm](), output=output)
                          ).process(events)
    # ... which agrees with the reference evaluator applied to each key's events (but for
    # "first3": it sees equal starts in arrival order, which a CHT, a set of rows, cannot say)
    if udm != "first3":
        assert_equivalent(expected, reference_per_key(events, KEYS[key], spec, UDMS[udm],
                                                      output))
    # column batches, events one by one, column batches several at a time (merged), and
    # events many at a time (runs of inserts taken as column batches: inserts_as_columns)
    for feed, size in ((stream, 1), (events, 1), (stream, 4), (events, 97)):
        out = run_keyed(fast, feed, size, restore)
        if emit == "final":
            assert not any(type(m) is Retract for m in out)
        assert_equivalent(out, expected)


def test_a_tumbling_count_per_key():
    #   key a: ·0 ·2          ·8      key b:        ·6        tumbling_window(5), CTI 12
    #   output (a, 2) [0 ─ 5)   (a, 1) (b, 1) [5 ─ 10)   and the output CTI 10
    op = KeyedWindowAggregate("k", tumbling_window(5), Count())
    out = op.process([Insert(1, 0, 1, {"k": "a"}), Insert(2, 2, 3, {"k": "a"}),
                      Insert(3, 6, 7, {"k": "b"}), Insert(4, 8, 9, {"k": "a"}), Cti(12)])
    assert to_cht(out) == [(0, 5, ("a", 2)), (5, 10, ("a", 1)), (5, 10, ("b", 1))]
    assert out[-1] == Cti(10)


@pytest.mark.parametrize("bad", [Insert(9, 3, 8, {"k": "a"}),
                                 Retract(1, 10, 11, 10, {"k": "a"}),
                                 Insert(9, 3, 4, {"k": "a"})], ids=["interval", "retract",
                                                                    "behind-cti"])
def test_what_the_fast_path_cannot_take_fails_loudly(bad):
    op = KeyedWindowAggregate("k", tumbling_window(5), Count(), name="kw")
    op.process([Insert(1, 10, 11, {"k": "a"}), Cti(6)])
    with pytest.raises(OperatorError, match="'kw'"):
        op.process([bad])


def test_a_failing_udm_names_operator_udm_window_and_group():
    op = KeyedWindowAggregate("k", tumbling_window(5), Sum("v"), name="kw")
    with pytest.raises(OperatorError, match=r"'kw'.*Sum.*\[.*group 'a'"):
        op.process([Insert(1, 0, 1, {"k": "a", "v": "x"})])


WINDOW, POINT_END = WindowPolicy(output="window"), WindowPolicy(output="point_end")


def test_what_the_planner_may_replace():
    assert supports(tumbling_window(5), Count(), "aggregate", WINDOW, "raise")
    assert supports(hopping_window(5, 1), len, "aggregate", POINT_END, "raise")
    assert not supports(tumbling_window(5), Count(), "apply", WINDOW, "raise")
    assert not supports(tumbling_window(5), Count(), "aggregate", WINDOW, "dead_letter")
    assert supports(hopping_window(5, 1), TimeWeightedAverage("v"), "aggregate", WINDOW, "raise")
    assert not supports(hopping_window(5, 1), Count(), "aggregate",
                        WindowPolicy(output="compressed"), "raise")


@PROPERTY
@given(st.lists(st.lists(st.floats(allow_nan=False, allow_infinity=False)
                         | st.integers(-5, 5).map(float), min_size=1, max_size=6),
                min_size=1, max_size=5),
       st.booleans())
def test_column_wise_sums_are_exactly_the_per_value_sums(groups, start_full):
    udm = Sum("v")
    states = [udm.add(udm.initial_state(), [{"v": 0.1}]) if start_full else None
              for _ in groups]
    expected = [udm.add(udm.initial_state() if s is None else
                        udm.add(udm.initial_state(), [{"v": 0.1}]), [{"v": v} for v in g])
                for s, g in zip(states, groups)]
    bounds = np.cumsum([0, *map(len, groups)]).tolist()
    column = np.array([v for g in groups for v in g], dtype=np.float64)
    got = udm.add_groups(states, {"v": column}, bounds)
    if got is None:  # subnormals (or no values) take the per-value path
        assert len(column) == 0 or (np.abs(column[column != 0]) < 2.0**-1021).any()
        return
    assert [udm.result(s) for s in got] == [udm.result(s) for s in expected]
    assert [(s.n, s.n_float) for s in got] == [(s.n, s.n_float) for s in expected]


@PROPERTY
@given(batches=point_sources(), size=st.integers(1, 30), hop=st.integers(1, 30),
       alignment=st.integers(-7, 7), udm=st.sampled_from(sorted(UDMS)),
       output=st.sampled_from(["window", "point_end"]), delay=st.integers(0, 30),
       emit=st.sampled_from(["speculative", "final"]))
def test_one_group_equals_the_general_window(batches, size, hop, alignment, udm, output, delay,
                                             emit):
    # what the planner runs for stream.hopping_window(...).aggregate(...) over points
    spec = hopping_window(size, hop, alignment)
    src = Ingress(start="t", advance=AdvanceTime(every=256, delay=delay))
    stream = [m for b in batches for m in src.push(b)] + src.end()
    events = list(expand(stream))
    expected = make_window(spec, UDMS[udm](), output=output).process(events)
    if udm != "first3":  # (equal starts in arrival order: not a CHT's to say)
        assert_equivalent(expected, reference_window(events, spec, UDMS[udm](), output=output))
    op = KeyedWindowAggregate(lambda p: 0, spec, UDMS[udm](),
                              WindowPolicy(output=output, emit=emit),
                              keyed=False, name="w")
    out = []
    for msg in stream:
        out += op.process([msg])
        op._check()
    out += op.finish()
    validate(out, name="window output")
    assert_equivalent(list(expand(out)), expected)  # final rows leave as column batches


def test_the_planner_runs_a_window_over_points_column_wise():
    from topology import Stream

    rows = [{"t": t, "v": float(t % 4)} for t in range(40)]
    q = Stream.from_rows(rows, start="t").tumbling_window(10).aggregate(Sum("v"))
    assert "column-wise window aggregate" in q.explain()
    assert to_cht(q.collect(runtime="inline")) == [
        (s, s + 10, sum(float(t % 4) for t in range(s, s + 10))) for s in range(0, 40, 10)]
    intervals = Stream.from_rows(rows, start="t", end=lambda r: r["t"] + 3, shape="interval")
    assert "column-wise" not in intervals.tumbling_window(10).aggregate(Sum("v")).explain()


@pytest.mark.parametrize("udm", [Max("v"), Min("v")], ids=repr)
@pytest.mark.parametrize("values", [[1.5, math.nan, -2.0], [3, 1, 2], ["b", "a", "c"],
                                    [-0.0, 0.0, -0.0], [0.0, -0.0, 0.0],
                                    [1, 2.5, True], ["a", None, "b"], [1, "a", 2]])
def test_extremes_read_columns_as_the_payloads_say(udm, values):
    """Min and Max add a column batch's values at once: the same result as one payload at a
    time (NaN ranks highest, ties keep their first value), and the same error where values
    do not order (None, a str beside ints)."""
    column = np.array(values, dtype=object if any(not isinstance(v, float) for v in values)
                      else float)
    batch = Columns(np.arange(3), np.arange(3), None, {"v": column})

    def run(feed):
        op = KeyedWindowAggregate(lambda p: 0, tumbling_window(10), udm, keyed=False,
                                  name="kw")
        try:
            return to_cht(op.process(feed) + op.finish())
        except OperatorError as e:
            return str(e.__cause__)

    assert repr(run([batch])) == repr(run(batch.inserts()))
