"""GroupApply against the reference (partition by key, the sub-query's reference per part,
payloads tagged with the key), and timelines of group creation, CTI priming and idle groups.

``CASES`` maps a case name to ``(factory, reference, query)``: the operator, the reference over
the input CHT, and the same query for the fluent builder (``s`` is a ``topology.Stream``).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.alter_lifetime import AlterLifetime
from operators.chain import Chain
from operators.cht import to_cht
from operators.clip_duration import ClipDuration
from operators.errors import OperatorError
from operators.events import Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.select import Select
from operators.shift import Shift
from operators.where import Where
from operators.windows import make_window, tumbling_window
from tests import reference as ref1
from tests import reference_joins as ref
from tests.kit import INF, PROPERTY, assert_equivalent, physical_streams, run_operator
from tests.reference_joins import final_cti


def _key(p):
    return p % 3


def _even(p):
    return p % 2 == 0


def _tag(p):
    return (p, p * 10)


def _shrink(s, e):
    return e - s - 2


def tumbling_count(rows, size):
    """From scratch: for every window [n·size, (n+1)·size) that some row overlaps, the number
    of rows overlapping it (rows must be finite)."""
    counts: dict[int, int] = {}
    for s, e, _ in rows:
        for n in range(s // size, (e - 1) // size + 1):
            counts[n] = counts.get(n, 0) + 1
    return [(n * size, (n + 1) * size, c) for n, c in counts.items()]


CASES = {
    "where": (lambda: GroupApply(_key, lambda: Where(_even)),
              lambda rows: ref.group_apply(rows, _key, lambda r: ref1.where(r, _even)),
              lambda s: s.group_apply(_key, lambda g: g.where(_even))),
    "where_select": (
        lambda: GroupApply(_key, lambda: Chain([Where(_even), Select(_tag)])),
        lambda rows: ref.group_apply(rows, _key,
                                     lambda r: ref1.select(ref1.where(r, _even), _tag)),
        lambda s: s.group_apply(_key, lambda g: g.where(_even).select(_tag))),
    # a sub-query that moves events before the input CTI: new groups must not pass it
    "shift_back": (lambda: GroupApply(_key, lambda: Shift(-4)),
                   lambda rows: ref.group_apply(rows, _key, lambda r: ref1.shift(r, -4)),
                   lambda s: s.group_apply(_key, lambda g: g.shift(-4))),
    # a stateful sub-query that holds its CTI back while events are open
    "alter_lifetime": (
        lambda: GroupApply(_key, lambda: AlterLifetime(duration=_shrink)),
        lambda rows: ref.group_apply(rows, _key,
                                     lambda r: ref1.alter_lifetime(r, duration=_shrink)),
        lambda s: s.group_apply(_key, lambda g: g.alter_lifetime(duration=_shrink))),
}

CASES["tumbling_count"] = (
    lambda: GroupApply(_key, lambda: Chain([ClipDuration(8),
                                            make_window(tumbling_window(5), len)])),
    lambda rows: ref.group_apply(rows, _key,
                                 lambda r: tumbling_count(ref1.clip_duration(r, 8), 5)),
    lambda s: s.group_apply(_key, lambda g: g.clip_duration(8).tumbling_window(5)
                            .aggregate(len)))
# the same sub-queries spread over three partitions (three actors on Ray), against the same
# reference
CASES["where_select_partitioned"] = (
    CASES["where_select"][0], CASES["where_select"][1],
    lambda s: s.group_apply(_key, lambda g: g.where(_even).select(_tag), partitions=3))
CASES["alter_lifetime_partitioned"] = (
    CASES["alter_lifetime"][0], CASES["alter_lifetime"][1],
    lambda s: s.group_apply(_key, lambda g: g.alter_lifetime(duration=_shrink), partitions=3))
CASES["tumbling_count_partitioned"] = (
    CASES["tumbling_count"][0], CASES["tumbling_count"][1],
    lambda s: s.group_apply(_key, lambda g: g.clip_duration(8).tumbling_window(5)
                            .aggregate(len), partitions=3))

#: how the output CTI follows the input CTI once every event is closed (None: not checked)
CTI_MAP = {"where": lambda c: c, "where_select": lambda c: c, "shift_back": lambda c: c - 4}


@pytest.mark.parametrize("case", sorted(CASES))
@PROPERTY
@given(stream=physical_streams(payloads=st.integers(0, 8)), data=st.data())
def test_group_apply_matches_reference(case, stream, data):
    factory, reference, _ = CASES[case]
    # end with a CTI past every (clipped) end, so that windowed sub-queries produce every window
    stream = stream + [Cti(final_cti(stream) + 10)]
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    out = run_operator(factory, stream, seed=cut, restore_at=cut)
    assert_equivalent(out, reference(to_cht(stream)))
    if case in CTI_MAP:
        assert final_cti(out) == CTI_MAP[case](final_cti(stream))


@PROPERTY
@given(stream=physical_streams(payloads=st.integers(0, 8)))
def test_every_closed_group_is_dropped(stream):
    # past a CTI beyond every end, only groups with open (∞) events or sub-query state remain
    op = GroupApply(_key, lambda: AlterLifetime(duration=_shrink))
    horizon = final_cti(stream) + 1
    op.process(stream + [Cti(horizon)])
    open_keys = {_key(p) for s, e, p in to_cht(stream) if e == INF}
    assert set(op.groups) == open_keys


# -- timelines ----------------------------------------------------------------------------------
def test_a_new_group_starts_at_the_current_cti():
    #   input  Cti(10)          a: [10 ── 14) key 1
    #   shift(-4): the output CTI is 6, and a's group (created after the CTI) outputs [6, 10)
    op = GroupApply(_key, lambda: Shift(-4))
    assert op.process([Cti(10)]) == [Cti(6)]
    out = op.process([Insert("a", 10, 14, 1), Cti(12)])
    assert out == [Insert((0, "a"), 6, 10, (1, 1)), Cti(8)]


def test_idle_groups_are_dropped_and_recreated_with_fresh_ids():
    #   a: [0 ── 5) key 0     Cti(6): a is final, Where holds no state → group 0 is dropped
    #   b: [7 ── 9) key 0     a new instance (number 1): ids never collide with the old ones
    op = GroupApply(_key, lambda: Where(_even))
    out = op.process([Insert("a", 0, 5, 0), Cti(6)])
    assert op.groups == {} and op.state_size() == 0
    out += op.process([Insert("a2", 7, 9, 0)])
    assert out[-1].id == (1, "a2")
    assert_equivalent(out, [(0, 5, (0, 0)), (7, 9, (0, 0))])


def test_a_group_is_kept_while_its_events_can_be_retracted():
    #   a: [0 ────── 10) key 0      Cti(6): a's end may still move → its group stays
    op = GroupApply(_key, lambda: Where(_even))
    out = op.process([Insert("a", 0, 10, 0), Cti(6)])
    assert set(op.groups) == {0} and op.state_size() == 1
    out += op.process([Retract("a", 0, 10, 7, 0)])
    assert out[-1] == Retract((0, "a"), 0, 10, 7, (0, 0))
    op.process([Cti(8)])
    assert op.groups == {}


def test_the_output_cti_waits_for_the_slowest_group():
    #   key 1: a: [0 ── ∞) holds AlterLifetime's CTI at 0; key 2 has nothing open
    op = GroupApply(_key, lambda: AlterLifetime(duration=_shrink))
    out = op.process([Insert("a", 0, INF, 1), Insert("b", 1, 3, 2), Cti(5)])
    assert out[-1] == Cti(0)
    assert set(op.groups) == {1}
    assert op.process([Retract("a", 0, INF, 6, 1), Cti(9)])[-1] == Cti(9)


def test_errors_name_the_group():
    op = GroupApply(_key, lambda: Select(lambda p: 1 // (p - 2)), name="per-meter")
    with pytest.raises(OperatorError, match=r"per-meter.*group 2.*ZeroDivisionError"):
        op.process([Insert("a", 0, 3, 2)])
    with pytest.raises(OperatorError, match="unhashable"):
        GroupApply(lambda p: [p], lambda: Where(_even)).process([Insert("a", 0, 3, 2)])
    with pytest.raises(TypeError, match="single-input Processor"):
        GroupApply(_key, lambda: "not a processor")


def test_many_keys_keep_little_state():
    # 10,000 keys, each seen once, with CTIs: closed groups do not pile up
    op = GroupApply(lambda p: p, lambda: Where(_even))
    for t in range(0, 10_000, 100):
        op.process([Insert(i, i, i + 2, i) for i in range(t, t + 100)] + [Cti(t + 100)])
        assert len(op.groups) <= 2 and op.state_size() <= 2


def test_groups_without_state_get_ctis_lazily():
    #   key 0: a: [0 ─────────────── 100)   Where holds no state: the group is not busy
    #   Cti(10), Cti(20), Cti(30) reach the output at once, without visiting the group
    #   b: [35 ─ 40) key 0: the group first catches up with Cti(30), then sees b
    op = GroupApply(_key, lambda: Where(_even))
    out = op.process([Insert("a", 0, 100, 0)])
    assert op.busy == set() and set(op.groups) == {0}
    for t in (10, 20, 30):
        assert op.process([Cti(t)]) == [Cti(t)]
    assert op.groups[0][4] == -(2**63) + 1  # never fed a CTI so far
    out += op.process([Insert("b", 35, 40, 0)])
    assert op.groups[0][4] == 30
    assert out[-1] == Insert((0, "b"), 35, 40, (0, 0))


def test_a_cti_visits_only_busy_groups():
    # 5,000 keys with open edge events under a stateless sub-query: a CTI visits none of them
    calls = []

    class CountingWhere(Where):
        def on_cti(self, time, port):
            calls.append(time)
            return super().on_cti(time, port)

    op = GroupApply(lambda p: p, lambda: CountingWhere(_even))
    op.process([Insert(i, 0, INF, i) for i in range(5_000)])
    assert op.busy == set() and len(op.groups) == 5_000
    assert op.process([Cti(5)]) == [Cti(5)]
    assert calls == [5]  # the template only


def test_a_new_group_sees_the_current_cti_before_its_first_event():
    #   Cti(10) ... a: [12 ─ 15) key 1 → key 1's sub-query sees Cti(10), then a
    seen = []

    class Recording(Where):
        def process(self, batch, port=0):
            batch = list(batch)
            seen.extend(batch)
            return super().process(batch, port)

    op = GroupApply(_key, lambda: Recording(_even))
    op.process([Cti(10)])
    seen.clear()  # the template's CTI
    op.process([Insert("a", 12, 15, 1)])
    assert seen == [Cti(10), Insert("a", 12, 15, 1)]
