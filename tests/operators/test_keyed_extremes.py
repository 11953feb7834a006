"""Min and Max on the keyed window aggregate keep only the extreme
(``add_insert_only_ranges``: the operator never removes, so no sorted state is needed): each
range's extreme found column-wise (``reduceat``; a tuple of columns by ``lexsort``), against the
general ``GroupApply`` of a window operator (whose states are sorted multisets).

Values that the fast path leaves to the general one ride along: floats with NaN, ``0.0`` and
``-0.0`` (their rank among equal values), states made by a per-event add (a SortedList), and
interval lifetimes (``intervals=True``); the Nexmark queries Q7 and Q17 are compared inline
and on Ray with the general path's output.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.nexmark import generator as gen
from benchmarks.nexmark import queries as nq
from operators.aggregates import Aggregates, Builtin, Count, Max, Min
from operators.aggregates import extremes as extreme_module
from operators.cht import to_cht
from operators.columns import Columns, expand
from operators.events import Cti, Insert
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.windows import WindowPolicy, hopping_window, make_window
from operators.windows.keyed import KeyedWindowAggregate
from tests.kit import PROPERTY, assert_equivalent
from tests.operators.test_keyed_window import run_keyed


def pair(r):
    return (r["v"], r["w"])


def triple(r):
    return (r["v"], r["w"], r["k"])


FIELDS = {"v": "v", "pair": pair, "triple": triple}


@st.composite
def sources(draw):
    """Column batches of points: key ``k``, values ``v`` and ``w`` of one kind each (few
    distinct values, so ties are common)."""
    n = draw(st.integers(1, 700))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n, dtype=np.int64) // draw(st.sampled_from([1, 3, 10])) \
        - rng.integers(0, draw(st.integers(1, 20)), n)

    def column(kind):
        if kind == "int":
            return rng.integers(-4, 4, n)
        if kind == "uint":
            return rng.integers(0, 2**63, n, dtype=np.uint64) | np.uint64(2**63)
        if kind == "bool":
            return rng.random(n) < 0.5
        if kind == "float":
            return rng.integers(1, 5, n) * 0.25
        # NaN, 0.0 and -0.0 beside others: the general path's business
        return rng.choice(np.array([math.nan, 0.0, -0.0, 1.5, -2.0]), n)

    kinds = ["int", "uint", "bool", "float", "special"]
    cols = {"t": t, "k": rng.integers(0, 5, n), "v": column(draw(st.sampled_from(kinds))),
            "w": column(draw(st.sampled_from(kinds)))}
    cut = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3))))
    return [{k: c[a:b] for k, c in cols.items()} for a, b in zip([0, *cut], [*cut, n])]


def tuples_without_nan(batches, field):
    """NaN inside a tuple does not order (``nan < x`` and ``x < nan`` are both false): the
    result of any path depends on the order of the values; single NaNs rank on top."""
    if field == "v":
        return batches
    return [{k: np.nan_to_num(c, nan=0.5) if c.dtype.kind == "f" else c for k, c in b.items()}
            for b in batches]


def extremes(field):
    return Aggregates(lo=Min(FIELDS[field]), hi=Max(FIELDS[field]), n=Count())


@PROPERTY
@given(batches=sources(), size=st.integers(1, 12), hop=st.integers(1, 12),
       field=st.sampled_from(sorted(FIELDS)), emit=st.sampled_from(["speculative", "final"]),
       delay=st.integers(0, 10), restore=st.booleans())
def test_insert_only_extremes_equal_the_general_window(batches, size, hop, field, emit, delay,
                                                       restore):
    batches = tuples_without_nan(batches, field)
    spec = hopping_window(size, hop, 0)
    src = Ingress(start="t", advance=AdvanceTime(every=256, delay=delay))
    stream = [m for b in batches for m in src.push(b)] + src.end()
    events = list(expand(stream))
    expected = GroupApply("k", lambda: make_window(spec, extremes(field))).process(events)

    def fast():
        return KeyedWindowAggregate("k", spec, extremes(field), WindowPolicy(emit=emit),
                                    name="kw")

    # column batches one at a time, and several at a time (merged)
    for step in (1, 3):
        assert_equivalent(run_keyed(fast, stream, step, restore), expected)


@PROPERTY
@given(batches=sources(), size=st.integers(1, 12), field=st.sampled_from(sorted(FIELDS)))
def test_per_event_states_then_column_batches(batches, size, field):
    """Events of the first batch one Insert at a time (their states are the general sorted
    multisets), the rest as column batches: the insert-only path takes such states back to
    the general path."""
    batches = tuples_without_nan(batches, field)
    spec = hopping_window(size, size, 0)
    src = Ingress(start="t", advance=AdvanceTime(every=256, delay=5))
    pushed = [src.push(b) for b in batches]
    tail = src.end()
    first = list(expand(pushed[0]))
    feed = [*first, *[m for p in pushed[1:] for m in p], *tail]
    events = list(expand(feed))
    expected = GroupApply("k", lambda: make_window(spec, extremes(field))).process(events)
    out = run_keyed(lambda: KeyedWindowAggregate("k", spec, extremes(field), name="kw"),
                    feed, 1, False)
    assert_equivalent(out, expected)


@PROPERTY
@given(batches=sources(), size=st.integers(1, 12), hop=st.integers(1, 12),
       length=st.integers(1, 15), field=st.sampled_from(sorted(FIELDS)))
def test_interval_lifetimes(batches, size, hop, length, field):
    """Intervals (``intervals=True``) are added to every window they overlap: the extremes
    are those of the general window operator's (which sees the intervals as they are)."""
    batches = tuples_without_nan(batches, field)
    spec = hopping_window(size, hop, 0)
    src = Ingress(start="t", advance=AdvanceTime(every=256, delay=20))
    stream = []
    for b in batches:
        for m in src.push(b):
            if type(m) is Columns:
                m = Columns(m.ids, m.starts, m.starts + length, m.payload)
            stream.append(m)
    stream += src.end()
    events = list(expand(stream))
    expected = GroupApply("k", lambda: make_window(spec, extremes(field))).process(events)
    out = run_keyed(lambda: KeyedWindowAggregate("k", spec, extremes(field), intervals=True,
                                                 name="kw"), stream, 1, False)
    assert_equivalent(out, expected)


def _columns(t, k, v, w):
    n = len(t)
    return Columns(np.arange(n), np.array(t), None,
                   {"k": np.array(k), "v": np.array(v), "w": np.array(w)})


def test_the_fast_path_keeps_only_the_extreme():
    op = KeyedWindowAggregate("k", hopping_window(10, 10, 0), Aggregates(
        lo=Min("v"), hi=Max(pair)), WindowPolicy(emit="final"), name="kw")
    op.process([_columns([1, 2, 3, 4], [0, 0, 0, 1], [5, 9, 9, 2], [1, 3, 2, 7])])
    lo, hi = op.open[0][0]
    assert type(lo) is extreme_module.Best and type(hi) is extreme_module.Best
    assert (lo.key, hi.key) == ((0, 5, 0), (0, (9, 3), (0, 0)))
    # a second batch merges with the kept extreme; a per-event add too
    op.process([_columns([5, 6], [0, 0], [4, 9], [0, 4])])
    op.process([Insert(99, 7, 8, {"k": 0, "v": 3, "w": 0})])
    out = op.process([Cti(10)])
    assert to_cht(out) == [(0, 10, (0, {"lo": 3, "hi": (9, 4)})),
                           (0, 10, (1, {"lo": 2, "hi": (2, 7)}))]


def test_an_insert_only_state_refuses_a_removal_and_pickles():
    state = Max("v").add_insert_only_ranges([None], {"v": np.array([3, 8, 1])}, 3, [0], [3])[0]
    assert Max("v").result(pickle.loads(pickle.dumps(state))) == 8
    assert Max("v").result(Max("v").copy_state(state)) == 8
    with pytest.raises(ValueError, match="keeps only the extreme"):
        Max("v").remove(state, [{"v": 8}])


@pytest.mark.parametrize("udm", [Min("v"), Max("v"), Min(pair), Max(pair)], ids=repr)
def test_nan_and_signed_zeros_take_the_general_path(udm):
    cols = {"v": np.array([0.0, -0.0, math.nan, 1.0]), "w": np.array([1, 1, 1, 1])}
    got = udm.add_insert_only_ranges([None, None], cols, 4, [0, 0], [2, 4])
    assert all(type(s) is not extreme_module.Best for s in got)
    values = [{"v": v, "w": 1} for v in cols["v"].tolist()]
    want = [udm.compute(values[:2]), udm.compute(values)]
    assert [repr(udm.result(s)) for s in got] == [repr(w) for w in want]


@pytest.fixture(scope="module")
def bids():
    return gen.generate(30_000, seed=3, inter_event_delay=1000)


@pytest.mark.parametrize("name", ["Q7", "Q17"])
def test_q7_q17_equal_the_general_path(name, bids, runtime, monkeypatch):
    """The queries through the planner (inline and on Ray: the actors take the insert-only
    path) against the same query inline with the insert-only path turned off."""
    q = nq.QUERIES[name]

    def run(rt):
        src = nq.sources(bids)
        return to_cht(list(expand(q.cedar(*(src[i] for i in q.inputs)).collect(
            runtime=rt, columns=True))))

    got = run(runtime)
    with monkeypatch.context() as m:
        m.setattr(extreme_module.Extreme, "add_insert_only_ranges",
                  Builtin.add_insert_only_ranges)
        want = run("inline")
    assert len(got) > 1
    assert_equivalent(got, want)
