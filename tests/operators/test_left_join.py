"""The left outer join against the reference (join plus the unmatched parts of the left
events), and a timeline of matched and unmatched parts trading places.

``CASES`` maps a case name to ``(factory, reference, query)`` as in ``test_join``.
"""

from __future__ import annotations

from hypothesis import strategies as st

from operators.events import Cti, Insert, Retract
from operators.left_join import LeftJoin
from tests import reference_joins as ref
from tests.kit import assert_equivalent

KV = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 3)})


def _vv(a, b):
    return (a["v"], None if b is None else b["v"])


CASES = {
    "keyed": (lambda: LeftJoin(on=("k", "k")),
              lambda l, r: ref.left_join(l, r, on=("k", "k")),
              lambda l, r: l.left_join(r, on=("k", "k"))),
    "keyed_select_default": (
        lambda: LeftJoin(on=("k", "k"), select=_vv, default={"v": -1}),
        lambda l, r: ref.left_join(l, r, on=("k", "k"), select=_vv, default={"v": -1}),
        lambda l, r: l.left_join(r, on=("k", "k"), select=_vv, default={"v": -1})),
    "cross": (lambda: LeftJoin(on=None, select=_vv),
              lambda l, r: ref.left_join(l, r, on=None, select=_vv),
              lambda l, r: l.left_join(r, on=None, select=_vv)),
}


def test_matched_and_unmatched_parts_trade_places():
    #   left   a: [0 ─────────────────── 20)
    #   right  b:        [5 ──── ∞)
    #   output (a,-): [0 ─ 5)  (a,b): [5 ──────── 20)
    #   b closed at 9 → (a,-): [0 ─ 5)  (a,b): [5 ─ 9)  (a,-): [9 ─── 20)
    lj = LeftJoin(select=lambda l, r: (l, r or "-"))
    out = lj.process([Insert("a", 0, 20, "a"), Cti(0)], 0)
    out += lj.process([Insert("b", 5, 2**63 - 1, "b"), Cti(3)], 1)
    assert_equivalent(out, [(0, 5, ("a", "-")), (5, 20, ("a", "b"))])
    assert out[-1] == Cti(0)
    out += lj.process([Retract("b", 5, 2**63 - 1, 9, "b"), Cti(25)], 1)
    assert_equivalent(out, [(0, 5, ("a", "-")), (5, 9, ("a", "b")), (9, 20, ("a", "-"))])
    out += lj.process([Cti(30)], 0)
    assert out[-1] == Cti(25)
    assert lj.state_size() == 0
