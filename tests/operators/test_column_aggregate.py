"""``ColumnAggregate`` (operators/udm.py): the column-wise aggregate protocol is declared, and
the keyed window aggregate and ``Aggregates`` take the column-wise path exactly for the UDMs
that implement it (a user's aggregate too), the per-payload ``add`` for the others."""

from __future__ import annotations

import numpy as np
import pytest

from operators.aggregates import (
    Aggregates,
    Avg,
    Count,
    Max,
    Min,
    Sum,
    TimeWeightedAverage,
    TopK,
)
from operators.cht import to_cht
from operators.columns import Columns
from operators.udm import ColumnAggregate, IncrementalAggregate
from operators.windows import tumbling_window
from operators.windows.keyed import KeyedWindowAggregate


class Tally(IncrementalAggregate):
    """A user's count, added per payload only."""

    def initial_state(self):
        return 0

    def add(self, state, values):
        return state + len(values)

    def remove(self, state, values):
        return state - len(values)

    def result(self, state):
        return state


class ColumnTally(Tally):
    """The same count with the column-wise protocol; it records its calls."""

    def __init__(self):
        self.calls = []

    def column_ready(self, columns, n):
        return True

    def add_groups(self, states, columns, bounds):
        self.calls.append("add_groups")
        return [(s or 0) + b - a for s, a, b in zip(states, bounds, bounds[1:])]

    def add_ranges(self, states, columns, n, lo, hi):
        self.calls.append("add_ranges")
        return [(s or 0) + b - a for s, a, b in zip(states, lo, hi)]


class OnlyRanges(Tally):
    def add_ranges(self, states, columns, n, lo, hi):
        raise AssertionError("not the whole protocol: never called")


@pytest.mark.parametrize("udm", [Count(), Sum("v"), Avg("v"), Min("v"), Max("v"), TopK(2, "v"),
                                 TimeWeightedAverage("v"), Aggregates(n=Count(), s=Sum("v")),
                                 ColumnTally()], ids=repr)
def test_the_builtins_declare_the_protocol(udm):
    assert isinstance(udm, ColumnAggregate)


@pytest.mark.parametrize("udm", [Tally(), OnlyRanges()], ids=lambda u: type(u).__name__)
def test_a_partial_or_missing_protocol_is_not_one(udm):
    assert not isinstance(udm, ColumnAggregate)


def _batch():
    return Columns(np.array([0, 1, 2, 6]), np.array([1, 2, 3, 7]), None,
                   {"k": np.array(["a", "a", "b", "a"], dtype=object),
                    "v": np.array([1.0, 2.0, 3.0, 4.0])})


def _run(udm):
    op = KeyedWindowAggregate("k", tumbling_window(5), udm, name="kw")
    return to_cht(op.process([_batch()]) + op.finish())


EXPECTED = [(0, 5, ("a", 2)), (0, 5, ("b", 1)), (5, 10, ("a", 1))]


def test_the_keyed_window_adds_a_users_column_aggregate_column_wise():
    udm = ColumnTally()
    assert _run(udm) == EXPECTED
    assert udm.calls == ["add_ranges"]


@pytest.mark.parametrize("udm", [Tally(), OnlyRanges()], ids=lambda u: type(u).__name__)
def test_the_keyed_window_adds_the_others_per_payload(udm):
    assert _run(udm) == EXPECTED


def test_aggregates_is_column_wise_only_when_every_part_is():
    cols, n = {"v": np.array([1.0, 2.0, 3.0])}, 3
    both = Aggregates(n=Count(), t=ColumnTally())
    assert both.column_ready(cols, n)
    assert both.add_groups([None], cols, [0, 3]) == [[3, 3]]
    assert both.add_ranges([None, [1, 1]], cols, n, [0, 1], [2, 3]) == [[2, 2], [3, 3]]
    for part in (Tally(), OnlyRanges()):
        mixed = Aggregates(n=Count(), t=part)
        assert not mixed.column_ready(cols, n)
        assert mixed.add_groups([None], cols, [0, 3]) is None
        assert mixed.add_ranges([None], cols, n, [0], [3]) is None
