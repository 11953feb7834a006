"""Late events as a stream (``Stream.late()``): exactly the events a source's AdvanceTime
policy dropped or adjusted, with their original times, payload, source and policy; the
accounting equation with the late stream (every row is in the output path, the late stream
or the dead letters); the same ids after a restore mid-stream; inline, fused and on Ray; one
query that reads a source and its late stream; refused on a stream that has no late events."""

from __future__ import annotations

import pickle
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import validate
from operators.events import MAX_TIME, Cti, Insert
from operators.ingress import AdvanceTime, LateOut
from operators.sources import RowsSource
from tests.kit import PROPERTY
from tests.reliability import assert_accounted, run_dag
from topology import Stream

row = st.one_of(
    st.fixed_dictionaries({"t": st.integers(0, 60), "e": st.integers(0, 80),
                           "k": st.integers(0, 5)}),
    st.fixed_dictionaries({"t": st.integers(0, 60), "k": st.integers(0, 5)}),
    st.fixed_dictionaries({"t": st.sampled_from([None, "x"])}),
)
advances = st.builds(AdvanceTime, every=st.sampled_from([1, 2, 5]), delay=st.integers(0, 6),
                     policy=st.sampled_from(["drop", "adjust"]))


def _source(rows, shape, advance):
    return Stream.from_rows(rows, start="t", end=None if shape == "point" else "e",
                            shape=shape, id="k" if shape == "edge" else None,
                            advance=advance, name="src")


def _stated(r, shape):
    """The lifetime a row states (an end edge: the point at its end)."""
    if shape == "point":
        return r["t"], r["t"] + 1
    if shape == "interval":
        return r["t"], r["e"]
    return (r["e"], r["e"] + 1) if "e" in r else (r["t"], MAX_TIME)


@PROPERTY
@given(st.lists(row, max_size=40), st.sampled_from(["point", "interval", "edge"]), advances,
       st.sampled_from([1, 3, 64]))
def test_the_late_stream_holds_exactly_the_late_rows(rows, shape, advance, batch):
    src = _source(rows, shape, advance)
    out, dag, _ = run_dag(src.where(lambda p: True).union(src.late()), batch_size=batch)
    source = dag.procs["src"]
    stats = source.stats
    late = [m for m in out if type(m) is Insert and "policy" in m.payload]
    main = [m for m in out if type(m) is Insert and "policy" not in m.payload]
    # the counts stay as they are, and every row is in the output path, the late stream or
    # the dead letters (an adjusted row in both of the first two)
    assert_accounted(stats)
    assert stats["received"] == len(rows)
    assert len(late) == stats["dropped"] + stats["adjusted"] == len(source.late)
    assert stats["dead_lettered"] == len(source.dead_letters)
    if shape != "edge":  # (an end edge is a retraction, not an event of its own)
        assert len(main) == stats["processed"] + stats["adjusted"]
    for m, rec in zip(sorted(late, key=lambda m: m.id), source.late):
        assert m.payload == {"source": "src", "policy": rec.action, "reason": rec.reason,
                             "payload": rec.item}
        assert (m.start, m.end) == _stated(rec.item, shape)


@PROPERTY
@given(st.lists(row, max_size=40), st.sampled_from(["point", "interval", "edge"]), advances,
       st.randoms(use_true_random=False))
def test_a_restored_source_sends_the_same_late_stream(rows, shape, advance, rnd):
    def make():
        src = RowsSource("src", start="t", end=None if shape == "point" else "e", shape=shape,
                         id="k" if shape == "edge" else None, advance=advance)
        src.late_stream = True
        return src

    def run(restore_at):
        src, out, i = make(), [], 0
        while i < len(rows):
            if i >= restore_at:
                state = pickle.loads(pickle.dumps(src.snapshot()))
                src = make()
                src.restore(state)
                restore_at = len(rows) + 1
            out.extend(src.process(rows[i:i + 3]))
            i += 3
        return out + src.finish()

    plain = run(len(rows) + 1)
    restored = run(rnd.randint(0, len(rows)))
    assert restored == plain
    markers = [m.event for m in plain if type(m) is LateOut]
    assert [m.id for m in markers] == list(range(len(markers)))
    validate([m for m in plain if type(m) is not LateOut])  # the markers left, a valid stream


ROWS = [{"t": 10, "e": 20}, {"t": 2, "e": 3}, {"t": 4, "e": 15}, {"t": None},
        {"t": 12, "e": 14}, {"t": 30, "e": 31}, {"t": 1, "e": 40}]
#   CTI 10 after the first row; [2, 3) dropped; [4, 15) adjusted to [10, 15); None dead;
#   CTI 12, CTI 30; [1, 40) adjusted to [30, 40)


def _rows_query(name="src"):
    return Stream.from_rows(ROWS, start="t", end="e", shape="interval",
                            advance=AdvanceTime(every=1, policy="adjust"), name=name)


@pytest.mark.parametrize("fuse", [False, True])
def test_the_late_stream_on_each_runtime(runtime, fuse):
    src = _rows_query()
    late = src.late().select(lambda p: (p["policy"], p["payload"]["t"]))
    out = late.collect(runtime=runtime, fuse=fuse, batch_size=2)
    validate(out)
    assert sorted((m.start, m.end, m.payload) for m in out if type(m) is Insert) == [
        (1, 40, ("adjusted", 1)), (2, 3, ("dropped", 2)), (4, 15, ("adjusted", 4))]
    assert out[-1] == Cti(40)  # its only CTI: at the end of input, past every late event
    # one query that reads the source and its late stream: each edge gets its own events
    both = src.where(lambda p: p["t"] > 0).union(late).collect(runtime=runtime, fuse=fuse,
                                                               batch_size=2)
    validate(both)
    payloads = sorted(repr(m.payload) for m in both if type(m) is Insert)
    assert len(payloads) == 5 + 3 and sum("adjusted" in p for p in payloads) == 2


def test_late_is_refused_on_a_stream_without_late_events():
    with pytest.raises(ValueError, match=r"late\(\): from_events has no late events"):
        Stream.from_events([]).late()
    with pytest.raises(ValueError, match=r"late\(\): where has no late events"):
        _rows_query().where(bool).late()


def test_a_late_stream_of_a_partitioned_source_is_the_union_of_its_parts():
    from topology.spark import table_parts as parts

    left, right = _rows_query("a"), _rows_query("b")
    union = Stream(parts.UnionOfParts(inputs=(left._node, right._node)))
    out = union.late().collect(runtime="inline")
    assert sum(type(m) is Insert for m in out) == 6


def test_random_rows_on_both_runtimes_agree(runtime):
    rnd = random.Random(7)
    rows = [{"t": rnd.randint(0, 100)} for _ in range(300)]
    src = Stream.from_rows(rows, start="t", advance=AdvanceTime(every=5, delay=3))
    out = src.late().collect(runtime=runtime, batch_size=16)
    inline = src.late().collect(runtime="inline", batch_size=16)
    assert sorted(out) == sorted(inline) and len(out) > 20


@pytest.mark.parametrize("fuse", [True, "chains", "all"])
def test_a_late_stream_is_not_fused_into_its_producers_chain(fuse):
    """A late edge routes (only the producer's late events go on it): a chain, which passes
    its steps' whole output on, must not take the late step in (it received the source's
    LateOut markers and failed, once collect() fused chains by default)."""
    rnd = random.Random(7)
    rows = [{"t": rnd.randint(0, 100)} for _ in range(300)]
    late = Stream.from_rows(rows, start="t", advance=AdvanceTime(every=5, delay=3)).late()
    fused = late.collect(runtime="inline", batch_size=16, fuse=fuse)
    assert sorted(fused) == sorted(late.collect(runtime="inline", batch_size=16))
    assert len(fused) > 20
