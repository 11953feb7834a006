"""The temporal join against the from-scratch reference, and timelines of its retraction and
state-freeing rules.

``CASES`` maps a case name to ``(factory, reference, query)``: the operator, the reference
evaluator over the two input CHTs, and the same query for the fluent builder (``l``, ``r`` are
``topology.Stream`` objects), so the runtime tests can run the same cases on Ray. The property
test over the cases is shared by every binary operator: ``test_binary_operators.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht
from operators.errors import OperatorError
from operators.events import Cti, Insert, Retract
from operators.join import Join
from tests import reference_joins as ref
from tests.kit import HEAVY, INF, assert_equivalent
from tests.reference_joins import final_cti, two_inputs

#: payloads with a small key domain, so that matches happen
KV = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 3)})


def _mod2(p):
    return p["k"] % 2


def _pair_v(a, b):
    return (a["v"], b["v"], a["k"])


CASES = {
    "keyed": (lambda: Join(on=("k", "k")),
              lambda l, r: ref.join(l, r, on=("k", "k")),
              lambda l, r: l.join(r, on=("k", "k"))),
    "keyed_select": (lambda: Join(on=("k", "k"), select=_pair_v),
                     lambda l, r: ref.join(l, r, on=("k", "k"), select=_pair_v),
                     lambda l, r: l.join(r, on=("k", "k"), select=_pair_v)),
    "key_functions": (lambda: Join(on=(_mod2, _mod2)),
                      lambda l, r: ref.join(l, r, on=(_mod2, _mod2)),
                      lambda l, r: l.join(r, on=(_mod2, _mod2))),
    "cross": (lambda: Join(on=None, select=_pair_v),
              lambda l, r: ref.join(l, r, on=None, select=_pair_v),
              lambda l, r: l.join(r, on=None, select=_pair_v)),
}


@HEAVY
@given(inputs=two_inputs(payloads=st.integers(0, 3)))
def test_state_is_empty_once_both_inputs_pass_every_end(inputs):
    # both inputs end with a CTI past every finite end: only open edge events (end ∞) remain
    pairs, left, right = inputs
    horizon = max(final_cti(left), final_cti(right)) + 1
    op = Join(on=(lambda p: p % 2, lambda p: p % 2))
    for port, msg in pairs + [(0, Cti(horizon)), (1, Cti(horizon))]:
        op.process([msg], port)
        op._check()
    open_edges = sum(1 for s, e, _ in to_cht(left) + to_cht(right) if e == INF)
    held = len(op.recs) + (0 if op.columns is None else sum(map(len, op.columns.sides)))
    assert held == open_edges


# -- timelines ----------------------------------------------------------------------------------
def test_retractions_change_shrink_vanish_and_reappear():
    #   left   a: [0 ───────────────── ∞)
    #   right  b:      [4 ─────── 12)
    #   output      (a,b) [4 ── 12)
    #   a closed at 8  → (a,b) [4 ─ 8)
    #   a closed at 3  → (a,b) vanishes
    #   a reopened to 20 → (a,b) reappears [4 ── 12) with a fresh id
    j = Join()
    assert j.process([Insert("a", 0, INF, "A")], 0) == []
    first = j.process([Insert("b", 4, 12, "B")], 1)
    assert first == [Insert(0, 4, 12, ("A", "B"))]
    assert j.process([Retract("a", 0, INF, 8, "A")], 0) == [Retract(0, 4, 12, 8, ("A", "B"))]
    assert j.process([Retract("a", 0, 8, 3, "A")], 0) == [Retract(0, 4, 8, 4, ("A", "B"))]
    again = j.process([Retract("a", 0, 3, 20, "A")], 0)
    assert again == [Insert(1, 4, 12, ("A", "B"))]
    assert j.state_size() == 2 + 1  # two events, one pair


def test_right_full_retraction_deletes_every_pair():
    #   left   a: [0 ─── 5)      c: [3 ──────── 9)
    #   right  b:   [1 ───────────── 7)     (then fully retracted)
    j = Join()
    j.process([Insert("a", 0, 5, "a"), Insert("c", 3, 9, "c")], 0)
    ins = j.process([Insert("b", 1, 7, "b")], 1)
    assert sorted((m.start, m.end) for m in ins) == [(1, 5), (3, 7)]
    out = j.process([Retract("b", 1, 7, 1, "b")], 1)
    assert sorted((m.start, m.end, m.new_end) for m in out) == [(1, 5, 1), (3, 7, 3)]
    assert_equivalent(ins + out, [])
    assert j.state_size() == 2


def test_output_cti_is_the_minimum_of_the_inputs():
    j = Join()
    assert j.process([Cti(10)], 0) == []
    assert j.process([Cti(4)], 1) == [Cti(4)]
    assert j.process([Cti(30)], 1) == [Cti(10)]
    assert j.process([Cti(20)], 0) == [Cti(20)]


def test_an_event_is_freed_exactly_when_no_message_can_touch_it():
    #   left  a: [0 ──── 10)
    #   right CTI 9: a right event [9, …) may still overlap a → a is kept
    j = Join()
    j.process([Insert("a", 0, 10, "a"), Cti(11)], 0)
    j.process([Cti(9)], 1)
    assert j.state_size() == 1
    # ... and indeed one does
    assert j.process([Insert("b", 9, 15, "b")], 1) == [Insert(0, 9, 10, ("a", "b"))]
    #   right CTI 10: no right event can overlap [0, 10) any more and a's end (10 < left
    #   CTI 11) is final → a and its pair go; b stays (its end may still be retracted)
    j.process([Cti(10)], 1)
    assert j.state_size() == 1 and set(j.ids[1]) == {"b"}


def test_an_event_whose_end_may_still_move_is_kept():
    #   left  a: [0 ──── 10)   left CTI 10: a retraction of a to a later end is still valid
    #   right b: [5 ─────────────── 30)  right CTI 20
    j = Join()
    j.process([Insert("a", 0, 10, "a"), Cti(10)], 0)
    j.process([Insert("b", 5, 30, "b"), Cti(20)], 1)
    assert j.state_size() == 3
    assert j.process([Retract("a", 0, 10, 12, "a")], 0) == [Retract(0, 5, 10, 12, ("a", "b"))]
    j.process([Cti(13)], 0)  # now a's end 12 is behind both CTIs
    assert set(j.ids[0]) == set() and j.n_pairs == 0 and set(j.ids[1]) == {"b"}


def test_bad_retractions_are_reported():
    j = Join(name="join#1")
    j.process([Insert("a", 0, 10, 1)], 0)
    with pytest.raises(OperatorError, match=r"join#1.*does not match a live event.*\[0, 10\)"):
        j.process([Retract("a", 0, 9, 5, 1)], 0)
    with pytest.raises(OperatorError, match="does not match a live event"):
        j.process([Retract("a", 0, 10, 5, 1)], 1)  # 'a' is not on the right input
    with pytest.raises(OperatorError, match="duplicate id"):
        j.process([Insert("a", 3, 4, 1)], 0)


def test_on_must_be_a_pair():
    with pytest.raises(ValueError, match=r"on must be a pair"):
        Join(on="k")


def test_a_probe_walks_the_smaller_side_of_the_index():
    # 1,000 right points in the past with no CTI, then a left event far ahead: a probe must
    # not return (or walk) them
    j = Join()
    j.process([Insert(i, i, i + 1, i) for i in range(1000)], 1)
    index = j.index[1]
    assert index.overlapping(None, 5000, 5001, j.recs) == []
    assert index.overlapping(None, 10, 12, j.recs) == [j.ids[1][10], j.ids[1][11]]
