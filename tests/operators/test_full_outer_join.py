"""The full outer join against the from-scratch reference (the join plus each side's
uncovered parts), per event and column-wise, restored mid-stream; a timeline of matched and
unmatched parts trading places on both sides; arguments refused when the query is built.

``CASES`` maps a case name to ``(factory, reference, query)`` as in ``test_join``: the
differential tests (tests/topology/test_differential.py) run them again inline and on Ray.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht, validate
from operators.columns import expand
from operators.events import MAX_TIME, Cti, Insert, Retract
from operators.full_outer_join import FullOuterJoin
from tests import reference_joins as ref
from tests.kit import HEAVY, assert_equivalent
from tests.operators.test_join_columns import batches, streams
from tests.reference_joins import final_cti
from topology import Stream

KV = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 3)})


def _mod2(p):
    return p["k"] % 2


def _vv(a, b):
    return (None if a is None else a["v"], None if b is None else b["v"])


def _traced(a, b):  # traces on the pairs' columns, not on the unmatched ones (a None side)
    return (a["v"], b["v"] * 10)


def _safe_traced(a, b):
    return (-1 if a is None else a["v"], -1 if b is None else b["v"])


CASES = {
    "keyed": (lambda: FullOuterJoin(on=("k", "k")),
              lambda l, r: ref.full_outer_join(l, r, on=("k", "k")),
              lambda l, r: l.full_outer_join(r, on=("k", "k"))),
    "keyed_select": (lambda: FullOuterJoin(on=("k", "k"), select=_vv),
                     lambda l, r: ref.full_outer_join(l, r, on=("k", "k"), select=_vv),
                     lambda l, r: l.full_outer_join(r, on=("k", "k"), select=_vv)),
    "key_functions": (lambda: FullOuterJoin(on=(_mod2, "k"), select=_vv),
                      lambda l, r: ref.full_outer_join(l, r, on=(_mod2, "k"), select=_vv),
                      lambda l, r: l.full_outer_join(r, on=(_mod2, "k"), select=_vv)),
    "cross": (lambda: FullOuterJoin(on=None, select=_vv),
              lambda l, r: ref.full_outer_join(l, r, on=None, select=_vv),
              lambda l, r: l.full_outer_join(r, on=None, select=_vv)),
}


COLUMN_CASES = {
    "keyed": CASES["keyed"][:2],
    "untraced": CASES["key_functions"][:2],
    "traced_pairs": (lambda: FullOuterJoin(on=("k", "k"), select=_safe_traced),
                     lambda l, r: ref.full_outer_join(l, r, on=("k", "k"),
                                                      select=_safe_traced)),
    "cross": CASES["cross"][:2],
}


@pytest.mark.parametrize("case", sorted(COLUMN_CASES))
@pytest.mark.parametrize("retractions", [False, True])
@HEAVY
@given(data=st.data())
def test_column_batches_give_the_reference_cht(case, retractions, data):
    factory, reference = COLUMN_CASES[case]
    pairs, left, right = data.draw(streams(retractions))
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    feed = batches(pairs, rng, data.draw(st.booleans(), label="float_right"))
    restore_at = data.draw(st.integers(0, len(feed)), label="restore_at")
    op, out = factory(), []
    for i, (port, batch) in enumerate(feed):
        if i == restore_at:
            state = op.snapshot()
            op = factory()
            op.restore(state)
        out.extend(op.process(batch, port))
        op._check()
    messages = list(expand(out))
    validate(messages, name="output")
    assert_equivalent(messages, reference(to_cht(left), to_cht(right)))
    assert final_cti(messages) == min(final_cti(left), final_cti(right))
    if not retractions:  # the three parts stayed on their column-wise paths
        assert op.join.columns is not None
        assert op.left_anti.columns is not None and op.right_anti.columns is not None


def test_both_sides_trade_places_with_the_pairs():
    #   left   a: [0 ──────────── 12)
    #   right  b:        [5 ─────────── ∞)
    #   output (a,-): [0 ─ 5)  (a,b): [5 ── 12)  (-,b): [12 ── ∞)
    #   b closed at 9 → (a,-): [0 ─ 5)  (a,b): [5 ─ 9)  (a,-): [9 ─ 12)
    fj = FullOuterJoin()
    out = fj.process([Insert("a", 0, 12, "a"), Cti(0)], 0)
    assert_equivalent(out, [(0, 12, ("a", None))])
    out += fj.process([Insert("b", 5, MAX_TIME, "b"), Cti(3)], 1)
    assert_equivalent(out, [(0, 5, ("a", None)), (5, 12, ("a", "b")),
                            (12, MAX_TIME, (None, "b"))])
    assert out[-1] == Cti(0)
    out += fj.process([Retract("b", 5, MAX_TIME, 9, "b"), Cti(25)], 1)
    assert_equivalent(out, [(0, 5, ("a", None)), (5, 9, ("a", "b")), (9, 12, ("a", None))])
    out += fj.process([Cti(30)], 0)
    assert out[-1] == Cti(25)
    validate(out)
    assert fj.state_size() == 0


def test_a_full_retraction_gives_the_other_side_back_whole():
    fj = FullOuterJoin(on=("k", "k"))
    out = fj.process([Insert("a", 0, 10, {"k": 1})], 0)
    out += fj.process([Insert("b", 2, 4, {"k": 1}), Insert("c", 3, 6, {"k": 2})], 1)
    out += fj.process([Retract("b", 2, 4, 2, {"k": 1})], 1)
    assert_equivalent(out, [(0, 10, ({"k": 1}, None)), (3, 6, (None, {"k": 2}))])


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"on": "k"}, "on="), ({"on": ("k",)}, "on="), ({"select": 3}, "select="),
])
def test_bad_arguments_are_refused_when_the_query_is_built(kwargs, word):
    l, r = Stream.from_events([]), Stream.from_events([])
    with pytest.raises((TypeError, ValueError), match=f"full_outer_join\\({word}"):
        l.full_outer_join(r, **kwargs)
