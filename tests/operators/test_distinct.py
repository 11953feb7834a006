"""``distinct``: the maximal intervals of each distinct payload against the from-scratch
reference (:func:`tests.reference_scan.distinct`) on random valid physical streams, restored
mid-stream, in one batch and in random batches, through the builder inline and on Ray;
scenarios that read like timelines; state freed behind CTIs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht, validate
from operators.distinct import Distinct
from operators.events import MAX_TIME, Cti, Insert, Retract
from tests import reference_scan as ref
from tests.kit import (
    ON_RAY,
    PROPERTY,
    assert_equivalent,
    final_time,
    physical_streams,
    run_operator,
)
from topology import Stream

#: few payloads, so that equal ones overlap and touch often; narrow streams for ties
STREAMS = st.one_of(physical_streams(payloads=st.integers(0, 2)),
                    physical_streams(payloads=st.integers(0, 3), span=6, max_length=6),
                    physical_streams(payloads=st.sampled_from([{"k": 1}, {"k": 2}, (1, "a")]),
                                     span=10, max_length=8))


def parity(p):
    return p % 2 if isinstance(p, int) else repr(p)


#: ``(factory, reference, query)`` for tests/topology/test_differential.py
CASES = {
    "payload": (Distinct, ref.distinct, lambda s: s.distinct()),
    "key": (lambda: Distinct(parity), lambda rows: ref.distinct(rows, parity),
            lambda s: s.distinct(key=parity)),
}


def _check(stream, cut, key):
    expected = ref.distinct(to_cht(stream), key)
    out = run_operator(lambda: Distinct(key), stream, seed=cut, restore_at=cut)
    assert_equivalent(out, expected)
    assert final_time(out) == final_time(stream)
    op = Distinct(key)
    whole = op.process(stream)
    validate(whole)
    assert_equivalent(whole, expected)
    op._check()
    c = final_time(stream)
    held = [o for ks in op.keys.values() for o in ks[2]]
    assert all(o[1] >= c for o in held), "an interval ending before the CTI is still held"


@PROPERTY
@given(stream=STREAMS, data=st.data())
def test_distinct_matches_reference(stream, data):
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    _check(stream, cut, None)
    _check(stream, cut, parity)


@ON_RAY
@given(stream=STREAMS)
def test_distinct_through_the_builder(stream):
    out = Stream.from_events(stream).distinct().collect(runtime="inline")
    assert_equivalent(out, ref.distinct(to_cht(stream)))


# -- scenarios ------------------------------------------------------------------------------------
def test_touching_and_overlapping_lifetimes_become_one_event():
    #   x [0 ──── 4)                    x [0 ──────────── 9)
    #        x [3 ──── 7)         →
    #                 x [7 ─ 9)         (touching at 7 counts)
    #   y [1 ─── 5)                     y [1 ─── 5)
    out = Distinct().process([Insert("a", 0, 4, "x"), Insert("b", 3, 7, "x"),
                              Insert("c", 7, 9, "x"), Insert("d", 1, 5, "y"), Cti(10)])
    validate(out)
    assert to_cht(out) == [(0, 9, "x"), (1, 5, "y")]


def test_a_late_event_bridges_two_intervals_and_a_retraction_splits_them_again():
    #   x [0 ─ 3)      x [6 ─ 9)        two intervals
    #        x [3 ── 6)                 bridges them: [0, 9) (one retraction moves the end,
    #                                   one deletes the second interval)
    #   Retract [3, 6) → [3, 4)        splits: [0, 4) and [6, 9) again
    op = Distinct()
    out = op.process([Insert("a", 0, 3, "x"), Insert("c", 6, 9, "x")])
    bridge = op.process([Insert("b", 3, 6, "x")])
    assert to_cht(out + bridge) == [(0, 9, "x")]
    assert [type(m).__name__ for m in bridge] == ["Retract", "Retract"]
    split = op.process([Retract("b", 3, 6, 4, "x"), Cti(10)])
    op._check()
    validate(out + bridge + split)
    assert to_cht(out + bridge + split) == [(0, 4, "x"), (6, 9, "x")]


def test_behind_a_cti_intervals_are_final_and_freed():
    #   x [0 ─ 2)  x [1 ─ 3)   y [2 ─ ∞)    Cti(5): x's interval [0, 3) is final, freed;
    #   y's edge stays (it could still be closed)
    op = Distinct()
    op.process([Insert("a", 0, 2, "x"), Insert("b", 1, 3, "x"),
                Insert("e", 2, MAX_TIME, "y"), Cti(5)])
    assert op.state_size() == 2  # the edge and its interval
    out = op.process([Retract("e", 2, MAX_TIME, 7, "y"), Cti(8)])
    assert op.state_size() == 0
    assert out == [Retract(out[0].id, 2, MAX_TIME, 7, "y"), Cti(8)]


def test_an_interval_ending_at_the_cti_can_still_grow():
    #   x [0 ──── 5)   Cti(5)   x [5 ── 8)     the new event starts at the CTI and touches
    #   the interval: one event [0, 8), not [0, 5) and [5, 8)
    op = Distinct()
    out = op.process([Insert("a", 0, 5, "x"), Cti(5), Insert("b", 5, 8, "x"), Cti(9)])
    validate(out)
    assert to_cht(out) == [(0, 8, "x")]


def test_a_representative_deleted_at_the_same_start_is_replaced():
    #   {"user": 1, "page": "a"} [2 ── 6)     same start, least repr ("a") represents
    #   {"user": 1, "page": "b"} [2 ───── 8)  [2, 8); delete "a" and "b" represents it
    a, b = {"user": 1, "page": "a"}, {"user": 1, "page": "b"}
    op = Distinct(key="user")
    out = op.process([Insert("b", 2, 8, b), Insert("a", 2, 6, a)])
    assert to_cht(out) == [(2, 8, a)]
    out += op.process([Retract("a", 2, 6, 2, a), Cti(9)])
    validate(out)
    assert to_cht(out) == [(2, 8, b)]


def test_with_a_key_the_earliest_event_represents_the_interval():
    #   {"user": 1, "page": "b"} [2 ──── 6)
    #   {"user": 1, "page": "a"}    [3 ──── 8)      key user: one interval [2, 8),
    #   represented by the payload that starts it (page "b"); delete it and [3, 8) is
    #   represented by page "a"
    op = Distinct(key="user")
    out = op.process([Insert("b", 2, 6, {"user": 1, "page": "b"}),
                      Insert("a", 3, 8, {"user": 1, "page": "a"})])
    assert to_cht(out) == [(2, 8, {"user": 1, "page": "b"})]
    out += op.process([Retract("b", 2, 6, 2, {"user": 1, "page": "b"}), Cti(9)])
    validate(out)
    assert to_cht(out) == [(3, 8, {"user": 1, "page": "a"})]


def test_state_stays_bounded_on_a_long_point_stream():
    #   a point per tick, 5 payloads, a CTI every 10 ticks: state holds about one period
    op = Distinct()
    out: list = []
    peak = 0
    stream = []
    for t in range(2000):
        stream.append(Insert(t, t, t + 1, t % 5 if t % 50 else 0))
        if t % 10 == 9:
            stream.append(Cti(t - 2))
    for i in range(0, len(stream), 16):
        out.extend(op.process(stream[i:i + 16]))
        peak = max(peak, op.state_size())
    op._check()
    assert peak < 60, f"state grew to {peak}"
    assert_equivalent(out, ref.distinct(to_cht(stream)))


# -- on both runtimes ---------------------------------------------------------------------------
def test_distinct_on_each_runtime(runtime):
    stream = [Insert(f"e{i}", (i * 7) % 60, (i * 7) % 60 + 1 + i % 5, i % 4) for i in range(60)]
    stream += [Retract("e3", 21, 25, 22, 3), Retract("e10", 10, 11, 10, 2), Cti(30)]
    stream += [Insert(f"f{i}", 30 + i, 31 + 2 * i, i % 3) for i in range(20)] + [Cti(80)]
    out = Stream.from_events(stream).distinct().collect(runtime=runtime)
    assert_equivalent(out, ref.distinct(to_cht(stream)))
    keyed = (Stream.from_events(stream)
             .group_apply(lambda p: p % 2, lambda g: g.distinct(), partitions=2)
             .collect(runtime=runtime))
    assert_equivalent(keyed, [(s, e, (p % 2, p)) for s, e, p in ref.distinct(to_cht(stream))])


def test_a_bad_key_is_refused_when_the_query_is_built():
    with pytest.raises(TypeError, match=r"distinct: key=2\.5"):
        Stream.from_events([]).distinct(key=2.5)
