"""The keyed window aggregate's hopping groups as row ranges (``add_ranges``).

A hopping window's (window, key) groups are overlapping ranges of one batch sorted by (key,
pane); the built-ins add a range from prefix sums. Checked here exactly (not to 9 digits, as
CHT comparisons round): the states ``add_ranges`` builds are the states per-value ``add``
builds, and the operator over large batches with float, bool and string keys gives exactly
the rows of the general ``GroupApply`` of a window operator, itself checked against the
reference evaluator.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import (
    Aggregates,
    Avg,
    Count,
    ExactSum,
    Max,
    Sum,
    TimeWeightedAverage,
)
from operators.cht import to_cht, validate
from operators.columns import expand
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.udm import IncrementalAggregate
from operators.windows import WindowPolicy, hopping_window, make_window
from operators.windows.keyed import KeyedWindowAggregate
from tests.kit import HEAVY, PROPERTY
from tests.operators.test_keyed_window import reference_per_key


class Spread(IncrementalAggregate):
    """A user's incremental aggregate (no column-wise add): it gets one ``add`` per group."""

    def initial_state(self):
        return Counter()

    def add(self, state, values):
        state.update(round(p["v"], 2) for p in values)
        return state

    def remove(self, state, values):
        state.subtract(round(p["v"], 2) for p in values)
        return +state

    def result(self, state):
        return (sum(state.values()), min(state), max(state))


UDMS = {"count": Count, "spread": Spread, "max": lambda: Max("v"), "sum": lambda: Sum("v"),
        "avg": lambda: Avg("v"),
        "twa": lambda: TimeWeightedAverage("v"),
        "several": lambda: Aggregates(n=Count(), total=Sum("v"), mean=Avg("v"))}


def _exact(state):
    """A state as plain values, compared exactly (an ExactSum's scaled integer)."""
    if isinstance(state, ExactSum):
        return state.__getstate__()
    if isinstance(state, list):
        return [_exact(s) for s in state]
    return state


# wide exponents (copied out and summed per group) and subnormals (added per value)
finite = (st.floats(allow_nan=False, allow_infinity=False)
          | st.floats(-1, 1, allow_nan=False)
          | st.sampled_from([0.0, -0.0, 1e-300, -1e300, 2.0**-1022, 5e-324]))


@PROPERTY
@given(values=st.lists(finite, min_size=1, max_size=40)
       | st.lists(st.integers(-2**20, 2**20).map(lambda i: i / 1024)  # narrow exponents:
                  | st.floats(0.1, 1), min_size=1, max_size=40),  # prefix sums
       data=st.data(),
       udm=st.sampled_from(sorted(set(UDMS) - {"spread", "max"})), start_full=st.booleans())
def test_range_adds_are_exactly_the_per_value_adds(values, data, udm, start_full):
    n = len(values)
    bounds = st.tuples(st.integers(0, n - 1), st.integers(1, n)).map(sorted).filter(
        lambda ab: ab[0] < ab[1])
    ranges = data.draw(st.lists(bounds, min_size=1, max_size=12))
    agg = UDMS[udm]()
    timed = udm == "twa"
    seed = [(0, 1, {"v": 0.25})] if timed else [{"v": 0.25}]

    def fresh():
        state = agg.initial_state()
        return agg.add(state, seed) if start_full else state

    def per_value(a, b):
        rows = [{"v": v} for v in values[a:b]]
        return agg.add(fresh(), [(0, 1, r) for r in rows] if timed else rows)

    states = [fresh() if start_full else None for _ in ranges]
    got = agg.add_ranges(states, {"v": np.array(values, dtype=np.float64)}, n,
                         [a for a, _ in ranges], [b for _, b in ranges])
    if got is None:  # subnormals take the per-value path
        assert udm != "count"
        assert (np.abs(np.array([v for v in values if v != 0])) < 2.0**-1021).any()
        return
    assert [_exact(s) for s in got] == [_exact(per_value(a, b)) for a, b in ranges]


def _rows(rows):
    """A CHT as a multiset compared exactly: rows by repr (dict results are unhashable),
    -0.0 and 0.0 keys as one (equal keys, one group, whichever arrived first names it)."""
    table = rows if rows and type(rows[0]) is tuple else to_cht(rows)
    return Counter(repr((s, e, (k + 0.0 if isinstance(k, float) else k, r)))
                   for s, e, (k, r) in table)


def _keys(kind, k):
    if kind == "float":  # -0.0 and 0.0 are one group, as in a dict
        return np.array([-0.0, 0.0, 1.5, -2.5, 1e9])[k % 5]
    if kind == "bool":
        return k % 2 == 0
    if kind == "str":  # coded to ints by first appearance
        return np.array([f"m{i}" for i in k.tolist()], dtype=object)
    if kind == "unicode":
        return np.array([f"m{i % 3}" for i in k.tolist()])
    return k * 1_000_003 - 7  # wide integers


@st.composite
def sources(draw):
    n = draw(st.integers(1, 3000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n, dtype=np.int64) // draw(st.sampled_from([1, 4, 20])) \
        - rng.integers(0, draw(st.integers(1, 60)), n)
    k = rng.integers(0, draw(st.integers(1, 12)), n)
    kind = draw(st.sampled_from(["float", "bool", "int", "str", "unicode"]))
    cols = {"t": t, "k": _keys(kind, k),
            "v": rng.random(n) * draw(st.sampled_from([1.0, -1e200, 3.0]))}
    cut = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3))))
    return [{c: col[a:b] for c, col in cols.items()} for a, b in zip([0, *cut], [*cut, n])]


@HEAVY
@given(batches=sources(), hop=st.integers(1, 12), multiple=st.integers(1, 6),
       extra=st.sampled_from([0, 0, 1, 5]), alignment=st.integers(-9, 9),
       udm=st.sampled_from(sorted(UDMS)), every=st.sampled_from([64, 1000, 5000]),
       emit=st.sampled_from(["speculative", "final"]), restore=st.booleans())
def test_large_batches_give_exactly_the_general_rows(batches, hop, multiple, extra, alignment,
                                                     udm, every, emit, restore):
    # sizes a multiple of the hop (panes of one hop) and not (panes of gcd(size, hop) ticks)
    spec = hopping_window(hop * multiple + extra, hop, alignment)
    src = Ingress(start="t", advance=AdvanceTime(every=every, delay=60))
    stream = [m for b in batches for m in src.push(b)] + src.end()
    events = list(expand(stream))
    expected = GroupApply("k", lambda: make_window(spec, UDMS[udm]())).process(events)
    if len(events) <= 600:  # (the reference evaluator is quadratic)
        reference = reference_per_key(events, "k", spec, UDMS[udm], "window")
        assert _rows(expected) == _rows(reference)

    def fast():
        return KeyedWindowAggregate("k", spec, UDMS[udm](), WindowPolicy(emit=emit), name="kw")

    op, out = fast(), []
    for i in range(0, len(stream), 3):  # several Columns at once: merged into one batch
        if restore and i == len(stream) // 6 * 3:
            state = op.snapshot()
            op = fast()
            op.restore(state)
        out += op.process(stream[i:i + 3])
        op._check()
    out += op.finish()
    validate(out, name="keyed window output")
    assert op.state_size() == 0
    assert _rows(list(expand(out))) == _rows(expected)  # final rows may leave as Columns
