"""Union against the reference (concatenation of the input CHTs) on two and three inputs.

``CASES`` maps a case name to ``(factory, reference, query)`` as in ``test_join``; a
reference takes one CHT per input.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht
from operators.events import Cti, Insert, Retract
from operators.union import Union
from tests import reference_joins as ref
from tests.kit import HEAVY, PROPERTY, assert_equivalent, physical_streams, run_operator
from tests.reference_joins import final_cti, two_inputs

CASES = {
    "two": (lambda: Union(2), ref.union, lambda a, b: a.union(b)),
    "three": (lambda: Union(3), ref.union, lambda a, b, c: a.union(b, c)),
}


@PROPERTY
@given(inputs=two_inputs(), data=st.data())
def test_union_of_two_matches_reference(inputs, data):
    factory, reference, _ = CASES["two"]
    pairs, left, right = inputs
    cut = data.draw(st.integers(0, len(pairs)), label="restore_at")
    out = run_operator(factory, pairs, seed=cut, restore_at=cut)
    assert_equivalent(out, reference(to_cht(left), to_cht(right)))
    assert final_cti(out) == min(final_cti(left), final_cti(right))


@HEAVY
@given(streams=st.lists(physical_streams(max_steps=15), min_size=3, max_size=3),
       data=st.data())
def test_union_of_three_matches_reference(streams, data):
    factory, reference, _ = CASES["three"]
    order = data.draw(st.permutations([p for p, s in enumerate(streams) for _ in s]))
    its = [iter(s) for s in streams]
    pairs = [(p, next(its[p])) for p in order]
    out = run_operator(factory, pairs, seed=len(pairs), restore_at=len(pairs) // 2)
    assert_equivalent(out, reference(*(to_cht(s) for s in streams)))
    assert final_cti(out) == min(final_cti(s) for s in streams)


def test_ids_are_tagged_with_their_input():
    #   input 0  a: [0 ── 5)        input 1  a: [0 ── 5)  (the same id on both inputs)
    u = Union(2)
    out = u.process([Insert("a", 0, 5, 1)], 0) + u.process([Insert("a", 0, 5, 1)], 1)
    out += u.process([Retract("a", 0, 5, 2, 1)], 1)
    assert out == [Insert((0, "a"), 0, 5, 1), Insert((1, "a"), 0, 5, 1),
                   Retract((1, "a"), 0, 5, 2, 1)]
    assert_equivalent(out, [(0, 5, 1), (0, 2, 1)])


def test_cti_is_the_minimum_and_never_goes_back():
    u = Union(3)
    assert u.process([Cti(5)], 0) + u.process([Cti(7)], 1) == []
    assert u.process([Cti(6)], 2) == [Cti(5)]
    assert u.process([Cti(9)], 0) == [Cti(6)]
    assert u.process([Cti(9)], 2) == [Cti(7)]


def test_a_port_out_of_range_is_an_error():
    with pytest.raises(ValueError, match=r"inputs 0\.\.1.*Union\(n_inputs=3\)"):
        Union(2).process([Cti(1)], 2)
    with pytest.raises(ValueError, match="positive int"):
        Union(0)


def test_an_input_that_ends_early_does_not_hold_the_final_cti_back(runtime):
    """At the end of every input the union's CTI is the furthest input's: windows past the
    shorter input's last CTI become final too, as with that input alone."""
    from operators.aggregates import Count
    from topology import Stream

    long = [Insert("a1", 1, 2, 1), Insert("a2", 25, 26, 1), Cti(26)]
    short = Stream.from_events([Insert("b1", 2, 3, 1), Cti(3)])
    out = (Stream.from_events(long).union(short).tumbling_window(10).aggregate(Count())
           .collect(runtime=runtime))
    assert [m for m in out if isinstance(m, Cti)][-1] == Cti(20)
