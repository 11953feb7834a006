"""Unminted window ids (:class:`~operators.columns.FreshIds`): a column batch whose ids are
given as numbers means exactly the batch of the minted ``FreshId`` objects, through the
operators that pass ids on and in a join's column-wise state, which tells them apart by their
numbers (:class:`~operators.two_input_columns.ColumnEvents`) — duplicate live ids included."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.columns import Columns, FreshIds, concat, expand
from operators.events import Cti, FreshId, Insert, Retract
from operators.join import Join
from operators.to_points import ToPoints
from tests.kit import PROPERTY


def _batch(origin: str, ns: list[int], start: int, keys: list[int]) -> Columns:
    m = len(ns)
    return Columns(FreshIds(origin, np.array(ns, dtype=np.int64)),
                   np.full(m, start, dtype=np.int64), np.full(m, start + 5, dtype=np.int64),
                   np.array(keys, dtype=np.int64))


def test_a_batch_of_fresh_ids_is_the_batch_of_their_freshids():
    c = _batch("w", [3, 4, 9], 10, [1, 2, 3])
    assert c.inserts() == [Insert(FreshId("w", 3), 10, 15, 1), Insert(FreshId("w", 4), 10, 15, 2),
                           Insert(FreshId("w", 9), 10, 15, 3)]
    assert c.inserts_at(2) == Insert(FreshId("w", 9), 10, 15, 3)
    assert c.ids.tolist() == [FreshId("w", n) for n in (3, 4, 9)]
    # passed on unminted: a mask, a payload, lifetimes, a concatenation, a pickle
    assert type(c.take(np.array([True, False, True])).id_column) is FreshIds
    assert c.take(np.array([True, False, True])).inserts() == [c.inserts()[0], c.inserts()[2]]
    (points,) = ToPoints().process([c], 0)
    assert type(points.id_column) is FreshIds and points.ids.tolist() == c.ids.tolist()
    both = concat([c, _batch("w", [12], 11, [4])])
    assert type(both.id_column) is FreshIds and both.inserts()[3].id == FreshId("w", 12)
    mixed = concat([c, _batch("v", [12], 11, [4])])
    assert mixed.ids.tolist()[3] == FreshId("v", 12)
    again = pickle.loads(pickle.dumps(c))
    assert type(again.id_column) is FreshIds and again.inserts() == c.inserts()


def _minted(feed: list[tuple[int, list]]) -> list[tuple[int, list]]:
    """The same feed with every id minted."""
    return [(port, [Columns(m.ids, m.starts, m.ends, m.payload) if type(m) is Columns else m
                    for m in batch]) for port, batch in feed]


def _run(feed: list[tuple[int, list]], restore_at: int) -> tuple[list, str | None]:
    op = Join(name="j")  # (a cross join: every left event meets every right one)
    out: list = []
    for n, (port, batch) in enumerate(feed):
        if n == restore_at:
            state = op.snapshot()
            op = Join(name="j")
            op.restore(state)
        try:
            out.extend(expand(op.process(batch, port)))
        except Exception as exc:  # noqa: BLE001 (the same error either way)
            return out, f"{type(exc).__name__}: {exc}"
        op._check()
    return out, None


@st.composite
def feeds(draw):
    """Left batches of fresh ids (two origins, numbers that may repeat or go back, some
    minted), right batches of plain ids, CTIs that free the left events, the retraction of
    a left event."""
    feed: list[tuple[int, list]] = []
    t, right_id, last = 0, 0, None
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["left", "left", "minted", "right", "cti", "retract"]))
        if kind == "retract":  # the last left event, found by its id (the arrays hand over)
            if last is not None:
                feed.append((0, [Retract(last.id, last.start, last.end, last.start,
                                         last.payload)]))
            continue
        if kind == "cti":
            t += draw(st.integers(0, 6))
            feed.append((draw(st.integers(0, 1)), [Cti(t)]))
            continue
        start = t + draw(st.integers(0, 3))
        if kind == "right":
            m = draw(st.integers(1, 3))
            feed.append((1, [Columns(np.arange(right_id, right_id + m), np.full(m, start),
                                     np.full(m, start + 4), np.zeros(m, dtype=np.int64))]))
            right_id += m
            continue
        origin = draw(st.sampled_from(["w", "v"]))
        ns = draw(st.lists(st.integers(0, 12), min_size=1, max_size=4))
        c = _batch(origin, sorted(ns) if draw(st.booleans()) else ns, start, [0] * len(ns))
        last = c.inserts()[-1]
        feed.append((0, [Columns(c.ids, c.starts, c.ends, c.payload) if kind == "minted"
                         else c]))
    return feed


@PROPERTY
@given(feed=feeds(), restore_at=st.integers(0, 8))
def test_a_join_of_fresh_ids_is_the_join_of_their_freshids(feed, restore_at):
    assert _run(feed, restore_at) == _run(_minted(feed), restore_at)


def test_a_duplicate_fresh_id_is_told_as_a_minted_one_is():
    c = _batch("w", [0, 1], 0, [0, 0])
    for batch in (c, Columns(c.ids, c.starts, c.ends, c.payload)):
        op = Join(name="j")
        op.process([c], 0)
        with pytest.raises(Exception, match="duplicate id FreshId\\('w', 1\\)"):
            op.process([_batch("w", [1], 1, [0]) if batch is c else batch.take(slice(1, 2))], 0)
