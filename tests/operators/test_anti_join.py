"""The anti-join against the from-scratch reference (snapshot equivalence), and timelines of
how later right events split, shorten and remove earlier output.

``CASES`` maps a case name to ``(factory, reference, query)`` as in ``test_join``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.anti_join import AntiJoin
from operators.cht import to_cht
from operators.events import Cti, Insert, Retract
from tests import reference_joins as ref
from tests.kit import HEAVY, INF, assert_equivalent
from tests.reference_joins import assert_snapshot_equivalent, final_cti, two_inputs

KV = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 3)})


def _mod2(p):
    return p["k"] % 2


CASES = {
    "keyed": (lambda: AntiJoin(on=("k", "k")),
              lambda l, r: ref.anti_join(l, r, on=("k", "k")),
              lambda l, r: l.anti_join(r, on=("k", "k"))),
    "key_functions": (lambda: AntiJoin(on=(_mod2, "k")),
                      lambda l, r: ref.anti_join(l, r, on=(_mod2, "k")),
                      lambda l, r: l.anti_join(r, on=(_mod2, "k"))),
    "unkeyed": (lambda: AntiJoin(on=None),
                lambda l, r: ref.anti_join(l, r, on=None),
                lambda l, r: l.anti_join(r, on=None)),
}


@HEAVY
@given(inputs=two_inputs(payloads=st.integers(0, 3)))
def test_state_is_empty_once_both_inputs_pass_every_end(inputs):
    pairs, left, right = inputs
    horizon = max(final_cti(left), final_cti(right)) + 1
    op = AntiJoin(on=(lambda p: p % 2, lambda p: p % 2))
    for port, msg in pairs + [(0, Cti(horizon)), (1, Cti(horizon))]:
        op.process([msg], port)
        op._check()
    open_left = [r for r in to_cht(left) if r[1] == INF]
    open_right = [r for r in to_cht(right) if r[1] == INF]
    assert len(op.recs) == len(open_left) + len(open_right)


def test_snapshot_equivalence_ignores_how_events_are_cut():
    #   [0 ──── 4)[4 ──── 8)   is the same timeline as   [0 ──────── 8)
    assert_snapshot_equivalent([(0, 4, "x"), (4, 8, "x")], [(0, 8, "x")])
    with pytest.raises(AssertionError, match="at time 4"):
        assert_snapshot_equivalent([(0, 4, "x"), (5, 8, "x")], [(0, 8, "x")])
    with pytest.raises(AssertionError, match="at time 0"):
        assert_snapshot_equivalent([(0, 8, "x"), (0, 8, "x")], [(0, 8, "x")])


# -- timelines ----------------------------------------------------------------------------------
def test_a_later_right_event_splits_then_removes_output():
    #   left   a: [0 ─────────────────── 20)
    #   right  b:        [5 ── 9)                 → a: [0 ─ 5)   [9 ──── 20)
    #   right  c:              [8 ──────────── 25) → a: [0 ─ 5)
    #   right  d: [0 ───── 6)                      → nothing left
    op = AntiJoin()
    out = op.process([Insert("a", 0, 20, "a")], 0)
    out += op.process([Insert("b", 5, 9, "b")], 1)
    assert_equivalent(out, [(0, 5, "a"), (9, 20, "a")])
    step = op.process([Insert("c", 8, 25, "c")], 1)
    assert [type(m).__name__ for m in step] == ["Retract"]  # [9, 20) deleted
    out += step
    assert_equivalent(out, [(0, 5, "a")])
    out += op.process([Insert("d", 0, 6, "d")], 1)
    assert_equivalent(out, [])
    assert op.n_frags == 0


def test_right_retractions_give_time_back():
    #   left   a: [0 ─────────────── 20)     right b: [4 ───────── ∞)
    #   output a: [0 ─ 4)
    #   b closed at 10  → a: [0 ─ 4) [10 ─ 20)
    #   b deleted       → a: [0 ─────────────── 20), one fragment again
    op = AntiJoin()
    out = op.process([Insert("a", 0, 20, "a")], 0)
    out += op.process([Insert("b", 4, INF, "b")], 1)
    assert_equivalent(out, [(0, 4, "a")])
    out += op.process([Retract("b", 4, INF, 10, "b")], 1)
    assert_equivalent(out, [(0, 4, "a"), (10, 20, "a")])
    step = op.process([Retract("b", 4, 10, 4, "b")], 1)
    # the fragment [0, 4) is lengthened (no change before 4); [10, 20) is deleted
    assert Retract(0, 0, 4, 20, "a") in step
    out += step
    assert_equivalent(out, [(0, 20, "a")])


def test_left_retractions_move_the_last_fragment():
    #   left a: [0 ──────── 10)   right b: [3 ─ 5)   → a: [0 ─ 3) [5 ── 10)
    #   a closed at 4 → a: [0 ─ 3)      a reopened to 12 → a: [0 ─ 3) [5 ─── 12)
    op = AntiJoin()
    out = op.process([Insert("b", 3, 5, "b")], 1)
    out += op.process([Insert("a", 0, 10, "a")], 0)
    out += op.process([Retract("a", 0, 10, 4, "a")], 0)
    assert_equivalent(out, [(0, 3, "a")])
    out += op.process([Retract("a", 0, 4, 12, "a")], 0)
    assert_equivalent(out, [(0, 3, "a"), (5, 12, "a")])
    out += op.process([Retract("a", 0, 12, 0, "a")], 0)
    assert_equivalent(out, [])
    assert op.state_size() == 1  # only b


def test_output_cti_never_passes_a_fragment_that_can_still_change():
    #   left CTI 10, right CTI 6: a: [0 ──── 20) is output whole; a right event may still
    #   start at 6 and cut it there, so the output CTI is 6
    op = AntiJoin()
    out = op.process([Insert("a", 0, 20, "a"), Cti(10)], 0)
    out += op.process([Cti(6)], 1)
    assert out[-1] == Cti(6)
    step = op.process([Insert("b", 6, 8, "b")], 1)
    assert step[0] == Retract(0, 0, 20, 6, "a")  # sync time 6: not behind the output CTI
    assert_equivalent(out + step, [(0, 6, "a"), (8, 20, "a")])


def test_a_freed_right_event_is_not_needed_to_keep_earlier_fragments():
    #   left  a: [0 ─────────────── ∞)    right b: [2 ─ 4)
    #   CTIs reach 10 on both inputs: b is freed, a (open) is kept with [0, 2) [4, ∞)
    #   closing a at 30 must keep the hole [2, 4) although b is gone
    op = AntiJoin()
    out = op.process([Insert("a", 0, INF, "a"), Cti(10)], 0)
    out += op.process([Insert("b", 2, 4, "b"), Cti(10)], 1)
    assert set(op.ids[1]) == set() and set(op.ids[0]) == {"a"}
    out += op.process([Retract("a", 0, INF, 30, "a")], 0)
    assert_equivalent(out, [(0, 2, "a"), (4, 30, "a")])
