"""The keyed session aggregate (the planner's column-wise path for ``group_apply(key,
session_window → aggregate)`` over points) against the general ``GroupApply`` of a
:class:`SessionWindowOperator`, and through the planner on both runtimes.

Random point sources (disorder, late rows dropped, count-based CTIs) are ingested
column-wise; the fast operator takes the ``Columns`` batches, the same events one Insert at a
time, and several batches at once, across a snapshot/restore, and must give the general
path's CHT with a valid output stream, speculative or final. Keys include float keys holding
NaN, alone and in tuples: every NaN key is one group, as on every other path (issue #41,
item 4).
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Aggregates, Avg, Count, Max, Min, Sum, TimeWeightedAverage
from operators.cht import to_cht, validate
from operators.columns import expand
from operators.errors import OperatorError
from operators.events import Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.udm import field_getter
from operators.windows import SessionWindow, WindowPolicy, make_window
from operators.windows.keyed_session import KeyedSessionAggregate, supports_sessions
from tests.kit import PROPERTY, assert_equivalent
from tests.operators.test_keyed_window import point_sources, run_keyed
from tests.reference_session import session_window as reference_session
from topology import Stream

UDMS = {"count": Count, "sum": lambda: Sum("v"), "max": lambda: Max("v"),
        "min_int": lambda: Min("k"), "avg": lambda: Avg("v"),
        "several": lambda: Aggregates(n=Count(), total=Sum("v"), top=Max("v"))}
KEYS = {"field": "k", "mod": lambda r: r["k"] % 3, "text": lambda r: f"k{r['k']}",
        "float": lambda r: r["k"] / 2, "nan": "f", "nan_tuple": lambda r: (r["f"], r["k"] % 2)}


@st.composite
def point_sources_with_nan(draw):
    """:func:`point_sources` with a float column ``f``: ``k / 2``, or NaN where ``k % 3 == 0``
    (each row's NaN another object once the rows are payloads)."""
    batches = draw(point_sources())
    return [{**b, "f": np.where(b["k"] % 3 == 0, np.nan, b["k"] / 2)} for b in batches]


@PROPERTY
@given(batches=point_sources_with_nan(), gap=st.integers(1, 40), udm=st.sampled_from(sorted(UDMS)),
       key=st.sampled_from(sorted(KEYS)), output=st.sampled_from(["window", "point_end"]),
       delay=st.integers(0, 30), restore=st.booleans(),
       emit=st.sampled_from(["speculative", "final"]))
def test_keyed_sessions_equal_group_apply_of_the_session_window(batches, gap, udm, key, output,
                                                                delay, restore, emit):
    spec = SessionWindow(gap)
    src = Ingress(start="t", advance=AdvanceTime(every=256, delay=delay))
    stream = [m for b in batches for m in src.push(b)] + src.end()
    events = list(expand(stream))

    def fast():
        return KeyedSessionAggregate(KEYS[key], spec, UDMS[udm](),
                                     WindowPolicy(output=output, emit=emit),
                                     name="ks")

    expected = GroupApply(KEYS[key], lambda: make_window(spec, UDMS[udm](), output=output)
                          ).process(events)
    # column batches, events one by one, and column batches several at a time (merged)
    for feed, size in ((stream, 1), (events, 1), (stream, 4)):
        out = run_keyed(fast, feed, size, restore)
        if emit == "final":
            assert not any(type(m) is Retract for m in out)
        assert_equivalent(out, expected)


def test_a_late_event_bridges_two_sessions_of_a_key():
    #   key a:  ·0 ·2              ·10 ·12      then a·6 bridges them     gap 5, Count
    #   key b:        ·3
    #   a [0, 7) 2, a [10, 17) 2, b [3, 8) 1  →  a [0, 17) 5, both rows of a retracted
    op = KeyedSessionAggregate("k", SessionWindow(5), Count(), name="ks")
    out = op.process([Insert(i, t, t + 1, {"k": k}) for i, (t, k) in
                      enumerate(((0, "a"), (2, "a"), (3, "b"), (10, "a"), (12, "a")))])
    assert to_cht(out) == [(0, 7, ("a", 2)), (3, 8, ("b", 1)), (10, 17, ("a", 2))]
    out += op.process([Insert("x", 6, 7, {"k": "a"})])
    op._check()
    assert to_cht(out) == [(0, 17, ("a", 5)), (3, 8, ("b", 1))]
    out += op.process([Cti(9)])
    assert out[-1] == Cti(0)  # a's session can still grow
    out += op.process([Cti(17)])
    assert out[-1] == Cti(17) and op.state_size() == 0
    validate(out)


@pytest.mark.parametrize("bad", [Insert(9, 3, 8, {"k": "a"}),
                                 Retract(1, 10, 11, 10, {"k": "a"})], ids=["interval", "retract"])
def test_what_the_fast_path_cannot_take_fails_loudly(bad):
    op = KeyedSessionAggregate("k", SessionWindow(5), Count(), name="ks")
    op.process([Insert(1, 10, 11, {"k": "a"})])
    with pytest.raises(OperatorError, match="'ks'"):
        op.process([bad])


def test_a_failing_udm_names_operator_udm_session_and_group():
    op = KeyedSessionAggregate("k", SessionWindow(5), Sum("v"), name="ks")
    with pytest.raises(OperatorError, match=r"'ks'.*Sum.*\[0, 5\).*group 'a'"):
        op.process([Insert(1, 0, 1, {"k": "a", "v": "x"})])


WINDOW, POINT_END = WindowPolicy(output="window"), WindowPolicy(output="point_end")


def test_what_the_planner_may_replace():
    assert supports_sessions(SessionWindow(5), Count(), "aggregate", WINDOW, "raise")
    assert supports_sessions(SessionWindow(5), Sum("v"), "aggregate", POINT_END, "raise")
    assert not supports_sessions(SessionWindow(5, 9), Count(), "aggregate", WINDOW, "raise")
    assert not supports_sessions(SessionWindow(5), Count(), "aggregate", WINDOW, "dead_letter")
    assert not supports_sessions(SessionWindow(5), TimeWeightedAverage("v"), "aggregate",
                                 WINDOW, "raise")
    assert not supports_sessions(SessionWindow(5), len, "aggregate", WINDOW, "raise")


ROWS = [{"t": int(t), "k": int(k), "v": float(v)} for t, k, v in zip(
    np.sort(np.random.default_rng(7).integers(0, 5_000, 3_000)),
    np.random.default_rng(8).integers(0, 40, 3_000),
    np.random.default_rng(9).random(3_000))]


@pytest.mark.parametrize("emit", ["speculative", "final"])
@pytest.mark.parametrize("keyed", [True, False])
def test_the_planner_runs_sessions_column_wise(runtime, emit, keyed):
    import pyarrow as pa

    table = pa.table({k: [r[k] for r in ROWS] for k in ("t", "k", "v")})
    advance = AdvanceTime(every=500, delay=40)

    def query(src):
        if keyed:
            return src.group_apply(lambda r: r["k"], lambda g: g.session_window(
                60, emit=emit).aggregate(Aggregates(n=Count(), total=Sum("v"))))
        return src.session_window(3, emit=emit).aggregate(Max("v"))

    fast = query(Stream.from_arrow(table, start="t", advance=advance))
    assert "column-wise session" in fast.explain() or "keyed session" in fast.explain()
    # the same points as 1-tick intervals, not known to be points: the general path
    general = query(Stream.from_rows([{**r, "e": r["t"] + 1} for r in ROWS], start="t",
                                     end="e", shape="interval", advance=advance))
    assert "session aggregate" not in general.explain()
    out = fast.collect(runtime, columns=False)
    validate(list(expand(out)))
    expected = general.collect(runtime="inline")
    assert_equivalent(list(expand(out)), expected)
    assert len(to_cht(expected)) > 10


# -- NaN keys (issue #41, item 4) ------------------------------------------------------------
#   t     0  1  2  3  4  5  7   30  31          gap 5, Count
#   k    nan 1 nan nan 2  1 nan nan  1
#   nan  [0 ──────────────── 12) 4  [30 ── 35) 1     (one group, as from_rows has it)
#   1.0     [1 ──────── 10) 2            [31 ── 36) 1
#   2.0              [4 ── 9) 1
NAN_TS = [0, 1, 2, 3, 4, 5, 7, 30, 31]
NAN_KS = [math.nan, 1.0, math.nan, math.nan, 2.0, 1.0, math.nan, math.nan, 1.0]


def _reference_per_key(rows, key, gap):
    """The session definition applied to each key's rows, NaN keys told apart from numbers
    by this test alone (not by the engine's ``group_key``)."""
    key = field_getter(key)

    def tag(k):
        if isinstance(k, tuple):
            return tuple(tag(x) for x in k)
        return ("nan",) if k != k else k

    by_key = {}
    for r in rows:
        by_key.setdefault(tag(key(r)), (key(r), []))[1].append((r["t"], r["t"] + 1, r))
    return [(s, e, (k, n)) for k, members in by_key.values()
            for s, e, n in reference_session(members, gap, Count())]


# "k": a float key column (column-wise); tuples holding NaN, first or second
@pytest.mark.parametrize("key", ["k", lambda r: (r["k"], "x"), lambda r: ("x", r["k"])],
                         ids=["float", "tuple", "tuple_first"])
def test_nan_keys_are_one_group_over_from_arrow(runtime, key):
    import pyarrow as pa

    rows = [{"t": t, "k": k, "v": i} for i, (t, k) in enumerate(zip(NAN_TS, NAN_KS))]
    table = pa.table({"t": NAN_TS, "k": NAN_KS, "v": list(range(len(NAN_TS)))})

    def query(src):
        return src.group_apply(key, lambda g: g.session_window(5).aggregate(Count()))

    fast = query(Stream.from_arrow(table, start="t"))
    assert "keyed session" in fast.explain()
    out = list(expand(fast.collect(runtime, columns=False)))
    validate(out)
    expected = _reference_per_key(rows, key, 5)
    assert len(expected) == 5
    assert_equivalent(out, expected)
    assert_equivalent(out, query(Stream.from_rows(rows, start="t")).collect(runtime))


def test_nan_keys_are_one_group_column_wise_one_by_one_and_across_a_checkpoint():
    #   nan ·0 ·2   (snapshot, pickled: other NaN objects)   nan ·3, Cti(20): one session of 3
    def make():
        return KeyedSessionAggregate("k", SessionWindow(5), Count(), name="ks")

    ingress = Ingress(start="t", advance=AdvanceTime(every=1_000))
    cols = ingress.push({"t": np.array([0, 2]), "k": np.array([math.nan, math.nan])})
    for feed in (cols, list(expand(cols))):
        before = make()
        out = before.process(feed)
        after = make()
        after.restore(pickle.loads(pickle.dumps(before.snapshot())))
        out += after.process([Insert("x", 3, 4, {"k": float("nan")}), Cti(20)])
        after._check()
        assert [(s, e, n) for s, e, (_, n) in to_cht(out)] == [(0, 8, 3)], out
