"""Snapshot windows keep incremental UDM state across splits and merges.

A new endpoint splits a snapshot window in two halves that start from the old window's state
(shared until one of them changes, then copied with ``copy_state``); an event joining or
leaving a window is one ``add``/``remove``. These tests drive that machinery hard — many
overlapping events, endpoints arriving out of order, lifetimes shortened and lengthened —
with UDAs whose state is changed in place (so a state shared by mistake shows in the results),
against the from-scratch reference, and check that the number of values added grows with
the input, not with the windows' sizes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given

from operators.aggregates import Aggregates, Avg, Count, Max, TopK
from operators.events import Insert
from operators.udm import IncrementalAggregate
from operators.windows import SnapshotWindow, SnapshotWindowOperator, WindowPolicy
from tests import reference_windows as ref
from tests.kit import HEAVY, assert_equivalent, physical_streams, run_operator


class Bag(IncrementalAggregate):
    """The multiset of payloads, changed in place; ``copy_state`` is the default deep copy."""

    def __init__(self) -> None:
        self.added = 0

    def initial_state(self) -> Counter:
        return Counter()

    def add(self, state: Counter, values: list[Any]) -> Counter:
        self.added += len(values)
        state.update(values)
        return state

    def remove(self, state: Counter, values: list[Any]) -> Counter:
        state.subtract(values)
        assert all(n >= 0 for n in state.values()), "removed a value that was not added"
        for v in [v for v, n in state.items() if n == 0]:
            del state[v]
        return state

    def result(self, state: Counter) -> tuple[Any, ...]:
        return tuple(sorted(state.elements()))


class UncopyableBag(Bag):
    """A state the UDM cannot copy: the engine must rebuild it from the members instead."""

    def copy_state(self, state: Counter) -> Counter:
        raise TypeError("no copies")


class TimeBag(Bag):
    """The multiset of the clipped events a time-sensitive UDM sees, changed in place."""

    time_sensitive = True

    def window_result(self, state: Counter, window: Any) -> tuple[Any, ...]:
        return (tuple(window), tuple(sorted(state.elements())))


def _all_parts() -> Aggregates:
    return Aggregates(n=Count(), top=Max(), two=TopK(2), avg=Avg())


UDAS = {
    "bag": (Bag, ("full",)),
    "uncopyable": (UncopyableBag, ("full",)),
    "timebag": (TimeBag, ("none", "left", "right", "full")),
    "builtins": (_all_parts, ("full",)),
}
CASES = [(name, clip) for name, (_, clips) in UDAS.items() for clip in clips]


# many events overlapping on a short span, endpoints out of order, lifetimes corrected
@pytest.mark.parametrize(("udm_name", "clip"), CASES)
@HEAVY
@given(stream=physical_streams(max_steps=80, span=8, max_length=40))
def test_shared_state_matches_reference(udm_name, clip, stream):
    udm = UDAS[udm_name][0]
    out = run_operator(lambda: SnapshotWindowOperator(SnapshotWindow(), udm(),
                                                              policy=WindowPolicy(clip=clip)),
                       stream, seed=len(stream), restore_at=len(stream) // 2)
    assert_equivalent(out, ref.window(stream, SnapshotWindow(), udm(), "aggregate", clip))


@pytest.mark.parametrize("batch", [1, 400])
@pytest.mark.parametrize("shape", ["shared end", "nested"])
def test_values_added_grow_with_the_input_not_the_window(shape, batch):
    # each event only splits the window it starts in (and, nested, the one it ends in) and
    # joins one window: from-scratch halves would add ~n²/2 values (also when the windows
    # are new in the batch that splits them)
    n = 400
    bag = Bag()
    op = SnapshotWindowOperator(SnapshotWindow(), bag)
    events = [Insert(i, i, 2 * n if shape == "shared end" else 2 * n - i, i % 7)
              for i in range(n)]
    for i in range(0, n, batch):
        op.process(events[i:i + batch])
    op._check()
    assert bag.added <= 3 * n, bag.added
