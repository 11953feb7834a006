"""``Stream.detect`` end to end: the output CHT is the matches over the input's CHT (the
reference matcher of :mod:`tests.reference_patterns`) inline and on Ray, any batching, alone
and under ``group_apply``; and the plan says what it knows of it (a final detect is
insert-only, so a keyed window after it runs column-wise)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.aggregates import Count
from operators.cht import to_cht
from operators.events import Cti, Insert
from tests import reference_patterns as ref
from tests.kit import ON_RAY, PROPERTY, assert_equivalent
from tests.operators.test_detect import STREAMS, detect_cases
from topology import Stream


def _query(stream, case, emit="speculative"):
    pattern, define, within, key, tie = case
    return Stream.from_events(stream).detect(pattern, define, within=within, key=key, tie=tie,
                                             emit=emit)


def _expected(stream, case):
    pattern, define, within, key, tie = case
    return ref.detect(to_cht(stream), pattern, define, within, None, key, tie)


@PROPERTY
@given(stream=STREAMS, case=detect_cases(), batch=st.integers(1, 7),
       emit=st.sampled_from(["speculative", "final"]))
def test_inline_any_batching_is_the_reference(stream, case, batch, emit):
    got = _query(stream, case, emit).collect(runtime="inline", batch_size=batch)
    assert_equivalent(got, _expected(stream, case))


@settings(ON_RAY, derandomize=True, database=None)
@given(stream=STREAMS, case=detect_cases(), emit=st.sampled_from(["speculative", "final"]))
def test_on_ray_is_the_reference(ray_session, stream, case, emit):
    assert_equivalent(_query(stream, case, emit).collect(), _expected(stream, case))


def test_under_group_apply_each_key_matches_its_own_rows():
    #   key 0: a@0 b@1 -> a match [0, 2)      key 1: a@2 x@3 b@4 -> none (x breaks it)
    rows = [(0, 0, "a"), (1, 0, "b"), (2, 1, "a"), (3, 1, "x"), (4, 1, "b")]
    s = Stream.from_events([Insert(t, t, t + 1, {"k": k, "v": v}) for t, k, v in rows]
                           + [Cti(10)])
    define = {"A": lambda p, m: p["v"] == "a", "B": lambda p, m: p["v"] == "b"}
    q = s.group_apply("k", lambda g: g.detect("A B", define, within=5,
                                               measures=lambda m: len(m["B"])))
    assert to_cht(q.collect(runtime="inline")) == [(0, 2, (0, 1))]
    assert to_cht(s.detect("A B", define, within=5, key="k",
                           measures=lambda m: len(m["B"])).collect(runtime="inline")) == [
        (0, 2, 1)]


def test_a_final_detect_is_insert_only_and_a_window_after_it_runs_column_wise():
    s = Stream.from_rows([], start="t").detect("A B+", within="10 s", emit="final")
    assert s._node.lengths() == 10_000_000
    q = s.tumbling_window("1 min").aggregate(Count())
    assert "as a column-wise window aggregate (interval input)" in q.explain()
    assert "detect('A B+', within=10000000" in s.explain()
