"""The column-wise paths of ``anti_join`` and ``left_join`` give the reference's CHT (exactly:
the same maximal fragments as the per-event path): random two-input streams whose inserts
arrive as ``Columns`` batches (split at random), with and without retractions (the first one
hands the arrays over to the per-event state mid-stream), edge events, CTIs, a checkpoint and
restore midway, traced and untraced ``select``, keys by name, by function and none (cross);
and the same end to end from ``Stream.from_arrow``, inline and on Ray."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.anti_join import AntiJoin
from operators.cht import to_cht, validate
from operators.columns import Columns, expand
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract
from operators.ingress import AdvanceTime, Ingress
from operators.left_join import LeftJoin
from operators.two_input_columns import ColumnEvents, overlapping_pairs, uncovered
from tests import reference_joins as ref
from tests.kit import HEAVY, ON_RAY, PROPERTY, assert_equivalent
from tests.operators.test_join_columns import batches, streams
from tests.reference_joins import final_cti
from topology import Stream


def _mod2(p):
    return p["k"] % 2


def _traced(a, b):
    return (a["v"], b["v"] * 10, a["k"])


def _untraced(a, b):
    return (a["v"], None if b is None else b["v"])


#: name -> (factory, reference on CHTs)
CASES = {
    "anti_keyed": (lambda: AntiJoin(on=("k", "k")),
                   lambda l, r: ref.anti_join(l, r, on=("k", "k"))),
    "anti_key_functions": (lambda: AntiJoin(on=(_mod2, "k")),
                           lambda l, r: ref.anti_join(l, r, on=(_mod2, "k"))),
    "anti_cross": (lambda: AntiJoin(on=None), lambda l, r: ref.anti_join(l, r, on=None)),
    "left_keyed": (lambda: LeftJoin(on=("k", "k")),
                   lambda l, r: ref.left_join(l, r, on=("k", "k"))),
    "left_traced_select": (  # the unmatched payloads fail to trace: b is the default, None
        lambda: LeftJoin(on=("k", "k"), select=_traced, default={"v": -1, "k": 0}),
        lambda l, r: ref.left_join(l, r, on=("k", "k"), select=_traced,
                                   default={"v": -1, "k": 0})),
    "left_untraced_select": (
        lambda: LeftJoin(on=(_mod2, _mod2), select=_untraced),
        lambda l, r: ref.left_join(l, r, on=(_mod2, _mod2), select=_untraced)),
    "left_cross": (lambda: LeftJoin(on=None, select=_untraced),
                   lambda l, r: ref.left_join(l, r, on=None, select=_untraced)),
}


def _on_columns(op) -> bool:
    anti = op.anti if isinstance(op, LeftJoin) else op
    return anti.columns is not None


def run(factory, feed, restore_at):
    op = factory()
    out = []
    for n, (port, batch) in enumerate(feed):
        if n == restore_at:
            state = op.snapshot()
            op = factory()
            op.restore(state)
        out.extend(op.process(batch, port))
        op._check()
    return out, op


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("retractions", [False, True])
@HEAVY
@given(data=st.data())
def test_column_batches_give_the_reference_cht(case, retractions, data):
    factory, reference = CASES[case]
    pairs, left, right = data.draw(streams(retractions))
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    float_right = data.draw(st.booleans(), label="float_right")  # 1 and 1.0: one key
    feed = batches(pairs, rng, float_right)
    restore_at = data.draw(st.integers(0, len(feed)), label="restore_at")
    out, op = run(factory, feed, restore_at)
    messages = list(expand(out))
    validate(messages, name="output")  # ids unique, retractions name their inserts
    assert_equivalent(messages, reference(to_cht(left), to_cht(right)))
    assert final_cti(messages) == min(final_cti(left), final_cti(right))
    if not retractions:  # nothing made it leave the arrays
        assert _on_columns(op)


@PROPERTY
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 30)), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 5), st.integers(-5, 45), st.integers(1, 30)),
                max_size=20))
def test_uncovered_is_each_span_minus_its_holes(spans, holes):
    start = np.array([s for s, _ in spans])
    end = start + np.array([d for _, d in spans])
    owner, hs, he = [], [], []
    for g, s, d in holes:  # keep the holes that overlap their span
        if g < len(spans) and s < end[g] and s + d > start[g]:
            owner.append(g)
            hs.append(s)
            he.append(s + d)
    g, s, e = uncovered(start, end, np.array(owner, dtype=np.int64),
                        np.array(hs, dtype=np.int64), np.array(he, dtype=np.int64))
    expected = [(i, a, b) for i in range(len(spans))
                for a, b in ref.subtract(int(start[i]), int(end[i]),
                                         [(x, y) for o, x, y in zip(owner, hs, he) if o == i])]
    assert list(zip(g.tolist(), s.tolist(), e.tolist())) == expected


_TIMES = st.one_of(st.integers(-20, 60), st.sampled_from([MIN_TIME, -(2**62), 2**62, MAX_TIME - 2]))


@st.composite
def _spans(draw, max_size):
    out = []
    for _ in range(draw(st.integers(0, max_size))):
        start = draw(_TIMES)
        end = draw(st.one_of(st.integers(start + 1, start + 40), st.just(MAX_TIME)))
        out.append((draw(st.integers(0, 2)), start, min(end, MAX_TIME)))
    return out


@PROPERTY
@given(_spans(12), _spans(6))
def test_overlapping_pairs_finds_every_overlap(held, new):
    # the vectorised search (shared with the join) against all pairs, times near both ends
    side = ColumnEvents()
    side.append(np.arange(len(held)), *(np.array([h[x] for h in held], dtype=np.int64)
                                        for x in range(3)),
                np.arange(len(held)).astype(object), None)
    code, start, end = (np.array([e[x] for e in new], dtype=np.int64) for x in range(3))
    found = overlapping_pairs(side, code, start, end)
    if found is None:  # declined: the combined sort key would not fit in int64
        return
    expected = sorted((i, j) for i, (c, s, e) in enumerate(new)
                      for j, (hc, hs, he) in enumerate(held) if c == hc and s < he and hs < e)
    assert sorted(zip(found[0].tolist(), found[1].tolist())) == expected


def _cols(ids, starts, ends, k, v):
    return Columns(np.array(ids, dtype=object), np.array(starts), np.array(ends),
                   {"k": np.array(k), "v": np.array(v)})


def test_a_right_batch_cuts_fragments_and_a_retraction_hands_over():
    #   left   a: [0 ──────────────────── 20) k=1     b: [5 ────── ∞) k=2
    #   right  x:      [4 ─ 7)  y: [10 ── 14)  k=1    z: [30 ─ 40) k=2
    #   output a: [0 ─ 4)  [7 ─ 10)  [14 ── 20)       b: [5 ─ 30) [40 ─── ∞)
    op = AntiJoin(on=("k", "k"))
    (first,) = op.process([_cols(["a", "b"], [0, 5], [20, MAX_TIME], [1, 2], [0, 0])], 0)
    assert type(first) is Columns and len(first) == 2
    out = op.process([_cols(["x", "y", "z"], [4, 10, 30], [7, 14, 40], [1, 1, 2], [0] * 3)], 1)
    *cut, pieces = out
    assert cut == [Retract(0, 0, 20, 4, {"k": 1, "v": 0}),
                   Retract(1, 5, MAX_TIME, 30, {"k": 2, "v": 0})]
    assert pieces.inserts() == [Insert(2, 7, 10, {"k": 1, "v": 0}),
                                Insert(3, 14, 20, {"k": 1, "v": 0}),
                                Insert(4, 40, MAX_TIME, {"k": 2, "v": 0})]
    assert op.columns is not None and op.state_size() == 5 + 5  # events, fragments
    op._check()
    #   y is deleted: a's pieces [7, 10) and [14, 20) join again into [7, 20)
    out = op.process([Retract("y", 10, 14, 10, {"k": 1, "v": 0})], 1)
    assert op.columns is None
    op._check()
    assert sorted(to_cht(list(expand([first, *cut, pieces])) + out)) == [
        (0, 4, {"k": 1, "v": 0}), (5, 30, {"k": 2, "v": 0}), (7, 20, {"k": 1, "v": 0}),
        (40, MAX_TIME, {"k": 2, "v": 0})]


def test_a_fragment_ending_at_the_cti_can_still_grow():
    #   left   a: [0 ─────────────── 20)        right  x:       [10 ── 15)
    #   output a: [0 ──── 10)   [15 ─ 20)       CTIs at 10 on both inputs
    #   x deleted (at 10, not behind the CTIs): a's fragment [0, 10) grows back to [0, 20)
    op = AntiJoin(on=("k", "k"))
    out = op.process([_cols(["a"], [0], [20], [1], [0]), Cti(10)], 0)
    out += op.process([_cols(["x"], [10], [15], [1], [0]), Cti(10)], 1)
    assert op.columns is not None and op.state_size() == 2 + 2
    op._check()
    out += op.process([Retract("x", 10, 15, 10, {"k": 1, "v": 0})], 1)
    op._check()
    assert to_cht(list(expand(out))) == [(0, 20, {"k": 1, "v": 0})]


def test_ctis_free_the_arrays():
    op = LeftJoin(on=("k", "k"))
    op.process([_cols(["a"], [0], [10], [1], [0]), Cti(12)], 0)
    op.process([_cols(["x"], [2], [5], [1], [0])], 1)
    assert op.state_size() == 3 + 4  # the join's events and pair, the anti-join's events and
    # fragments ([0, 2) and [5, 10))
    out = op.process([Cti(11)], 1)
    assert out == [Cti(11)] and op.state_size() == 0
    op._check()


def _point_tables():
    return st.builds(_table, st.integers(0, 1_500), st.integers(0, 2**16))


def _table(n, seed):
    rng = np.random.default_rng(seed)
    return {"t": np.sort(rng.integers(0, 4 * n + 1, n)), "k": rng.integers(0, 5, n),
            "v": rng.integers(0, 100, n)}


def _ingested(cols, advance):
    src = Ingress(start="t", advance=advance)
    return list(expand(src.push(cols) + src.end()))


def _vk(a, b):
    return (a["k"], a["v"], None if b is None else b["v"])


@settings(ON_RAY, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(left=_point_tables(), right=_point_tables(), life=st.tuples(st.integers(1, 40),
                                                                   st.integers(1, 80)),
       delay=st.integers(0, 40), kind=st.sampled_from(["anti_join", "left_join"]))
def test_from_arrow_matches_the_reference(runtime, left, right, life, delay, kind):
    # from_arrow on both sides → alter_lifetime (column-wise) → the column path, on Ray too
    advance = AdvanceTime(every=256, delay=delay)  # (>= 256: column batches)

    def side(cols, name, duration):
        return (Stream.from_arrow(cols, start="t", advance=advance, batch_rows=300, name=name)
                .alter_lifetime(duration=duration))

    lq, rq = side(left, "left", life[0]), side(right, "right", life[1])

    def rows(cols, duration):
        return [(s, s + duration, p) for s, _, p in to_cht(_ingested(cols, advance))]

    lr, rr = rows(left, life[0]), rows(right, life[1])
    if kind == "anti_join":
        q = lq.anti_join(rq, on=("k", "k"))
        expected = ref.anti_join(lr, rr, on=("k", "k"))
    else:
        q = lq.left_join(rq, on=("k", "k"), select=_vk)
        expected = ref.left_join(lr, rr, on=("k", "k"), select=_vk)
    assert_equivalent(q.collect(runtime=runtime), expected)
