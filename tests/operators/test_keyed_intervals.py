"""The keyed window aggregate over interval inserts (``intervals=True``, what the planner runs
for a window over a stream of bounded lifetimes that never retracts, e.g.
``alter_lifetime(duration=d)`` of points) against the general ``GroupApply`` of a window
operator and the reference evaluator.

An interval belongs to every window it overlaps, and a window of a key is produced only once
it starts before that key's frontier ``max(CTI, latest start + 1)``: random interval sources
(disorder, late rows dropped, count-based CTIs, with or without the final CTI past every end)
are ingested column-wise; the fast operator gets the ``Columns`` batches, the events one
Insert at a time, and the batches merged, across a snapshot/restore.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Aggregates, Avg, Count, Max, Min, Sum, TimeWeightedAverage
from operators.cht import to_cht
from operators.columns import Columns, expand
from operators.errors import OperatorError
from operators.events import MAX_TIME, Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.windows import WindowPolicy, hopping_window, make_window, tumbling_window
from operators.windows.keyed import KeyedWindowAggregate, supports
from tests.kit import PROPERTY, assert_equivalent
from tests.operators.test_keyed_window import reference_per_key, run_keyed
from tests.reference_windows import window as reference_window

UDMS = {"count": Count, "sum": lambda: Sum("v"), "max": lambda: Max("v"),
        "min": lambda: Min("v"), "avg": lambda: Avg("v"),
        "several": lambda: Aggregates(n=Count(), total=Sum("v"), top=Max("v"))}
KEYS = {"field": "k", "mod": lambda r: r["k"] % 3, "text": lambda r: f"k{r['k']}",
        "text field": "tag"}  # (a string column: coded to ints)


@st.composite
def interval_sources(draw):
    n = draw(st.integers(1, 600))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n, dtype=np.int64) // draw(st.sampled_from([1, 3, 10])) \
        - rng.integers(0, draw(st.integers(1, 40)), n)
    length = rng.integers(1, draw(st.integers(1, 60)) + 1, n)
    k = rng.integers(0, 6, n)
    cols = {"t": t, "u": t + length, "k": k, "tag": np.array([f"k{i}" for i in k.tolist()]),
            "v": rng.random(n) * draw(st.sampled_from([1.0, 1e300, -3.0]))}
    cut = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3))))
    return [{k: c[a:b] for k, c in cols.items()} for a, b in zip([0, *cut], [*cut, n])]


@PROPERTY
@given(batches=interval_sources(), size=st.integers(1, 30), hop=st.integers(1, 30),
       alignment=st.integers(-7, 7), udm=st.sampled_from(sorted(UDMS)),
       key=st.sampled_from(sorted([*KEYS, "one group"])),
       output=st.sampled_from(["window", "point_end"]), delay=st.integers(0, 30),
       restore=st.booleans(), emit=st.sampled_from(["speculative", "final"]),
       ended=st.booleans())
def test_keyed_intervals_equal_the_general_window(batches, size, hop, alignment, udm, key,
                                                  output, delay, restore, emit, ended):
    spec = hopping_window(size, hop, alignment)
    src = Ingress(start="t", end="u", shape="interval",
                  advance=AdvanceTime(every=256, delay=delay))
    stream = [m for b in batches for m in src.push(b)] + (src.end() if ended else [])
    assert any(type(m) is Columns and not m.points for m in stream)
    events = list(expand(stream))
    if key == "one group":  # what the planner runs for stream.window(...).aggregate(...)
        expected = make_window(spec, UDMS[udm](), output=output).process(events)
        assert_equivalent(expected, reference_window(events, spec, UDMS[udm](), output=output))

        def fast():
            return KeyedWindowAggregate(lambda p: 0, spec, UDMS[udm](),
                                        WindowPolicy(output=output, emit=emit), keyed=False,
                                        intervals=True, name="w")
    else:
        expected = GroupApply(KEYS[key], lambda: make_window(spec, UDMS[udm](), output=output)
                              ).process(events)
        assert_equivalent(expected, reference_per_key(events, KEYS[key], spec, UDMS[udm],
                                                      output))

        def fast():
            return KeyedWindowAggregate(KEYS[key], spec, UDMS[udm](),
                                        WindowPolicy(output=output, emit=emit),
                                        intervals=True, name="kw")
    # column batches, events one by one, and column batches several at a time (merged)
    for feed, size in ((stream, 1), (events, 1), (stream, 4)):
        out = run_keyed(fast, feed, size, restore)
        if emit == "final":
            assert not any(type(m) is Retract for m in out)
        assert_equivalent(out, expected)


def test_a_window_waits_for_its_keys_frontier():
    #   key a: [0 ─────────── 25)          key b: ·12       tumbling_window(10), Count, CTI 5
    #   a's frontier is 5 (the CTI): only its window [0, 10) is produced; b's frontier 13
    #   does not produce a's window [10, 20); a CTI at 30 produces them all
    op = KeyedWindowAggregate("k", tumbling_window(10), Count(), intervals=True)
    out = op.process([Insert(1, 0, 25, {"k": "a"}), Insert(2, 12, 13, {"k": "b"}), Cti(5)])
    assert to_cht(out) == [(0, 10, ("a", 1)), (10, 20, ("b", 1))]
    out += op.process([Cti(30)])
    assert to_cht(out) == [(0, 10, ("a", 1)), (10, 20, ("a", 1)), (10, 20, ("b", 1)),
                           (20, 30, ("a", 1))]


@pytest.mark.parametrize("bad", [Insert(9, 10, MAX_TIME, {"k": "a"}),
                                 Retract(1, 10, 14, 12, {"k": "a"})], ids=["edge", "retract"])
def test_what_the_interval_path_cannot_take_fails_loudly(bad):
    op = KeyedWindowAggregate("k", tumbling_window(5), Count(), intervals=True, name="kw")
    op.process([Insert(1, 10, 14, {"k": "a"}), Cti(6)])
    with pytest.raises(OperatorError, match=r"'kw'.*this is a bug"):
        op.process([bad])


WINDOW = WindowPolicy(output="window")


def test_what_the_planner_may_run_over_intervals():
    assert supports(tumbling_window(5), Sum("v"), "aggregate", WINDOW, "raise", intervals=True)
    assert not supports(tumbling_window(5), TimeWeightedAverage("v"), "aggregate", WINDOW,
                        "raise", intervals=True)
    assert not supports(tumbling_window(5), len, "aggregate", WINDOW, "raise", intervals=True)
    with pytest.raises(ValueError, match="incremental, time-insensitive"):
        KeyedWindowAggregate("k", tumbling_window(5), len, intervals=True)


# -- end to end ---------------------------------------------------------------------------------
N = 20_000
_RNG = np.random.default_rng(5)
COLS = {"t": np.arange(N, dtype=np.int64) * 5 + _RNG.integers(0, 40, N),
        "k": _RNG.integers(0, 30, N), "v": _RNG.random(N)}
COLS["tag"] = np.array([f"m{k % 11}" for k in COLS["k"].tolist()], dtype=object)
QUERIES = {
    "hopping per key": lambda s: s.alter_lifetime(duration=70).group_apply(
        lambda p: p["k"], lambda g: g.hopping_window(300, 100).aggregate(
            Aggregates(n=Count(), total=Sum("v"), top=Max("v")))),
    "tumbling, final": lambda s: s.where(lambda p: p["v"] > 0.2).alter_lifetime(
        start=lambda t: t - t % 7, duration=33).tumbling_window(50, emit="final").aggregate(
            Avg("v")),
    "string keys": lambda s: s.to_points().group_apply(
        lambda p: p["tag"], lambda g: g.hopping_window(400, 100).aggregate(Sum("v"))),
    "max of pairs, points": lambda s: s.to_points().group_apply(
        lambda p: p["k"] % 3, lambda g: g.tumbling_window(150).aggregate(
            Max(lambda p: (p["k"] % 2, p["v"])))),
    "min, one group": lambda s: s.alter_lifetime(duration=40).hopping_window(200, 50)
        .aggregate(Min("v")),
    "partitions": lambda s: s.clip_duration(1).alter_lifetime(duration=250).group_apply(
        lambda p: p["k"] % 7, lambda g: g.tumbling_window(200).aggregate(Count()),
        partitions=2),
}


@pytest.mark.slow
@pytest.mark.parametrize("query", sorted(QUERIES))
def test_the_planner_runs_windows_over_intervals_column_wise(runtime, query):
    from topology import Stream

    q = QUERIES[query]
    adv = AdvanceTime(every=1_000, delay=40)
    fast = q(Stream.from_arrow(COLS, start="t", advance=adv, batch_rows=3_000))
    assert "interval input" in fast.explain() or "all groups at once" in fast.explain()
    got = fast.collect(runtime)
    # the same events as messages: the general window operators
    src = Ingress(start="t", advance=adv)
    events = src.push(COLS) + src.end()
    general = q(Stream.from_events(list(expand(events))))
    assert "all groups at once" not in general.explain()
    assert "column-wise window" not in general.explain()
    assert len(to_cht(got)) > 100
    assert_equivalent(got, general.collect("inline"))


def test_the_planner_keeps_the_general_path_where_it_must():
    from topology import Stream

    def keyed(q):
        return "as one keyed window aggregate" in q.explain() or "column-wise window" in \
            q.explain()

    points = Stream.from_rows([], start="t")
    window = lambda s: s.tumbling_window(10).aggregate(Count())  # noqa: E731
    assert keyed(window(points.alter_lifetime(duration=600)))
    assert not keyed(window(points.alter_lifetime(duration=700)))  # too many windows an event
    assert not keyed(window(points.alter_lifetime(duration=lambda s, e: 5)))  # unbounded
    assert not keyed(window(Stream.from_rows([], start="t", end="u", shape="interval")))
    assert keyed(window(Stream.from_rows([], start="t", end="u", shape="interval")
                        .clip_duration(30)))
    assert not keyed(points.alter_lifetime(duration=30).tumbling_window(10)
                     .aggregate(TimeWeightedAverage("v")))
