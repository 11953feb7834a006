"""One property test for every binary temporal operator: each case of the joins' ``CASES``
tables (``join``, ``left_join``, ``anti_join``, ``full_outer_join``) against its from-scratch
reference, on a random two-input physical stream, checkpointed and restored at a random
message. The output's CHT (and every snapshot) equals the reference's, and the output CTI
reaches the smaller of the two inputs' final CTIs (liveliness)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht
from tests.kit import PROPERTY, assert_equivalent, run_operator
from tests.operators import test_anti_join, test_full_outer_join, test_join, test_left_join
from tests.reference_joins import assert_snapshot_equivalent, final_cti, two_inputs

KV = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 3)})

#: "operator:case" -> (factory, reference, query) of every binary operator's tables
CASES = {f"{module.__name__.rsplit('.test_', 1)[1]}:{case}": spec
         for module in (test_join, test_left_join, test_anti_join, test_full_outer_join)
         for case, spec in module.CASES.items()}


@pytest.mark.parametrize("case", sorted(CASES))
@PROPERTY
@given(inputs=two_inputs(payloads=KV), data=st.data())
def test_binary_operator_matches_reference(case, inputs, data):
    factory, reference, _ = CASES[case]
    pairs, left, right = inputs
    cut = data.draw(st.integers(0, len(pairs)), label="restore_at")
    out = run_operator(factory, pairs, seed=cut, restore_at=cut)
    expected = reference(to_cht(left), to_cht(right))
    assert_snapshot_equivalent(out, expected)
    assert_equivalent(out, expected)
    assert final_cti(out) == min(final_cti(left), final_cti(right))


def test_every_binary_operator_has_cases():
    assert {c.split(":")[0] for c in CASES} == {"join", "left_join", "anti_join",
                                                "full_outer_join"}
