"""Union's column path: a ``Columns`` batch passes as one batch with its ids tagged, and the
output is the per-event path's, message for message, hence its CHT the reference's.

Random physical streams on 2 or 3 inputs, with the same ids on every input (ints from 0,
negative ints, ints whose tag leaves int64, strings), their inserts in ``Columns`` batches cut
at random (point runs without an end column), retractions, edges and CTIs as messages, and a
retraction's id sometimes an equal id of another type (``2.0``, ``numpy.int64(2)``), which
must meet its insert's tag. Then the same through the planner: a union of a column source and
a column anti-join whose retractions follow its column output, and the keyed window aggregate
over a union of point sources, inline and on Ray::

    input 0   Columns ids [0, 1]: [0 ─ 1) [2 ─── 6)    then Retract 1: [2 ─── 6) → [2 ─ 4)
    input 1   Columns ids [0]:    [1 ─ 2)
    output    Columns ids [0, 2]                        then Retract 2: [2 ─ 4)
              Columns ids [1]
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.aggregates import Count, Sum
from operators.cht import to_cht, validate
from operators.columns import Columns, expand
from operators.events import Cti, Insert, Retract
from operators.union import Union, tag_id
from tests import reference_joins as ref
from tests.kit import ON_RAY, PROPERTY, assert_equivalent, physical_streams
from tests.operators.test_keyed_window import reference_per_key
from tests.reference_joins import final_cti
from topology import Stream

#: how an input's ids look: an ``e<n>`` id of the generated stream becomes ...
IDS = {
    "int": lambda n: n,
    "negative": lambda n: -n - 1,
    "beyond_int64": lambda n: 2**62 + n,  # fits int64, its tag does not
    "str": lambda n: f"e{n}",
}
#: an id equal to ``i`` as a dict key, of another type (a retraction may name its event so)
EQUAL = [lambda i: i, float, np.int64]


def _renamed(stream, ids, rng):
    out = []
    for msg in stream:
        if type(msg) is Insert:
            msg = Insert(ids(int(msg.id[1:])), *msg[1:])
        elif type(msg) is Retract:
            i = ids(int(msg.id[1:]))
            if type(i) is int and abs(i) < 2**52:
                i = rng.choice(EQUAL)(i)
            msg = Retract(i, *msg[1:])
        out.append(msg)
    return out


def _columns(run: list[Insert], rng: random.Random) -> Columns:
    ids = [m.id for m in run]
    id_column = (np.array(ids, dtype=np.int64) if all(type(i) is int for i in ids)
                 else np.array(ids, dtype=object))
    starts = np.array([m.start for m in run], dtype=np.int64)
    ends = np.array([m.end for m in run], dtype=np.int64)
    points = bool((ends - starts == 1).all()) and rng.random() < 0.5
    return Columns(id_column, starts, None if points else ends,
                   np.array([m.payload for m in run], dtype=np.int64))


def _batches(pairs, rng: random.Random):
    """``(port, batch)``: runs of inserts on one port as one Columns (cut at random) inside
    batches that also hold messages."""
    out, batch, run, port = [], [], [], None

    def flush_run():
        if run:
            batch.append(_columns(list(run), rng))
            run.clear()

    for p, msg in pairs:
        if p != port or rng.random() < 0.2:
            flush_run()
            if batch:
                out.append((port, list(batch)))
                batch.clear()
            port = p
        if type(msg) is Insert and rng.random() < 0.85:
            run.append(msg)
            continue
        flush_run()
        batch.append(msg)
    flush_run()
    if batch:
        out.append((port, batch))
    return out


@st.composite
def inputs(draw):
    """``(pairs, streams)``: 2 or 3 streams with the same ids, each renamed by an id kind of
    :data:`IDS`, and a random interleaving."""
    k = draw(st.sampled_from([2, 3]), label="inputs")
    rng = random.Random(draw(st.integers(0, 2**32), label="seed"))
    streams = [_renamed(draw(physical_streams(max_steps=20)),
                        IDS[draw(st.sampled_from(sorted(IDS)), label=f"ids of {p}")], rng)
               for p in range(k)]
    order = draw(st.permutations([p for p, s in enumerate(streams) for _ in s]))
    its = [iter(s) for s in streams]
    return [(p, next(its[p])) for p in order], streams


def _run(k, feed, restore_at):
    op = Union(k)
    out = []
    for n, (port, batch) in enumerate(feed):
        if n == restore_at:
            state = op.snapshot()
            op = Union(k)
            op.restore(state)
        got = op.process(batch, port)
        # each message in comes out as one of its kind, in its place (a Columns as one)
        assert ([type(m) for m in got if type(m) is not Cti]
                == [type(m) for m in batch if type(m) is not Cti])
        out.extend(got)
        op._check()
    return out


@PROPERTY
@given(data=st.data())
def test_column_batches_give_the_per_event_output(data):
    pairs, streams = data.draw(inputs())
    rng = random.Random(data.draw(st.integers(0, 2**32), label="batching"))
    feed = _batches(pairs, rng)
    restore_at = data.draw(st.integers(0, len(feed)), label="restore_at")
    out = _run(len(streams), feed, restore_at)
    per_event = _run(len(streams), [(p, list(expand(b))) for p, b in feed], None)
    assert list(expand(out)) == per_event  # the same ids, message for message
    validate(list(expand(out)))  # unique ids; each retraction meets its insert's id
    assert_equivalent(list(expand(out)), ref.union(*(to_cht(s) for s in streams)))
    assert final_cti(out) == min(final_cti(s) for s in streams)


def test_a_retraction_after_a_column_batch_meets_its_insert():
    # the sketch in the module doc
    u = Union(2)
    first = u.process([Columns(np.array([0, 1]), np.array([0, 2]), np.array([1, 6]),
                               np.array([7, 8]))], 0)
    second = u.process([Columns(np.array([0]), np.array([1]), None, np.array([9]))], 1)
    retract = u.process([Retract(1.0, 2, 6, 4, 8)], 0)
    assert [c.ids.tolist() for c in first + second] == [[0, 2], [1]]
    assert all(c.ids.dtype == np.int64 for c in first + second)  # no object per event
    assert second[0].points
    assert retract == [Retract(2, 2, 6, 4, 8)]
    assert_equivalent(list(expand(first + second + retract)),
                      [(0, 1, 7), (2, 4, 8), (1, 2, 9)])


def test_ids_whose_tag_leaves_int64_or_are_not_ints_are_tagged_one_by_one():
    u = Union(3)
    big = u.process([Columns(np.array([2**62, -(2**62) - 1]), np.array([0, 0]), None,
                             np.array([1, 2]))], 2)[0]
    assert big.ids.tolist() == [2**62 * 3 + 2, (-(2**62) - 1) * 3 + 2]
    text = u.process([Columns(np.array(["a", 5], dtype=object), np.array([0, 0]), None,
                              np.array([1, 2]))], 1)[0]
    assert text.ids.tolist() == [(1, "a"), 16]
    assert [tag_id(x, 1, 3) for x in (True, 5.0, 5.5, np.int32(5), (1, 2))] == [
        4, 16, (1, 5.5), 16, (1, (1, 2))]


# -- through the planner, inline and on Ray -------------------------------------------------------
@st.composite
def tables(draw):
    """Rows ``ts``, ``until`` (intervals), ``k`` and ``v``, sorted by time."""
    n = draw(st.integers(0, 25))
    ts = sorted(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)))
    columns = {"ts": ts, "until": [t + draw(st.integers(1, 10)) for t in ts],
               "k": [draw(st.integers(0, 2)) for _ in ts],
               "v": [draw(st.integers(0, 5)) for _ in ts]}
    return pa.table({name: pa.array(c, pa.int64()) for name, c in columns.items()})


def _source_cht(stream: Stream):
    return to_cht(stream.collect(runtime="inline"))


@pytest.mark.timeout(600)
@settings(ON_RAY, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(left=tables(), other=tables(), rows=st.integers(1, 8), right=physical_streams(
    payloads=st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 5)}),
    max_steps=15))
def test_a_union_of_column_sources_and_a_column_anti_join_matches_the_reference(
        runtime, left, other, rows, right):
    # input 0: an anti-join whose left side travels as Columns (batches of `rows` rows) and
    # whose right side inserts and retracts, so that its output (Columns of the left events,
    # then retractions and inserts of their pieces) changes on one port; input 1: a column
    # source whose ids (0, 1, ...) are also the anti-join's output ids
    a = Stream.from_arrow(left, start="ts", end="until", shape="interval", batch_rows=rows)
    b = Stream.from_events(right)
    c = Stream.from_arrow(other, start="ts", end="until", shape="interval", batch_rows=rows)
    got = a.anti_join(b, on=("k", "k")).union(c).collect(runtime=runtime)
    want = ref.union(ref.anti_join(_source_cht(a), to_cht(right), on=("k", "k")),
                     _source_cht(c))
    assert_equivalent(got, want)


@pytest.mark.timeout(600)
@settings(ON_RAY, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(tables(), min_size=2, max_size=3), size=st.integers(1, 12),
       rows=st.integers(1, 8))
def test_the_keyed_window_path_over_a_union_of_point_sources(runtime, parts, size, rows):
    # every source counts its ids from 0, in Columns batches of `rows` rows: the keyed
    # aggregate must count each event once
    srcs = [Stream.from_arrow(t, start="ts", batch_rows=rows) for t in parts]
    union = srcs[0].union(*srcs[1:])
    q = union.group_apply(lambda r: r["k"], lambda g: g.tumbling_window(size)
                          .aggregate(Sum("v")))
    assert "as one keyed window aggregate" in q.explain()
    events = ref.union(*(_source_cht(s) for s in srcs))
    assert len(events) == sum(t.num_rows for t in parts)  # no row late: the test can fail
    from operators.windows import tumbling_window

    want = reference_per_key([Insert(i, s, e, p) for i, (s, e, p) in enumerate(events)], "k",
                             tumbling_window(size), lambda: Sum("v"), "window")
    assert_equivalent(q.collect(runtime=runtime), want)
    counts = union.tumbling_window(size).aggregate(Count())
    assert "column-wise window aggregate" in counts.explain()
    assert sum(n for _, _, n in to_cht(counts.collect(runtime=runtime))) == len(events)
