"""The planner's proof that a join's output holds only inserts (``Node.lengths``), and the
column-wise window aggregates the proof lets run over it.

A ``join`` retracts only when one of its inputs does (freeing state on CTIs emits nothing),
and each output lives over the intersection of its two inputs' lifetimes, so over inputs
that never retract it sends only inserts, none longer than the shorter input's: a point
joined with anything is a point. A rows source of edges with no ``end`` column never
retracts (no row can close an edge). With that proved, a window aggregate per key over a
stream joined with a reference table (``cedar demo``'s ``regional_load``) runs as the keyed
window aggregate instead of one window operator per group.

Random queries of that shape (each input: points, intervals, points given a lifetime, open
edges, or edges that later rows close; given as column batches or rows; disorder within the
CTI bounds, late rows dropped or adjusted, duplicate edge ids, ties; a traced, an untraced or
no ``select``; tumbling, hopping and session windows, per key or one group, speculative or
final) check that

* what the planner classifies as inserts of at most L ticks holds only inserts of at most L
  ticks, and that the join's CHT is the reference evaluator's;
* the whole query through the planner has the CHT of the general path (the same query with
  the proof turned off, so each group runs its own window operator);
* the operator the planner chose, fed the join's own output batch by batch (across a
  checkpoint and restore), has after every batch the general operator's CHT so far and its
  output CTI (``emit="speculative"``; with ``"final"`` at the end: the general window sends
  final rows later);
* on Ray, a few of the same queries give the general path's CHT.
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from operators.aggregates import Count, Max, Sum
from operators.cht import to_cht, validate
from operators.columns import Columns, expand
from operators.events import MAX_TIME, Insert, Retract
from operators.ingress import AdvanceTime
from tests import reference_joins as ref
from tests.kit import HEAVY, ON_RAY, assert_equivalent
from topology import Stream
from topology.planning import planner, rules

SHAPES = ("point", "interval", "lifetime", "open edge", "edge")
#: lifetimes the planner proves: a point 1 tick, ``alter_lifetime(duration=LIFETIME)``
LIFETIME = 7


def _source(draw, shape: str, side: str, name: str) -> Stream:
    """A random source of ``shape`` (see SHAPES) with fields t, k, v (and region on the
    right), as column batches (``{name: array}``) or rows, cut into a few batches."""
    n = draw(st.integers(1, 120), label=f"{side} rows")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label=f"{side} seed"))
    div = draw(st.sampled_from([1, 3, 10]), label=f"{side} events per tick")
    t = np.arange(n, dtype=np.int64) // div - rng.integers(0, draw(
        st.integers(1, 20), label=f"{side} disorder"), n)
    cols = {"t": t, "k": rng.integers(0, 4, n), "v": rng.integers(-5, 50, n).astype(float)}
    if side == "right":
        cols["region"] = np.array([f"r{x}" for x in rng.integers(0, 3, n).tolist()],
                                  dtype=object)
    advance = AdvanceTime(every=draw(st.sampled_from([None, 5, 256]), label=f"{side} every"),
                          delay=draw(st.sampled_from([0, 3, 15]), label=f"{side} delay"),
                          policy=draw(st.sampled_from(["drop", "adjust"]),
                                      label=f"{side} policy"))
    if shape in ("open edge", "edge"):
        ids = rng.integers(0, max(2, n // 2), n) if shape == "edge" or draw(
            st.booleans(), label=f"{side} repeated ids") else np.arange(n)
        rows = []
        for i, row in enumerate(_rows(cols)):
            row["id"] = int(ids[i])
            if shape == "edge" and rng.random() < 0.3:  # closes an edge of that id (if open)
                row["u"] = int(t[i]) + int(rng.integers(1, 30))
            rows.append(row)
        return Stream.from_rows(rows, start="t", end="u" if shape == "edge" else None,
                                shape="edge", id="id", advance=advance, name=name)
    end = None
    if shape == "interval":
        cols["u"] = t + rng.integers(1, 40, n)
        end = "u"
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3),
                           label=f"{side} cuts")))
    batches = []
    for a, b in zip([0, *cuts], [*cuts, n]):
        part = {c: x[a:b] for c, x in cols.items()}
        rows_batch = draw(st.booleans(), label=f"{side} rows batch")
        batches.append(_rows(part) if rows_batch else part)
    s = Stream._batched(batches, "t", end, "interval" if end else "point", None, advance,
                        name)
    return s.alter_lifetime(duration=LIFETIME) if shape == "lifetime" else s


def _rows(cols: dict) -> list[dict]:
    names = list(cols)
    return [dict(zip(names, vals)) for vals in zip(*(cols[c].tolist() for c in names))]


SELECTS = {
    # traced: the join evaluates it on columns
    "traced": (lambda l, r: {"g": r["region"], "v": l["v"]}, "g", "v"),
    # untraced (a conditional): the join calls it per pair
    "untraced": (lambda l, r: {"g": r["region"], "v": l["v"] if l["k"] % 2 else -l["v"]},
                 "g", "v"),
    # no select: (left, right) pairs
    "pairs": (None, lambda p: p[1]["region"], lambda p: p[0]["v"]),
}
UDMS = {"sum": Sum, "count": lambda f: Count(), "max": Max}


def _window(s: Stream, kind: str, udm, emit: str) -> Stream:
    if kind == "tumbling":
        return s.tumbling_window(5, emit=emit).aggregate(udm)
    if kind == "hopping":
        return s.hopping_window(12, 4, emit=emit).aggregate(udm)
    return s.session_window(6).aggregate(udm)


@st.composite
def queries(draw):
    shapes = (draw(st.sampled_from(SHAPES), label="left shape"),
              draw(st.sampled_from(SHAPES), label="right shape"))
    left = _source(draw, shapes[0], "left", "left")
    right = _source(draw, shapes[1], "right", "right")
    select, key, field = SELECTS[draw(st.sampled_from(sorted(SELECTS)), label="select")]
    joined = left.join(right, on=("k", "k"), select=select)
    udm = UDMS[draw(st.sampled_from(sorted(UDMS)), label="udm")](field)
    kind = draw(st.sampled_from(["tumbling", "hopping", "session"]), label="window")
    emit = draw(st.sampled_from(["speculative", "final"]), label="emit")
    if kind != "session" and draw(st.booleans(), label="one group"):
        q = _window(joined, kind, udm, emit)
    else:
        q = joined.group_apply(key, lambda g: _window(g, kind, udm, emit))
    return shapes, left, right, joined, q


def _collect(s: Stream, runtime: str = "inline", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (duplicate edge ids and bad rows: dead letters)
        return s.collect(runtime, **kw)


def _general(s: Stream, runtime: str = "inline", **kw):
    """``s`` with the proof turned off: every window runs its general operator."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rules, "RULES", ())
        return _collect(s, runtime, **kw)


def _root_factory(q: Stream):
    [stage] = [st for st in planner.plan(q._node).stages.values()
               if st.nodes and st.nodes[0] is q._node]
    return stage.factory


def _fast_path(text: str) -> bool:
    return any(w in text for w in ("keyed window aggregate", "column-wise window aggregate",
                                   "keyed session aggregate", "column-wise session aggregate"))


@settings(HEAVY, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(query=queries(), seed=st.integers(0, 2**32 - 1))
def test_a_join_proved_insert_only_holds_only_inserts(query, seed):
    shapes, left, right, joined, q = query
    lengths = joined._node.lengths()
    # the join's own output: what the planner claims (only inserts, none longer than
    # ``lengths``) holds; its CHT is the reference evaluator's
    out = _collect(joined, columns=True)
    events = list(expand(out))
    validate(events, name="join output")
    if lengths is not None:
        assert not any(type(m) is Retract for m in events)
        if lengths < MAX_TIME:  # (MAX_TIME: any length, edges included)
            assert all(m.end - m.start <= lengths for m in events if type(m) is Insert)
    assert_equivalent(events, ref.join(to_cht(_collect(left)), to_cht(_collect(right)),
                                       on=("k", "k"), select=joined._node.select))
    # the whole query: the general path's CHT
    got = _collect(q)
    validate(got, name="query output")
    want = _general(q)
    assert_equivalent(got, want)
    # the operator the planner chose, fed the join's output batch by batch: after every
    # batch the general operator's CHT and output CTI (no row held back, no CTI ahead)
    fast_factory = _root_factory(q)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rules, "RULES", ())
        general_factory = _root_factory(q)
    rng = random.Random(seed)
    # (emit="final": the general window operator sends a final row later than the keyed one
    # does, at the end of input rather than at the CTI past the window: compared at the end)
    window = q._node.sub if hasattr(q._node, "sub") else q._node
    speculative = window.emit == "speculative"
    fast, general = fast_factory(), general_factory()
    fast_out, general_out = [], []
    i, k = 0, 0
    while i < len(out):
        size = rng.choice([1, 1, 2, 5])
        batch = out[i:i + size]
        i += size
        k += 1
        if k == 3:  # a checkpoint midway: the restored operator must not notice
            state = fast.snapshot()
            fast = fast_factory()
            fast.restore(state)
        fast_out += fast.process(batch)
        general_out += general.process(list(expand(batch)))
        note(f"batch {k}: {batch} -> {fast_out} / {general_out}")
        if speculative:
            assert_equivalent(fast_out, general_out)
            assert fast.out_cti == general.out_cti
    fast_out += fast.finish()
    general_out += general.finish()
    assert_equivalent(fast_out, general_out)
    assert_equivalent(fast_out, got)
    # and the planner proves what it can: inputs that never retract, the shorter's length
    proved = "edge" not in shapes
    assert (lengths is not None) == proved, (shapes, lengths)
    if proved:
        assert lengths == min({"point": 1, "lifetime": LIFETIME}.get(s, MAX_TIME)
                              for s in shapes)
        if lengths == 1:
            assert _fast_path(q.explain()), q.explain()


@pytest.mark.ray
@settings(ON_RAY, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(query=queries())
def test_on_ray_a_proved_join_query_equals_the_general_path(ray_session, query):
    """The same queries on Ray (an actor per step: the join's inputs interleave as they
    arrive, its column batches cross actors) against the general path inline."""
    *_, q = query
    assert_equivalent(_collect(q, "ray"), _general(q))


def test_what_the_planner_proves_of_joins():
    points = Stream.from_rows([], start="t")
    table = Stream.from_rows([], start="t", shape="edge", id="k")
    closing = Stream.from_rows([], start="t", end="u", shape="edge", id="k")
    def lengths(node):
        return node.lengths()

    assert lengths(table._node) == MAX_TIME  # edges no row can close
    assert lengths(closing._node) is None
    assert lengths(points.join(table, on=("k", "k"))._node) == 1
    assert lengths(table.join(points.alter_lifetime(duration=9))._node) == 9
    assert lengths(table.join(table)._node) == MAX_TIME
    assert lengths(points.join(closing)._node) is None
    assert lengths(closing.join(points)._node) is None
    assert lengths(points.left_join(table)._node) is None  # unmatched parts are cut later
    assert lengths(points.anti_join(table)._node) is None
    regional = points.join(table, on=("k", "k"), select=lambda r, m: {"g": m["g"], "v": r["v"]})
    q = regional.group_apply(lambda r: r["g"], lambda g: g.tumbling_window(10).aggregate(
        Sum("v")))
    assert "as one keyed window aggregate" in q.explain()
    assert "column-wise window aggregate (point input)" in regional.tumbling_window(
        10).aggregate(Count()).explain()
    assert "keyed session aggregate" in regional.group_apply(
        "g", lambda g: g.session_window(5).aggregate(Sum("v"))).explain()


# -- end to end, inline and on Ray: the demo's regional load ------------------------------------
N = 6_000
_RNG = np.random.default_rng(11)
METERS = [{"meter": f"m{i}", "ts": int(_RNG.integers(0, 50)), "region": f"region{i % 4}"}
          for i in range(40)]
READINGS = {"meter": np.array([f"m{i}" for i in _RNG.integers(0, 42, N).tolist()],
                              dtype=object),
            "ts": np.arange(N, dtype=np.int64) * 3 + _RNG.integers(0, 60, N),
            "kwh": _RNG.random(N)}


def _regional(emit: str) -> Stream:
    readings = Stream.from_arrow(READINGS, start="ts", batch_rows=700,
                                 advance=AdvanceTime(every=500, delay=30))
    meters = Stream.from_rows(METERS, start="ts", id="meter", shape="edge", name="meters")
    return readings.join(meters, on=("meter", "meter"),
                         select=lambda r, m: {"region": m["region"], "kwh": r["kwh"]}
                         ).group_apply(lambda r: r["region"], lambda g: g.tumbling_window(
                             300, emit=emit).aggregate(Sum("kwh")))


@pytest.mark.parametrize("emit", ["speculative", "final"])
def test_the_regional_load_runs_keyed_and_equals_the_general_path(runtime, emit):
    q = _regional(emit)
    assert "as one keyed window aggregate" in q.explain()
    joined = q._node.inputs[0]
    # the join hands the keyed aggregate column batches, its select evaluated on columns
    out = _collect(Stream(joined), columns=True)
    batches = [m for m in out if type(m) is Columns]
    assert batches and sum(map(len, batches)) == sum(
        1 for m in expand(out) if type(m) is Insert)
    assert all(isinstance(b.payload, dict) and b.payload["kwh"].dtype == np.float64
               for b in batches)
    got = _collect(q, runtime)
    want = _general(q)
    assert len(to_cht(want)) > 50
    assert_equivalent(got, want)
