"""Sum and Avg add integer columns column-wise (int64 prefix sums), exactly as ``add`` of the
payloads; columns whose sums could leave int64 are declined (the engine then calls ``add``).
Nexmark Q17's prices are ints: its sums and averages took the per-payload path."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Avg, Sum
from tests.kit import PROPERTY


@PROPERTY
@given(values=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=60),
       cuts=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1, max_size=5),
       agg=st.sampled_from([Sum, Avg]), seeded=st.booleans())
def test_int_ranges_sum_as_add_does(values, cuts, agg, seeded):
    n = len(values)
    ranges = [(min(a, b) % n, max(a, b) % n + 1) for a, b in cuts]
    ranges = [(a, b) for a, b in ranges if b > a]
    if not ranges:
        return
    udm = agg("v")
    cols = {"v": np.array(values, dtype=np.int64)}
    assert udm.column_ready(cols, n)
    start = [udm.add(udm.initial_state(), [{"v": 7}]) if seeded else None for _ in ranges]
    got = udm.add_ranges([None if s is None else s.copy() for s in start], cols, n,
                         [a for a, _ in ranges], [b for _, b in ranges])
    for s, (a, b), state in zip(start, ranges, got):
        want = udm.add(udm.initial_state() if s is None else s.copy(),
                       [{"v": v} for v in values[a:b]])
        assert udm.result(state) == udm.result(want)
        assert type(udm.result(state)) is type(udm.result(want))


def test_int_sums_that_could_leave_int64_are_declined():
    cols = {"v": np.array([2**61, 2**61, 1], dtype=np.int64)}
    assert not Sum("v").column_ready(cols, 3)
