"""``scan`` with a :class:`operators.scan.ColumnScan` (a step given a CTI's final events as
columns at once) against the from-scratch reference (:func:`tests.reference_scan.scan`, per
event) on random valid physical streams whose inserts arrive as single inserts and as column
batches, restored mid-stream; its tie keys ordered column-wise (ints, strings, tuples of them)
and in Python (keys numpy cannot order); Nexmark's Q18 and Q19 scans against their per-event
steps; inline and on Ray."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.nexmark import queries as nq
from operators.cht import to_cht, validate
from operators.columns import Columns, expand, payload_list
from operators.errors import OperatorError
from operators.events import Cti, Insert, Retract
from operators.scan import ColumnScan, Scan, columns_of
from tests import reference_scan as ref
from tests.kit import PROPERTY, assert_equivalent, final_time, physical_streams, run_operator
from topology import Stream

ROWS = st.builds(lambda v, k: {"v": v, "k": k}, st.integers(0, 5), st.sampled_from("abc"))
#: (a short span: many equal starts, where the tie order and repr's differ)
STREAMS = st.one_of(physical_streams(payloads=ROWS),
                    physical_streams(payloads=ROWS, span=2, max_length=3, max_steps=40))


def echo(state: tuple[int, int], p: dict[str, Any]) -> tuple[tuple[int, int], list[Any]]:
    """Order-sensitive, per event: ``p["v"] % 3`` outputs (none, one or two), each naming
    its position in the sequence, the payload and the sum so far."""
    n, total = state
    return (n + 1, total + p["v"]), [(n, p["k"], p["v"], total)] * (p["v"] % 3)


class Echo(ColumnScan):
    """:func:`echo` a batch at a time: its outputs as rows of tuple columns."""

    def __init__(self, tie: Any = None) -> None:
        if tie is not None:
            self.tie = tie  # type: ignore[method-assign]

    def initial(self) -> tuple[int, int]:
        return (0, 0)

    def step_columns(self, state: Any, batch: Columns) -> tuple[Any, np.ndarray, Any]:
        rows, outs = [], []
        for i, p in enumerate(payload_list(batch.payload)):
            state, o = echo(state, p)
            rows += [i] * len(o)
            outs += o
        if not outs:
            return state, np.zeros(0, dtype=np.int64), tuple(np.zeros(0) for _ in range(4))
        return state, np.array(rows), columns_of(outs, "echo")


TIES = {
    "repr": None,
    "int": lambda p: -p["v"],                     # one int column
    "str": lambda p: p["k"],                      # strings, ranked
    "tuple": lambda p: (p["k"], p["v"] % 2),      # equal keys are common: then repr
    "python": lambda p: str(p["v"] % 2),          # not column-wise: ordered in Python
}


def batched(stream: list[Any], rng: random.Random) -> list[Any]:
    """The stream with runs of inserts turned into column batches at random cuts."""
    out: list[Any] = []
    run: list[Insert] = []

    def flush() -> None:
        while run:
            k = rng.randint(1, len(run))
            part, run[:k] = run[:k], []
            if rng.random() < 0.2:
                out.extend(part)
                continue
            ids = np.empty(k, dtype=object)
            ids[:] = [m.id for m in part]
            out.append(Columns(ids, np.array([m.start for m in part]),
                               np.array([m.end for m in part]),
                               columns_of([m.payload for m in part], "test")))

    for m in stream:
        if type(m) is Insert:
            run.append(m)
        else:
            flush()
            out.append(m)
    flush()
    return out


@PROPERTY
@given(stream=STREAMS, seed=st.integers(0, 2**16))
def test_column_scan_matches_the_reference_per_event(stream, seed):
    messages = batched(stream, random.Random(seed))
    cut = seed % (len(messages) + 1)
    for fn in TIES.values():
        expected = ref.scan(to_cht(stream), final_time(stream), echo, (0, 0), fn)
        out = list(expand(run_operator(lambda fn=fn: Scan(Echo(fn)), messages, seed=seed,
                                       restore_at=cut, check_input=False)))
        assert_equivalent(out, expected)
        assert not any(type(m) is Retract for m in out), "scan's output is final"
        op = Scan(Echo(fn))
        whole = list(expand(op.process(messages)))
        validate(whole)
        assert_equivalent(whole, expected)
        assert op.state_size() == (0 if op.state == (0, 0) else 1), "nothing stays pending"


@pytest.mark.parametrize("tie", sorted(TIES))
def test_equal_starts_in_one_batch_follow_the_tie_not_repr(tie):
    # repr orders these rows by v, "str" and "tuple" by k, "int" by -v, "python" by v % 2
    rows = [{"v": v, "k": k} for v, k in ((1, "c"), (2, "a"), (3, "b"), (4, "a"), (0, "b"))]
    stream = [Columns(np.arange(5), np.array([3, 3, 3, 3, 3]), None, columns_of(rows, "t")),
              Cti(5)]
    expected = ref.scan([(3, 4, r) for r in rows], 5, echo, (0, 0), TIES[tie])
    assert_equivalent(list(expand(Scan(Echo(TIES[tie])).process(stream))), expected)


def test_equal_starts_are_stepped_by_tie_then_repr_then_arrival():
    seen: list[Any] = []

    class Record(ColumnScan):
        def initial(self) -> None:
            return None

        def tie(self, p: dict[str, Any]) -> Any:
            return p["k"]

        def step_columns(self, state: Any, batch: Columns) -> tuple[Any, np.ndarray, Any]:
            seen.extend(payload_list(batch.payload))
            return state, np.arange(len(batch)), batch.payload["v"]

    rows = [{"k": "b", "v": 1}, {"k": "a", "v": 9}, {"k": "a", "v": 10}, {"k": "a", "v": 9}]
    batch = Columns(np.array(["w", "x", "y", "z"], dtype=object), np.array([3, 3, 3, 2]),
                    None, columns_of(rows, "test"))
    out = list(expand(Scan(Record()).process([batch, Cti(5)])))
    # start 2 first; at 3 "a" before "b"; the two "a"s by repr ("{'k': 'a', 'v': 10}" < "...9}")
    assert [(p["k"], p["v"]) for p in seen] == [("a", 9), ("a", 10), ("a", 9), ("b", 1)]
    assert sorted(to_cht(out)) == [(2, 3, 9), (3, 4, 1), (3, 4, 9), (3, 4, 10)]


def test_a_deleted_event_is_never_stepped_and_single_inserts_join_the_batches():
    op = Scan(Echo())
    rows = [{"v": 2, "k": "a"}, {"v": 1, "k": "b"}]
    batch = Columns(np.array([1, 2]), np.array([4, 6]), np.array([9, 9]),
                    columns_of(rows, "test"))
    out = list(expand(op.process([batch, Insert(3, 5, 6, {"v": 4, "k": "c"}),
                                  Retract(1, 4, 9, 4, rows[0]), Cti(7)])))
    # the event 1 (start 4) was deleted: 3 (start 5) is first, then 2 (start 6)
    assert to_cht(out) == [(5, 6, (0, "c", 4, 0)), (6, 7, (1, "b", 1, 4))]


def test_a_bad_step_columns_result_is_named():
    class Bad(ColumnScan):
        def initial(self) -> None:
            return None

        def step_columns(self, state: Any, batch: Columns) -> Any:
            return state, np.array([1, 0]), np.array([5, 6])

    batch = Columns(np.array([1, 2]), np.array([1, 2]), None, np.array([7, 8]))
    with pytest.raises(OperatorError, match="non-decreasing batch rows"):
        Scan(Bad()).process([batch, Cti(5)])
    with pytest.raises(OperatorError, match="one payload form"):
        Scan(Echo()).process([Insert(1, 1, 2, {"v": 1, "k": "a"}), Insert(2, 1, 2, 5), Cti(5)])


# -- Nexmark's Q18 and Q19: the column scans against their per-event steps --------------------
BIDS = st.lists(st.tuples(st.integers(0, 6), st.integers(1, 3), st.integers(1, 3),
                          st.integers(1, 4), st.sampled_from(["x", "y"])), max_size=60)


def bid_stream(bids: list[tuple[int, ...]], cuts: list[int]) -> list[Any]:
    """Bids ``(time, auction, bidder, price, channel)`` in time order as column batches,
    a CTI after each cut."""
    bids = sorted(bids, key=lambda b: b[0])
    rows = [{"auction": a, "bidder": b, "price": p, "channel": c, "url": "u",
             "date_time": t, "extra": ""} for t, a, b, p, c in bids]
    out: list[Any] = []
    lo = 0
    for hi in [*sorted({c % (len(rows) + 1) for c in cuts}), len(rows)]:
        if hi > lo:
            out.append(Columns(np.arange(lo, hi), np.array([r["date_time"] for r in rows[lo:hi]]),
                               None, columns_of(rows[lo:hi], "bids")))
            lo = hi
        if lo:
            out.append(Cti(rows[lo - 1]["date_time"]))
    return [*out, Cti(100)]


@PROPERTY
@given(bids=BIDS, cuts=st.lists(st.integers(0, 60), max_size=4))
def test_q18_and_q19_column_scans_match_their_steps_per_bid(bids, cuts):
    stream = bid_stream(bids, cuts)
    for fast, step in ((nq.Q18Versions(), nq.q18_step), (nq.Q19Ranks(), nq.q19_step)):
        got = Scan(fast).process(stream)
        per_bid = Scan(step, {}, tie=nq.bid_order).process(stream)
        assert_equivalent(list(expand(got)), per_bid)
        assert all(type(m) in (Columns, Cti) for m in got), "the outputs stay columns"


def test_q19_changelog_replays_to_the_top_ranks():
    bids = [(t, 1, t % 3 + 1, p, "x") for t, p in enumerate([5, 7, 5, 9, 1, 7, 3] * 3)]
    cht = to_cht(list(expand(Scan(nq.Q19Ranks()).process(bid_stream(bids, [4, 9])))))
    top = sorted((p for *_, p, _ in bids), reverse=True)[:nq.Q19_TOP]
    assert nq.QUERIES["Q19"].cedar_rows(cht, 0) == [(1, i, p) for i, p in enumerate(top, 1)]


# -- on both runtimes ---------------------------------------------------------------------------
def test_column_scan_on_each_runtime(runtime):
    stream = [Insert(f"e{i}", (i * 7) % 50, (i * 7) % 50 + 3, {"v": i % 5, "k": "ab"[i % 2]})
              for i in range(50)]
    stream += [Retract("e3", 21, 24, 21, {"v": 3, "k": "b"}), Cti(25)]
    stream += [Insert(f"f{i}", 25 + i, 27 + i, {"v": i % 4, "k": "c"}) for i in range(30)]
    stream += [Cti(60)]
    expected = ref.scan(to_cht(stream), 60, echo, (0, 0))
    out = Stream.from_events(stream).scan(Echo()).collect(runtime=runtime)
    assert_equivalent(out, expected)
    keyed = (Stream.from_events(stream)
             .group_apply(lambda p: p["v"] % 2, lambda g: g.scan(Echo()), partitions=2)
             .collect(runtime=runtime))
    rows = to_cht(stream)
    assert_equivalent(keyed, [(s, e, (k, o)) for k in (0, 1) for s, e, o in ref.scan(
        [r for r in rows if r[2]["v"] % 2 == k], 60, echo, (0, 0))])


# -- checkpoints --------------------------------------------------------------------------------
class Counted(dict):
    """A state that counts how often it is deep-copied."""

    copies = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> Counted:
        Counted.copies += 1
        return Counted(self)


def tally(state: Counted, p: int) -> tuple[Counted, list[Any]]:
    state[p] = state.get(p, 0) + 1
    return state, [(p, state[p])]


def test_a_snapshot_pickles_the_users_state_instead_of_deep_copying_it():
    # deepcopy of Q19's rankings cost 1.9 s per checkpoint at 1M events (pickle: 0.25 s)
    op = Scan(tally, Counted())
    op.process([Insert(i, i, i + 1, i % 3) for i in range(6)] + [Cti(4)])
    Counted.copies = 0
    snap = op.snapshot()
    assert Counted.copies == 0, "the state was deep-copied"
    op.process([Cti(9)])  # the live state changes; the snapshot does not
    restored = Scan(tally, Counted())
    restored.restore(snap)
    assert restored.state == {0: 2, 1: 1, 2: 1} and type(restored.state) is Counted
    again = Scan(tally, Counted())
    again.restore(snap)
    assert to_cht(again.process([Cti(9)])) == [(4, 5, (1, 2)), (5, 6, (2, 2))]


def test_a_state_that_does_not_pickle_is_still_deep_copied():
    op = Scan(lambda s, p: (s + [lambda: p], [p]), [])
    op.process([Insert(1, 1, 2, 5), Cti(3)])
    snap = op.snapshot()
    op.state.append(None)
    restored = Scan(lambda s, p: (s, []), [])
    restored.restore(snap)
    assert len(restored.state) == 1 and restored.state[0]() == 5
