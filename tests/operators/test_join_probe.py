"""The column-wise join's probe of one side's live events (:func:`overlapping_pairs`) and its
freeing of pairs (:meth:`ColumnState.free`) against brute force, on sides large enough that a
small batch probes only its candidates (:meth:`ColumnEvents.with_codes`) instead of sorting
every live event again: a join whose one side only grows (Nexmark Q4/Q6/Q9's bids stretched
to 100 years) sorted all of it after every batch, quadratic in the run's length."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from operators.events import MAX_TIME
from operators.join import ColumnState
from operators.two_input_columns import ColumnEvents, by_key_and_start, overlapping_pairs
from tests.kit import PROPERTY


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


@PROPERTY
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


@PROPERTY
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



def test_pairs_are_written_after_the_ones_held_not_copied_with_them():
    """Pairs that stay (a reference table that sends no CTI yet keeps every pair) are not
    copied at each batch: the new ones go after them in buffers with room to spare, and a
    snapshot holds the pairs, not the spare room; after a free, pairs go after the kept ones."""
    import copy

    state = ColumnState()
    state.add_pairs(np.arange(3), np.arange(3), np.arange(3) + 10, np.zeros(3, np.int64),
                    np.ones(3, np.int64), {"v": np.arange(3) * 1.5})
    first = state.pid
    state.add_pairs(np.arange(3, 5), np.arange(3, 5), np.arange(3, 5) + 10,
                    np.zeros(2, np.int64), np.ones(2, np.int64), {"v": np.arange(3, 5) * 1.5})
    assert np.shares_memory(first, state.pid) and np.shares_memory(
        state.payload["v"], state.payload["v"][:3])
    assert first.tolist() == [0, 1, 2] and state.pid.tolist() == [0, 1, 2, 3, 4]
    assert state.payload["v"].tolist() == [0.0, 1.5, 3.0, 4.5, 6.0]
    saved = copy.deepcopy(state)
    assert saved._bufs is None and saved.pid.tolist() == [0, 1, 2, 3, 4]
    for st_ in (state, saved):
        st_.add_pairs(np.array([5]), np.array([5]), np.array([15]), np.zeros(1, np.int64),
                      np.ones(1, np.int64), {"v": np.array([7.5])})
        assert st_.pid.tolist() == [0, 1, 2, 3, 4, 5]
        assert st_.rseq.tolist() == [10, 11, 12, 13, 14, 15]
        assert st_.payload["v"].tolist() == [0.0, 1.5, 3.0, 4.5, 6.0, 7.5]
    state.sides[0].append(np.arange(6), np.zeros(6, np.int64), np.zeros(6, np.int64),
                          np.array([1, 9, 1, 9, 9, 9]), np.arange(6).astype(object),
                          {"x": np.arange(6)})
    state.free((5, 0), now=True)  # left events 0 and 2 end before 5: their pairs go
    assert state.pid.tolist() == [1, 3, 4, 5]
    state.add_pairs(np.array([6]), np.array([1]), np.array([16]), np.zeros(1, np.int64),
                    np.ones(1, np.int64), {"v": np.array([9.0])})
    assert state.pid.tolist() == [1, 3, 4, 5, 6] and state.lseq.tolist() == [1, 3, 4, 5, 1]
    assert state.payload["v"].tolist() == [1.5, 4.5, 6.0, 7.5, 9.0]


@PROPERTY
@given(seed=st.integers(0, 2**32 - 1), steps=st.lists(st.sampled_from(
    ["append", "keep", "index"]), min_size=1, max_size=12), codes=st.integers(1, 40))
def test_an_index_kept_through_appends_and_frees_is_the_index_sorted_again(seed, steps, codes):
    """Once a side is indexed by (key, start), new events are merged into the index and freed
    ones taken out of it: at every step it is what sorting every live event again gives. Its
    smallest end, kept through the same steps, is the smallest end held."""
    rng = np.random.default_rng(seed)
    side = _side(rng, int(rng.integers(0, 50)), codes)
    side.by_key_and_start()
    seq = len(side)
    for step in steps:
        if step == "append":
            m = int(rng.integers(1, 30))
            start = rng.integers(-20, 80, m)  # ties and starts before the held ones
            assert side.append(np.arange(seq, seq + m), rng.integers(0, codes, m), start,
                               start + rng.integers(1, 20, m), np.arange(seq, seq + m),
                               np.arange(m) * 3)
            seq += m
        elif step == "keep" and len(side):
            side.keep(rng.random(len(side)) < 0.7)
        else:
            side.by_key_and_start()
        side.check()
        assert side.least_end() == (int(side.end.min()) if len(side) else MAX_TIME)
        if side._order is not None:
            want = by_key_and_start(side.code, side.start, side.end)
            for got, expected in zip(side._order, want):
                assert got.tolist() == expected.tolist()
