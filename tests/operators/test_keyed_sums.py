"""Sum and Avg on the keyed window aggregate keep an int column's total as plain ints
(``add_insert_only_ranges``: the operator never removes, so no :class:`ExactSum` scaled by
2**1074 is needed), against the general ``GroupApply`` of a window operator (whose states are
exact sums). Float columns, uint64 values whose sums could leave int64 and states made by a
per-event add ride along: they take the exact path, and an int state meets them."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Aggregates, Avg, Count, ExactSum, Max, Min, Sum
from operators.columns import expand
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.windows import WindowPolicy, hopping_window, make_window
from operators.windows.keyed import KeyedWindowAggregate
from tests.kit import PROPERTY, assert_equivalent
from tests.operators.test_keyed_extremes import sources
from tests.operators.test_keyed_window import run_keyed


def sums() -> Aggregates:
    return Aggregates(total=Sum("v"), mean=Avg("v"), n=Count(), hi=Max("v"))


@PROPERTY
@given(batches=sources(), size=st.integers(1, 12), hop=st.integers(1, 12),
       emit=st.sampled_from(["speculative", "final"]), delay=st.integers(0, 10),
       restore=st.booleans(), per_event_first=st.booleans())
def test_insert_only_sums_equal_the_general_window(batches, size, hop, emit, delay, restore,
                                                    per_event_first):
    """Column batches (one at a time and merged), after a first batch of single inserts or
    not: the same CHT as the general window operator per key."""
    spec = hopping_window(size, hop, 0)
    src = Ingress(start="t", advance=AdvanceTime(every=256, delay=delay))
    pushed = [src.push(b) for b in batches]
    if per_event_first:  # their states are ExactSums, which later column batches meet
        pushed[0] = list(expand(pushed[0]))
    stream = [m for p in pushed for m in p] + src.end()
    events = list(expand(stream))
    expected = GroupApply("k", lambda: make_window(spec, sums())).process(events)

    def fast():
        return KeyedWindowAggregate("k", spec, sums(), WindowPolicy(emit=emit), name="kw")

    for step in (1, 3):
        assert_equivalent(run_keyed(fast, stream, step, restore), expected)


@pytest.mark.parametrize("udm", [Sum("v"), Avg("v")], ids=repr)
def test_an_int_state_is_the_exact_one(udm):
    """An insert-only int state answers as the exact state of the same values, after a
    pickle, a copy and a per-event add (which turns it into an ExactSum), and refuses a
    removal."""
    values = np.array([7, -3, 2**40, 5])
    state = udm.add_insert_only_ranges([None], {"v": values}, 4, [0], [4])[0]
    assert type(state) is tuple
    exact = udm.add(udm.initial_state(), [{"v": v} for v in values.tolist()])
    for twin in (pickle.loads(pickle.dumps(state)), udm.copy_state(state)):
        assert repr(udm.result(twin)) == repr(udm.result(exact))
    grown = udm.add(state, [{"v": 0.5}])
    assert type(grown) is ExactSum
    assert repr(udm.result(grown)) == repr(udm.result(udm.add(exact, [{"v": 0.5}])))
    with pytest.raises(ValueError, match="never removes"):
        udm.remove(state, [{"v": 5}])


@pytest.mark.parametrize("base", [Count, Sum, Avg, Min, Max], ids=lambda c: c.__name__)
def test_window_results_read_in_place_only_what_a_subclass_left_alone(base):
    """Count, Sum, Avg, Min and Max answer ``window_results`` from their states in place,
    unless a subclass overrides ``result`` or ``window_result``: its answer then holds."""
    from operators.udm import Window

    class Doubled(base):
        def result(self, state):
            return 2 * super().result(state)

    class Windowed(base):
        def window_result(self, state, window):
            return (window.end, super().window_result(state, window))

    window = Window(0, 10)
    columns = {"v": np.array([3, 5, 4, 9])}
    for cls in (base, Doubled, Windowed):
        udm = cls() if base is Count else cls("v")
        states = udm.add_insert_only_ranges([None, None], columns, 4, [0, 2], [2, 4])
        states = udm.add_insert_only_ranges(states, columns, 4, [3, 0], [4, 1])
        want = [udm.window_result(s, window) for s in states]
        assert udm.window_results(states, window) == want
        assert Aggregates(a=udm).window_results([[s] for s in states], window) == [
            {"a": w} for w in want]
