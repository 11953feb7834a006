"""An input that has ended no longer holds back a multi-input operator's CTI
(:meth:`~operators.processor.Processor.end_input`, docs/ctis.md): a timeline per operator,
property tests that the CHT does not depend on where the ends of input arrive (against the
from-scratch references of :mod:`tests.reference_joins`, on random physical streams with
retractions, disorder and CTIs, per message and in column batches), and snapshot/restore
after one input ended."""

from __future__ import annotations

import pickle
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.anti_join import AntiJoin
from operators.cht import to_cht, validate
from operators.columns import expand
from operators.errors import OperatorError
from operators.events import MAX_TIME, Cti, Insert, Message, Retract
from operators.full_outer_join import FullOuterJoin
from operators.ingress import ImportCti
from operators.join import Join
from operators.left_join import LeftJoin
from operators.processor import Processor
from operators.union import Union
from tests import reference_joins as ref
from tests.kit import HEAVY, assert_equivalent, physical_streams
from tests.operators.test_join_columns import batches
from tests.reference_joins import final_cti, two_inputs

KV = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 3)})
ON = ("k", "k")


def _pair_v(left: Any, right: Any) -> tuple[Any, Any]:
    return (left["v"], right["v"])


#: every two-input operator whose output CTI is the minimum of its inputs': (factory,
#: reference over the two input CHTs)
OPERATORS: dict[str, tuple[Callable[[], Processor], Callable[..., Any]]] = {
    "union": (lambda: Union(2), ref.union),
    "join": (lambda: Join(on=ON), lambda l, r: ref.join(l, r, on=ON)),
    "cross_join": (lambda: Join(select=_pair_v), lambda l, r: ref.join(l, r, select=_pair_v)),
    "anti_join": (lambda: AntiJoin(on=ON), lambda l, r: ref.anti_join(l, r, on=ON)),
    "left_join": (lambda: LeftJoin(on=ON), lambda l, r: ref.left_join(l, r, on=ON)),
    "full_outer_join": (lambda: FullOuterJoin(on=ON),
                        lambda l, r: ref.full_outer_join(l, r, on=ON)),
}


def ctis(out: list[Message]) -> list[int]:
    return [m.time for m in out if type(m) is Cti]


# -- timelines ----------------------------------------------------------------------------------
def test_a_union_follows_the_open_inputs_once_one_ended():
    #   input 0   a: [1 ── 4)  Cti(2)  end
    #   input 1   b: [2 ── 6)  Cti(5)        Cti(7) Cti(12)                    end
    #   input 2                Cti(4)                         Cti(9)  end
    #   output                 Cti(2)  Cti(4)                 Cti(9)  Cti(12)   (finish: -)
    u = Union(3)
    out = u.process([Insert("a", 1, 4, "x"), Cti(2)], 0)
    out += u.process([Insert("b", 2, 6, "y"), Cti(5)], 1) + u.process([Cti(4)], 2)
    assert ctis(out) == [2]
    assert u.end_input(0) == [Cti(4)]  # input 2 holds it now, no longer input 0's Cti(2)
    assert u.process([Cti(7), Cti(12)], 1) == []
    assert u.process([Cti(9)], 2) == [Cti(9)]
    assert u.end_input(0) == []  # a second end of the same input: nothing
    assert u.end_input(2) == [Cti(12)]  # only input 1 is open
    assert u.finish() == []
    u._check()


def test_a_batch_on_an_input_that_ended_is_an_error():
    u = Union(2, name="union#2")
    u.end_input(1)
    with pytest.raises(OperatorError, match=r"'union#2'.*input 1 after that input ended"):
        u.process([Cti(5)], 1)


def _reference_and_live(op: Processor, ref_port: int) -> tuple[list[Message], int]:
    """A reference table on ``ref_port`` (one edge event from 0, its final CTI 1, then its
    end) joined with a live stream on the other port: 100 point events of key 0 and a CTI
    after each. Returns the output and the largest state size seen after the end."""
    live = 1 - ref_port
    out = op.process([Insert("r", 0, MAX_TIME, {"k": 0, "v": 9}), Cti(1)], ref_port)
    out += op.end_input(ref_port)
    biggest = 0
    for t in range(100):
        out += op.process([Insert(f"e{t}", t + 1, t + 2, {"k": 0, "v": t % 4}), Cti(t + 2)],
                          live)
        op._check()
        biggest = max(biggest, op.state_size())
    out += op.finish()
    validate(expand(out))
    return list(expand(out)), biggest


@pytest.mark.parametrize("kind", ["join", "left_join", "full_outer_join"])
@pytest.mark.parametrize("ref_port", [0, 1])
def test_a_join_with_a_reference_table_that_ended_follows_the_live_stream(kind, ref_port):
    #   reference   r: [0 ─────────────────────────── ∞)  Cti(1)  end
    #   live             e0 Cti(2)  e1 Cti(3)  ...  e99 Cti(101)
    #   output           (r,e0) Cti(2)  (r,e1) Cti(3) ...        (was: Cti(1) for good)
    # and the live events whose pairs are final are freed as the live CTI passes them
    # (the reference, ended, sends nothing they could meet any more)
    factory, _ = OPERATORS[kind]
    op = factory()
    out, biggest = _reference_and_live(op, ref_port)
    assert ctis(out) == list(range(2, 102))
    matched = [m for m in out if type(m) is Insert and None not in m.payload]
    assert len(matched) == 100
    assert biggest <= 10, f"{kind}: the live events are not freed (state {biggest})"


@pytest.mark.parametrize("ref_port", [0, 1])
def test_an_anti_join_with_an_input_that_ended_follows_the_other(ref_port):
    #   ref_port 1 (right ended): left events without a match come out, CTI follows the left
    #   ref_port 0 (left ended):  r is cut by every right event, CTI follows the right
    op = AntiJoin(on=ON)
    out, biggest = _reference_and_live(op, ref_port)
    assert ctis(out) == list(range(2, 102))
    if ref_port == 1:
        assert to_cht(out) == []  # every left event meets r
    else:  # r minus the live points: [0, 1) and [101, ∞)
        assert sorted(to_cht(out)) == [(0, 1, {"k": 0, "v": 9}),
                                       (101, MAX_TIME, {"k": 0, "v": 9})]
    assert biggest <= 10, f"the events are not freed (state {biggest})"


def held_ids(j: Join) -> list[Any]:
    """The ids of the events a join holds, per event or column-wise (a few rows with an
    empty other input join column-wise: operators/join.py ``ROWS_INTO_COLUMNS``)."""
    ids = [rec[0] for rec in j.recs.values()]
    if j.columns is not None:
        ids += [i for side in j.columns.sides for i in side.ids.tolist()]
    return sorted(ids)


def test_the_join_frees_the_ended_inputs_events_once_the_open_ones_cti_passes_them():
    #   left    a: [0 ─ 5)  b: [0 ───────── 50)  Cti(1)  end
    #   right   Cti(10): a can meet nothing any more (freed), b can (kept)
    j = Join(on=None)
    j.process([Insert("a", 0, 5, 1), Insert("b", 0, 50, 2), Cti(1)], 0)
    j.end_input(0)
    assert j.process([Cti(10)], 1) == [Cti(10)]
    assert held_ids(j) == ["b"]
    assert j.process([Insert("c", 20, 30, 3), Cti(60)], 1) == [
        Insert(0, 20, 30, (2, 3)), Cti(60)]
    assert j.state_size() == 0
    j._check()


def test_the_column_wise_join_frees_by_the_same_rule():
    import numpy as np

    from operators.columns import Columns

    def cols(ids: list[str], starts: list[int], ends: list[int]) -> Columns:
        return Columns(np.array(ids, dtype=object), np.array(starts), np.array(ends),
                       {"k": np.zeros(len(ids), dtype=np.int64),
                        "v": np.arange(len(ids), dtype=np.int64)})

    j = Join(on=ON, select=_pair_v)
    j.process([cols(["r"], [0], [MAX_TIME]), Cti(1)], 1)
    assert j.end_input(1) == []  # the left has sent no CTI yet
    for t in range(0, 100, 10):
        out = j.process([cols([f"e{t}", f"f{t}"], [t, t + 1], [t + 2, t + 3]), Cti(t + 10)], 0)
        assert ctis(list(out)) == [t + 10]
        j._check()
    assert j.columns is not None and j.state_size() == 1  # r alone: the pairs are final


def test_import_ctis_is_unchanged_by_an_end():
    #   leader   Cti(10)  end            (the CTI it reached stays imported)
    #   input 0  b: [5 ─ 6) late: dropped   a: [12 ─ 14)  Cti(20)   (its own CTIs go on)
    imp = ImportCti()
    assert imp.process([Insert(1, 9, 10, "x"), Cti(10)], 1) == [Cti(10)]
    assert imp.end_input(1) == []
    assert imp.process([Insert("b", 5, 6, "q")], 0) == []
    assert [x.action for x in imp.late] == ["dropped"]
    assert imp.process([Insert("a", 12, 14, "p"), Cti(20)], 0) == [
        Insert("a", 12, 14, "p"), Cti(20)]


# -- where the ends arrive does not change the CHT ------------------------------------------------
def _feed(pairs: list[tuple[int, Message]], rng: random.Random, columns: bool
          ) -> list[tuple[int, list[Any]]]:
    """``(port, batch)``: inserts in column batches (``columns``), else runs of one port's
    messages in random batch sizes."""
    if columns:
        return batches(pairs, rng, float_right=False)
    out: list[tuple[int, list[Any]]] = []
    i = 0
    while i < len(pairs):
        port, size, batch = pairs[i][0], rng.choice((1, 1, 2, 3, 8)), []
        while i < len(pairs) and len(batch) < size and pairs[i][0] == port:
            batch.append(pairs[i][1])
            i += 1
        out.append((port, batch))
    return out


def run_ending(factory: Callable[[], Processor], feed: list[tuple[int, list[Any]]],
               ends: dict[int, int], restore_at: int) -> tuple[list[Message], int, Processor]:
    """Feed ``feed``; end input ``p`` (``end_input``) before item ``ends[p]`` (each after
    that input's last batch), and every input at the end (``finish``); checkpoint (pickled,
    as a checkpoint store keeps it) and restore into a fresh operator before item
    ``restore_at``; ``_check()`` after every step. Returns the output (validated), the output
    CTI before ``finish`` and the operator."""
    steps: list[tuple[int, list[Any] | None]] = list(feed)
    for port, at in sorted(ends.items(), key=lambda x: -x[1]):
        steps.insert(at, (port, None))
    op = factory()
    out: list[Message] = []
    for n, (port, batch) in enumerate(steps):
        if n == restore_at:
            state = pickle.loads(pickle.dumps(op.snapshot()))
            op = factory()
            op.restore(state)
        res = op.end_input(port) if batch is None else op.process(batch, port)
        out.extend(expand(res))
        op._check()
    before = op.out_cti
    out.extend(expand(op.finish()))
    op._check()
    validate(out, name=f"output of {op.name}")
    return out, before, op


def _last_batch(feed: list[tuple[int, list[Any]]], port: int) -> int:
    return max((i for i, (p, _) in enumerate(feed) if p == port), default=-1)


@pytest.mark.parametrize("case", sorted(OPERATORS))
@HEAVY
@given(inputs=two_inputs(payloads=KV), data=st.data())
def test_the_cht_does_not_depend_on_where_an_input_ends(case, inputs, data):
    factory, reference = OPERATORS[case]
    pairs, left, right = inputs
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    feed = _feed(pairs, rng, columns=data.draw(st.booleans(), label="columns"))
    first = data.draw(st.sampled_from([0, 1]), label="first to end")
    at = data.draw(st.integers(_last_batch(feed, first) + 1, len(feed)), label="end at")
    restore_at = data.draw(st.integers(0, len(feed) + 1), label="restore_at")
    out, before, _ = run_ending(factory, feed, {first: at}, restore_at)
    assert_equivalent(out, reference(to_cht(left), to_cht(right)))
    # once the first input ended, the open one's CTI alone; at the end, the furthest one's
    assert before == final_cti((left, right)[1 - first])
    assert final_cti(out) == max(final_cti(left), final_cti(right))


@HEAVY
@given(streams=st.lists(physical_streams(max_steps=15), min_size=3, max_size=3),
       data=st.data())
def test_a_union_of_three_is_unchanged_by_where_two_inputs_end(streams, data):
    order = data.draw(st.permutations([p for p, s in enumerate(streams) for _ in s]))
    its = [iter(s) for s in streams]
    feed = [(p, [next(its[p])]) for p in order]
    last = data.draw(st.sampled_from([0, 1, 2]), label="last to end")
    ends = {p: data.draw(st.integers(_last_batch(feed, p) + 1, len(feed)), label=f"end {p}")
            for p in range(3) if p != last}
    restore_at = data.draw(st.integers(0, len(feed) + 2), label="restore_at")
    out, before, _ = run_ending(lambda: Union(3), feed, ends, restore_at)
    assert_equivalent(out, ref.union(*(to_cht(s) for s in streams)))
    assert before == final_cti(streams[last])
    assert final_cti(out) == max(final_cti(s) for s in streams)


@HEAVY
@given(inputs=two_inputs(payloads=KV), data=st.data())
def test_import_ctis_gives_the_same_output_wherever_an_input_ends(inputs, data):
    pairs, _, _ = inputs
    feed = [(p, [m]) for p, m in pairs]
    first = data.draw(st.sampled_from([0, 1]), label="first to end")
    at = data.draw(st.integers(_last_batch(feed, first) + 1, len(feed)), label="end at")
    ended, _, _ = run_ending(ImportCti, feed, {first: at}, len(feed) + 2)
    op = ImportCti()
    plain = [m for p, b in feed for m in op.process(b, p)] + op.finish()
    assert ended == plain


# -- snapshot and restore -------------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(OPERATORS))
def test_an_ended_input_survives_a_checkpoint(case):
    factory, _ = OPERATORS[case]
    op = factory()
    op.process([Insert("r", 0, 50, {"k": 0, "v": 1}), Cti(1)], 0)
    op.end_input(0)
    state = pickle.loads(pickle.dumps(op.snapshot()))
    restored = factory()
    restored.restore(state)
    assert ctis(list(expand(restored.process([Cti(30)], 1)))) == [30]  # follows input 1
    with pytest.raises(OperatorError, match="after that input ended"):
        restored.process([Cti(40)], 0)


def test_a_snapshot_from_before_per_input_ends_still_restores():
    u = Union(2)
    u.process([Cti(3)], 0)
    state = u.snapshot()
    del state["in_ended"]  # what a checkpoint written before end_input existed holds
    restored = Union(2)
    restored.restore(state)
    assert restored.in_ended is None and restored.process([Cti(5)], 1) == [Cti(3)]
    assert restored.end_input(0) == [Cti(5)]


def test_retractions_of_the_open_input_still_correct_the_output():
    # left ends while its event is live; a retraction on the right moves the pair's end
    j = Join(on=None)
    out = j.process([Insert("a", 0, 20, "a"), Cti(2)], 0) + j.end_input(0)
    out += j.process([Insert("b", 5, 15, "b"), Cti(5)], 1)
    out += j.process([Retract("b", 5, 15, 8, "b"), Cti(30)], 1) + j.finish()
    validate(out)
    assert to_cht(out) == [(5, 8, ("a", "b"))] and ctis(out) == [5, 30]
