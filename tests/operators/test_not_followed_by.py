"""Absence (``not_followed_by``) against its definition (:func:`tests.reference_patterns.
not_followed_by`) on random two-input physical streams (disorder, lifetime corrections,
deletions, CTIs), checkpointed and restored at a random message; and timelines of what the
CTI decides: an idle key's answer, a deleted follower, a shortened one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.cht import to_cht
from operators.events import Cti, Insert, Retract
from operators.not_followed_by import NotFollowedBy
from tests import reference_patterns as ref
from tests.kit import ON_RAY, PROPERTY, assert_equivalent, run_operator
from tests.reference_joins import final_cti, two_inputs
from topology import Stream

KV = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 3)})


def _k(p):
    return p["k"]


@PROPERTY
@given(inputs=two_inputs(payloads=KV), within=st.integers(1, 8), keyed=st.booleans(),
       data=st.data())
def test_what_the_ctis_decide_is_the_definition(inputs, within, keyed, data):
    pairs, a, b = inputs
    on = ("k", "k") if keyed else None
    cut = data.draw(st.integers(0, len(pairs)), label="restore_at")
    out = run_operator(lambda: NotFollowedBy(within, on=on), pairs, seed=cut, restore_at=cut)
    ctis = [c for c in (final_cti(a), final_cti(b)) if c is not None]
    until = min(ctis) if len(ctis) == 2 else None
    key = _k if keyed else None
    want = ref.not_followed_by(to_cht(a), to_cht(b), within, key, key,
                               until=until if until is not None else -(2**62))
    assert_equivalent(out, want)
    assert not any(type(m) is Retract for m in out), "absence is output final"


@PROPERTY
@given(inputs=two_inputs(payloads=KV, edges=False), within=st.integers(1, 8))
def test_at_the_end_of_input_every_event_is_decided(inputs, within):
    _, a, b = inputs
    q = Stream.from_events(a).not_followed_by(Stream.from_events(b), within=within,
                                              on=("k", "k"))
    assert_equivalent(q.collect(runtime="inline"),
                      ref.not_followed_by(to_cht(a), to_cht(b), within, _k, _k))


def test_an_idle_key_gets_its_answer_when_time_passes():
    #   payments  m1 p@0                      (m1 never sends again)
    #   confirms                 m2 c@3 ...   CTIs move with the other meters' events
    #   d = 5: at Cti(5) of both inputs m1's payment is decided: not confirmed, at 5
    op = NotFollowedBy(5, on=("k", "k"))
    assert op.process([Insert("p", 0, 1, {"k": "m1"})], 0) == []
    assert op.process([Insert("c", 3, 4, {"k": "m2"}), Cti(5)], 1) == []  # a's CTI: not yet
    out = op.process([Cti(5)], 0)
    assert [(m.start, m.end, m.payload) for m in out if type(m) is Insert] == [
        (5, 6, {"k": "m1"})]


def test_a_deleted_follower_follows_nothing_and_a_shortened_one_still_does():
    #   a x@0 y@10          b f@2 (deleted)   g@12 [12, 20) shortened to [12, 13)
    op = NotFollowedBy(5)
    op.process([Insert("x", 0, 1, "x"), Insert("y", 10, 11, "y")], 0)
    op.process([Insert("f", 2, 3, "f"), Retract("f", 2, 3, 2, "f"),
                Insert("g", 12, 20, "g"), Retract("g", 12, 20, 13, "g")], 1)
    out = op.process([Cti(30)], 0) + op.process([Cti(30)], 1)
    assert [(m.start, m.payload) for m in out if type(m) is Insert] == [(5, "x")]
    assert op.state_size() == 0


def test_a_follower_at_the_same_start_or_at_the_limit_does_not_count():
    #   (start, start + d) is open at both ends: b@0 and b@5 do not follow a@0 with d = 5
    op = NotFollowedBy(5)
    op.process([Insert("a", 0, 1, "a")], 0)
    op.process([Insert("b0", 0, 1, "b"), Insert("b5", 5, 6, "b"), Cti(9)], 1)
    assert [m.start for m in op.process([Cti(9)], 0) if type(m) is Insert] == [5]


@pytest.mark.parametrize("within, message", [(0, "within"), (None, "within"),
                                             ("soon", "within")])
def test_a_bad_within_is_refused_naming_it(within, message):
    with pytest.raises((TypeError, ValueError), match=message):
        NotFollowedBy(within)


@settings(ON_RAY, derandomize=True, database=None)
@given(inputs=two_inputs(payloads=KV, edges=False), within=st.integers(1, 8))
def test_on_ray_it_is_the_definition(ray_session, inputs, within):
    _, a, b = inputs
    q = Stream.from_events(a).not_followed_by(Stream.from_events(b), within=within,
                                              on=("k", "k"))
    assert_equivalent(q.collect(), ref.not_followed_by(to_cht(a), to_cht(b), within, _k, _k))


def test_a_events_with_one_start_and_ids_that_do_not_compare():
    #   two a events at 0 with ids of two types (an operator's FreshId beside a str): both kept
    from operators.events import FreshId

    op = NotFollowedBy(5)
    op.process([Insert(FreshId(0, 0), 0, 1, "x"), Insert("y", 0, 1, "y"), Cti(9)], 0)
    out = op.process([Cti(9)], 1)
    assert sorted(m.payload for m in out if type(m) is Insert) == ["x", "y"]
