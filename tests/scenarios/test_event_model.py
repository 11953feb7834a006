"""The seeds' own examples of the event model, as timelines.

Paper (001) Tables I and II: a physical stream with an edge event closed by two retractions,
and its CHT. Event-model page (003): the power meter as interval, point and edge events.
"""

from __future__ import annotations

import pytest

from operators.cht import InvalidStream, to_cht, validate
from operators.events import MAX_TIME, Cti, Insert, Retract, edge_end, edge_start, point
from operators.where import Where
from tests.kit import assert_equivalent, run_operator

INF = MAX_TIME


def test_paper_table_2_gives_table_1():
    #  E0  [1 ─────────────────── ∞)   inserted open
    #      [1 ──────────── 10)         retracted to 10
    #      [1 ─── 5)                   retracted to 5
    #  E1        [4 ──────── 9)
    physical = [
        Insert("E0", 1, INF, "P1"),
        Retract("E0", 1, INF, 10, "P1"),
        Retract("E0", 1, 10, 5, "P1"),
        Insert("E1", 4, 9, "P2"),
    ]
    validate(physical)
    assert to_cht(physical) == [(1, 5, "P1"), (4, 9, "P2")]  # Table I


def test_sync_times_of_table_2():
    # the sync time is the earliest time a message modifies
    assert Insert("E0", 1, INF, "P1").sync_time == 1
    assert Retract("E0", 1, INF, 10, "P1").sync_time == 10
    assert Retract("E0", 1, 10, 5, "P1").sync_time == 5


def test_cti_allows_retraction_of_an_earlier_event_whose_ends_are_ahead():
    #  E0 [1 ──────── ∞)      Cti(8): E0 may still be retracted to 10 (both ends ≥ 8) ...
    #           8 ▲           ... but not to 5 (that changes time 5 < 8)
    ok = [Insert("E0", 1, INF, "P1"), Cti(8), Retract("E0", 1, INF, 10, "P1")]
    validate(ok)
    with pytest.raises(InvalidStream, match="behind the CTI 8"):
        validate(ok + [Retract("E0", 1, 10, 5, "P1")])


def test_power_meter_interval_point_and_edge_shapes_agree():
    #  003's power meter: consumption 100, 200, 100 over [33.317, 09.270, 22.255, 04.987)
    #  as intervals:     [t0 ── t1)[t1 ── t2)[t2 ── t3)
    #  as edges:         start edges closed by end edges give the same CHT
    t0, t1, t2, t3 = 33_317, 69_270, 82_255, 124_987
    intervals = [Insert(0, t0, t1, 100), Insert(1, t1, t2, 200), Insert(2, t2, t3, 100)]
    edges = [
        edge_start("a", t0, 100), edge_end("a", t0, t1, 100),
        edge_start("b", t1, 200), edge_end("b", t1, t2, 200),
        edge_start("c", t2, 100), edge_end("c", t2, t3, 100),
    ]
    validate(edges)
    assert_equivalent(edges, intervals)
    # as points each reading lasts one tick
    points = [point(i, t, v) for i, (t, v) in enumerate([(t0, 100), (t1, 200), (t2, 100)])]
    assert to_cht(points) == [(t0, t0 + 1, 100), (t1, t1 + 1, 200), (t2, t2 + 1, 100)]


def test_edge_value_c_still_open():
    #  003's analog signal: a [t0, t1), b [t1, t3), c [t3, ∞) not closed yet
    stream = [
        edge_start("a", 0, "a"), edge_end("a", 0, 1, "a"),
        edge_start("b", 1, "b"), edge_end("b", 1, 3, "b"),
        edge_start("c", 3, "c"),
    ]
    assert to_cht(stream) == [(0, 1, "a"), (1, 3, "b"), (3, INF, "c")]
    # a filter keeps the open edge open, and closes it when the end edge arrives
    out = run_operator(lambda: Where(lambda p: p != "a"), stream + [edge_end("c", 3, 7, "c")])
    assert to_cht(out) == [(1, 3, "b"), (3, 7, "c")]


def test_unordered_edges_of_003_have_the_same_meaning_as_ordered_ones():
    #  edges in arrival order 1, 10, 3, 6, 5, 20 versus fully ordered 1, 3, 5, 6, 10, 20
    unordered = [
        edge_start("a", 1, "a"), edge_end("a", 1, 10, "a"),
        edge_start("b", 3, "b"), edge_end("b", 3, 6, "b"),
        edge_start("c", 5, "c"), edge_end("c", 5, 20, "c"),
    ]
    ordered = [
        edge_start("a", 1, "a"), edge_start("b", 3, "b"), edge_start("c", 5, "c"),
        edge_end("b", 3, 6, "b"), edge_end("a", 1, 10, "a"), edge_end("c", 5, 20, "c"),
    ]
    assert_equivalent(unordered, ordered)
