"""The column-wise join's probe of one side's live events (:func:`overlapping_pairs`) and its
freeing of pairs (:meth:`ColumnState.free`) against brute force, on sides large enough that a
small batch probes only its candidates (:meth:`ColumnEvents.with_codes`) instead of sorting
every live event again: a join whose one side only grows (Nexmark Q4/Q6/Q9's bids stretched
to 100 years) sorted all of it after every batch, quadratic in the run's length."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.join import ColumnState
from operators.two_input_columns import ColumnEvents, overlapping_pairs
from tests.kit import EXAMPLES


def _side(rng: np.random.Generator, n: int, codes: int, first_seq: int = 0) -> ColumnEvents:
    side = ColumnEvents()
    start = rng.integers(0, 50, n)
    side.append(np.arange(first_seq, first_seq + n), rng.integers(0, codes, n), start,
                start + rng.integers(1, 20, n), np.arange(first_seq, first_seq + n),
                np.arange(n) * 3)
    return side


def _brute(side: ColumnEvents, code, start, end) -> set[tuple[int, int]]:
    return {(i, j) for i in range(len(code)) for j in range(len(side))
            if side.code[j] == code[i] and side.start[j] < end[i] and side.end[j] > start[i]}


@settings(max_examples=EXAMPLES, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), m=st.integers(1, 40),
       codes=st.integers(1, 60), sorted_first=st.booleans())
def test_the_probe_finds_every_overlapping_pair_of_the_same_key(seed, n, m, codes,
                                                                  sorted_first):
    rng = np.random.default_rng(seed)
    side = _side(rng, n, codes)
    if sorted_first:
        side.by_key_and_start()  # a cached order is used as it is
    start = rng.integers(0, 60, m)
    code, end = rng.integers(0, codes + 3, m), start + rng.integers(1, 20, m)
    found = overlapping_pairs(side, code, start, end)
    assert found is not None
    i, j = found
    assert len(set(zip(i.tolist(), j.tolist()))) == len(i)
    assert set(zip(i.tolist(), j.tolist())) == _brute(side, code, start, end)


def test_a_small_batch_does_not_sort_a_large_side():
    rng = np.random.default_rng(1)
    side = _side(rng, 10_000, 1_000)
    code = np.array([3, 7])
    start, end = np.array([0, 10]), np.array([60, 30])
    i, j = overlapping_pairs(side, code, start, end)
    assert set(zip(i.tolist(), j.tolist())) == _brute(side, code, start, end)
    assert side._order is None  # only the candidates were sorted, not the 10,000 events


@settings(max_examples=EXAMPLES, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), limit_left=st.integers(0, 70),
       limit_right=st.integers(0, 70), now=st.booleans())
def test_free_drops_exactly_the_pairs_of_freed_events(seed, limit_left, limit_right, now):
    """``free(now=True)`` frees every event ending before its limit; ``free()`` the same
    on a side where they are an eighth of it or more, none where fewer (and keeps their
    pairs)."""
    rng = np.random.default_rng(seed)
    state = ColumnState()
    left, right = _side(rng, 40, 5), _side(rng, 30, 5, first_seq=100)
    state.sides = (left, right)
    i, j = overlapping_pairs(right, left.code, left.start, left.end)  # (i: left, j: right)
    start = np.maximum(left.start[i], right.start[j])
    end = np.minimum(left.end[i], right.end[j])
    state.add_pairs(np.arange(len(i)), left.seq[i], right.seq[j], start, end,
                    np.arange(len(i)) * 10)
    before = list(zip(state.pid.tolist(), left.seq[i].tolist(), right.seq[j].tolist()))
    dead = [int((side.end < limit).sum()) for side, limit in ((left, limit_left),
                                                              (right, limit_right))]
    sizes = [len(left), len(right)]
    state.free((limit_left, limit_right), now=now)
    left, right = state.sides
    for side, limit, d, n in zip((left, right), (limit_left, limit_right), dead, sizes):
        freed = now or d >= n / 8
        assert len(side) == (n - d if freed else n)
        assert (side.end >= limit).all() if freed else int((side.end < limit).sum()) == d
    live_l, live_r = set(left.seq.tolist()), set(right.seq.tolist())
    expected = [(p, ls, rs) for p, ls, rs in before if ls in live_l and rs in live_r]
    assert list(zip(state.pid.tolist(), state.lseq.tolist(), state.rseq.tolist())) == expected
    assert state.payload is None if not expected else \
        state.payload.tolist() == [p * 10 for p, _, _ in expected]

