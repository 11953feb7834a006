"""The keyed session aggregate (the planner's column-wise path for ``group_apply(key,
session_window → aggregate)`` over points) against the general ``GroupApply`` of a
:class:`SessionWindowOperator`, and through the planner on both runtimes.

Random point sources (disorder, late rows dropped, count-based CTIs) are ingested
column-wise; the fast operator takes the ``Columns`` batches, the same events one Insert at a
time, and several batches at once, across a snapshot/restore, and must give the general
path's CHT with a valid output stream, speculative or final.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.aggregates import Aggregates, Avg, Count, Max, Min, Sum, TimeWeightedAverage
from operators.cht import to_cht, validate
from operators.columns import expand
from operators.errors import OperatorError
from operators.events import Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.windows import SessionWindow, WindowPolicy, make_window
from operators.windows.keyed_session import KeyedSessionAggregate, supports_sessions
from tests.kit import EXAMPLES, assert_equivalent
from tests.operators.test_keyed_window import point_sources, run_keyed
from topology import Stream

UDMS = {"count": Count, "sum": lambda: Sum("v"), "max": lambda: Max("v"),
        "min_int": lambda: Min("k"), "avg": lambda: Avg("v"),
        "several": lambda: Aggregates(n=Count(), total=Sum("v"), top=Max("v"))}
KEYS = {"field": "k", "mod": lambda r: r["k"] % 3, "text": lambda r: f"k{r['k']}",
        "float": lambda r: r["k"] / 2}


@settings(max_examples=EXAMPLES, deadline=None)
@given(batches=point_sources(), gap=st.integers(1, 40), udm=st.sampled_from(sorted(UDMS)),
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
