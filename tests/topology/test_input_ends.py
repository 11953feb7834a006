"""Both runtimes end an input when its source runs out, so a join or union of a finite stream
(a reference table) and a live one follows the live one (docs/ctis.md): the in-process plan
(:class:`~topology.planning.dag.DagProcessor`: an inner step's end passed on, snapshot and restore
after an end), ``collect()`` inline and on Ray against the from-scratch references, and deployed
queries whose output CTI keeps advancing after the reference table ended."""

from __future__ import annotations

import pickle
import queue
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht, validate
from operators.errors import OperatorError
from operators.events import MAX_TIME, Cti, Insert, Message
from operators.ingress import AdvanceTime
from tests import reference_joins as ref
from tests.kit import ON_RAY, assert_equivalent, physical_streams
from tests.reference_joins import final_cti
from tests.topology.live_kit import rows, wait_for
from topology import Stream
from topology.planning.dag import DagProcessor

KV = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 3)})
ON = ("k", "k")

#: the multi-input operators through the builder: (query over two streams, reference over
#: their CHTs)
QUERIES: dict[str, tuple[Callable[[Stream, Stream], Stream], Callable[..., Any]]] = {
    "union": (lambda a, b: a.union(b), ref.union),
    "join": (lambda a, b: a.join(b, on=ON), lambda l, r: ref.join(l, r, on=ON)),
    "anti_join": (lambda a, b: a.anti_join(b, on=ON), lambda l, r: ref.anti_join(l, r, on=ON)),
    "left_join": (lambda a, b: a.left_join(b, on=ON), lambda l, r: ref.left_join(l, r, on=ON)),
    "full_outer_join": (lambda a, b: a.full_outer_join(b, on=ON),
                        lambda l, r: ref.full_outer_join(l, r, on=ON)),
}


def ctis(out: list[Message]) -> list[int]:
    return [m.time for m in out if type(m) is Cti]


# -- the in-process plan ------------------------------------------------------------------------
def _diamond() -> DagProcessor:
    #   ref ──┬── join ── union ── sink        ref feeds the join and the union;
    #   live ─┘            │                   live only the join
    #   ref ───────────────┘
    ref_ = Stream.from_events([], name="ref")
    live = Stream.from_events([], name="live")
    return DagProcessor(ref_.join(live).union(ref_).plan(), inline_sink=True)


def test_an_end_reaches_every_step_the_ended_source_feeds():
    dag = _diamond()
    r, lv = dag.inputs.index("ref"), dag.inputs.index("live")
    out = dag.process([Insert("r", 0, MAX_TIME, "r"), Cti(1)], r)
    out += dag.process([Insert("a", 3, 4, "a"), Cti(5)], lv)
    assert ctis(out) == [1]
    # the ref source finishes; the join's input 0 and the union's input 1 end: the union
    # follows the join, which follows live
    out += dag.end_input(r)
    assert ctis(out) == [1, 5] and dag.done == {"ref"}
    out += dag.process([Insert("b", 7, 8, "b"), Cti(20)], lv)
    assert ctis(out) == [1, 5, 20]
    out += dag.finish()
    validate(out)
    assert sorted(to_cht(out), key=repr) == sorted(
        [(0, MAX_TIME, "r"), (3, 4, ("r", "a")), (7, 8, ("r", "b"))], key=repr)
    assert dag.done == set(dag.procs)


def test_the_plan_restores_its_ended_inputs():
    dag = _diamond()
    r, lv = dag.inputs.index("ref"), dag.inputs.index("live")
    dag.process([Insert("r", 0, MAX_TIME, "r"), Cti(1)], r)
    dag.end_input(r)
    state = pickle.loads(pickle.dumps(dag.snapshot()))
    again = _diamond()
    again.restore(state)
    assert again.done == {"ref"}
    out = again.process([Insert("a", 3, 4, "a"), Cti(9)], lv)
    assert out == [Insert(0, 3, 4, ("r", "a")), Cti(9)]  # (the union tags join id i as 2i)
    with pytest.raises(OperatorError, match="after that input ended"):
        again.process([Cti(10)], r)
    assert ctis(again.finish()) == []  # (the CTI is at the furthest input's already)

    old = dag.snapshot()
    del old["done"]  # a checkpoint written before inputs ended one by one
    _diamond().restore(old)


def test_collect_inline_follows_the_longer_input_once_the_shorter_ended():
    #   short   r: [0 ─ 5)  Cti(5)  end
    #   long    e0 Cti(1)  e1 Cti(2) ... e49 Cti(50)
    #   union   Cti(5) ... Cti(30) ... Cti(50): not Cti(5) until the very end
    short = Stream.from_events([Insert("r", 0, 5, 0), Cti(5)])
    long = Stream.from_events([m for t in range(50) for m in (Insert(f"e{t}", t, t + 1, 1),
                                                              Cti(t + 1))])
    for query in (long.union(short), long.join(short)):
        out = query.collect(runtime="inline", batch_size=2)
        assert 30 in ctis(out) and ctis(out)[-1] == 50


def _with_tail(stream: list[Message], after: int, n: int) -> list[Message]:
    """``stream`` going on with ``n`` more CTIs, one tick apart, from past ``after``: it is
    still open long after a shorter input ended."""
    last = max(final_cti(stream) or 0, after)
    return [*stream, *(Cti(last + i) for i in range(1, n + 1))]


def check_query(case: str, left: list[Message], right: list[Message], runtime: str,
                batch_size: int) -> list[Message]:
    query, reference = QUERIES[case]
    out = query(Stream.from_events(left), Stream.from_events(right)).collect(
        runtime=runtime, batch_size=batch_size)
    validate(out, name=f"{case} output ({runtime})")
    assert_equivalent(out, reference(to_cht(left), to_cht(right)))
    assert ctis(out)[-1] == max(final_cti(left), final_cti(right))
    return out


@st.composite
def short_and_long(draw: Any) -> tuple[list[Message], list[Message], int]:
    """``(left, right, longer)``: random physical streams, one of them (``longer``) going on
    with CTIs long after the other ended."""
    left = draw(physical_streams(payloads=KV, max_steps=15, id_prefix="l"))
    right = draw(physical_streams(payloads=KV, max_steps=15, id_prefix="r"))
    longer = draw(st.sampled_from([0, 1]))
    other = (left, right)[1 - longer]
    tail = len(other) + 3
    if longer == 0:
        left = _with_tail(left, final_cti(right) or 0, tail)
    else:
        right = _with_tail(right, final_cti(left) or 0, tail)
    return left, right, longer


@pytest.mark.parametrize("case", sorted(QUERIES))
@ON_RAY
@given(inputs=short_and_long())
def test_inline_the_cht_is_the_references_and_the_cti_follows_the_open_input(case, inputs):
    left, right, longer = inputs
    out = check_query(case, left, right, "inline", batch_size=1)
    # one message a batch, round robin: the longer input's next to last CTI comes after the
    # shorter input ended, and the output follows it then, not only at the end
    assert final_cti((left, right)[longer]) - 1 in ctis(out)


@pytest.mark.ray
@pytest.mark.parametrize("case", sorted(QUERIES))
@ON_RAY
@given(inputs=short_and_long())
def test_on_ray_the_cht_is_the_references_wherever_the_ends_arrive(ray_session, case, inputs):
    left, right, _ = inputs
    check_query(case, left, right, "ray", batch_size=2)


# -- deployed: a reference table that ended and a live stream --------------------------------------
@pytest.mark.ray
@pytest.mark.parametrize("kind", ["join", "union"])
def test_a_deployed_query_advances_after_its_reference_table_ended(ray_session, kind):
    #   reference   r: [0 ──── 50)  end: its final CTI is 50
    #   live        t=0 1 2 ... 199, a CTI after every 10 rows (still running)
    #   output CTI  passes 150 while the live stream runs (it stayed at 50 before)
    feed: queue.Queue = queue.Queue()
    reference = Stream.from_rows([{"t": 0, "until": 50, "k": 0}], start="t", end="until",
                                 shape="interval")
    live = Stream.from_rows(rows(feed), start="t", advance=AdvanceTime(every=10))
    query = live.join(reference, on=ON) if kind == "join" else live.union(reference)
    q = query.deploy(f"ended-{kind}", history=True)
    try:
        for t in range(200):
            feed.put({"t": t, "k": 0})
        wait_for(lambda: q.stats()["sink"]["cti"] >= 150, timeout_s=120,
                 what=f"the {kind}'s output CTI to pass the reference's final CTI 50")
        assert not q.stats()["sink"]["finished"]  # the live input is still open
        feed.put(None)
        assert q.wait(60)
        assert len(q.snapshot()) == (50 if kind == "join" else 201)  # the whole output
    finally:
        feed.put(None)
        q.stop()
