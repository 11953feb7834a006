"""The builder and the planner, without Ray: immutability, step ids, explain, fusion,
partitioning, sub-queries, and the errors a query writer sees."""

from __future__ import annotations

import pickle

import pytest

from operators.aggregates import Count
from operators.cht import to_cht
from operators.events import Cti, Insert, Retract
from operators.ingress import AdvanceTime
from tests.kit import INF, assert_equivalent
from topology import Stream
from topology.planning.dag import DagProcessor
from topology.running.query import Query

EVENTS = [Insert(f"e{i}", i, i + 3, i) for i in range(12)] + [Cti(15)]


def test_streams_are_immutable_and_reusable():
    base = Stream.from_events(EVENTS)
    even = base.where(lambda p: p % 2 == 0)
    odd = base.where(lambda p: p % 2 == 1)
    with pytest.raises(AttributeError, match="immutable"):
        base._node = None
    assert len(to_cht(even.collect(runtime="inline"))) == 6
    assert len(to_cht(odd.collect(runtime="inline"))) == 6
    assert len(to_cht(base.collect(runtime="inline"))) == 12


def test_step_ids_are_stable_readable_and_unique():
    q = (Stream.from_events(EVENTS).where(bool).tumbling_window(5).aggregate(Count())
         .join(Stream.from_events(EVENTS).select(str, name="label"), on=None))
    first, second = list(q.plan().stages), list(q.plan().stages)
    assert first == second == ["from_events#0", "where#1", "tumbling.aggregate#2",
                               "from_events#3", "label", "join#5", "sink"]
    with pytest.raises(ValueError, match="unique name"):
        Stream.from_events(EVENTS).where(bool, name="x").select(str, name="x").plan()


def test_explain_shows_the_tree_and_the_stages():
    s = Stream.from_events(EVENTS)
    text = s.where(lambda p: p > 2).union(s.shift(4)).explain()
    assert text.splitlines()[:5] == [
        "sink",
        "└── union#3  union(2 inputs)",
        "    ├── where#1  where(<lambda>) [column-wise]",
        "    │   └── from_events#0  from_events(13 messages)",
        "    └── shift#2  shift(4)",
    ]
    assert "(shared, see above)" in text  # the source feeds both branches: one stage
    assert "stages (5):" in text and "from_events#0                from_events(13 messages)  → " \
        "where#1:0, shift#2:0" in text


def test_explain_keeps_a_group_apply_joined_to_its_input_past_its_sub_query():
    """Issue 41 item 14: the sub-query hung between a group_apply and its input with no line
    through it, so the input (a from_rows source) read as part of the group's subtree."""
    src = Stream.from_rows([{"t": 0, "k": 1}], start="t", name="main")
    ref = Stream.from_rows([{"t": 0, "k": 1}], start="t", name="ref")
    q = src.group_apply("k", lambda g: g.union(g.shift(1))).union(ref)
    assert q.explain(stages=False).splitlines() == [
        "sink",
        "└── union#3  union(2 inputs)",
        "    ├── group_apply#1  group_apply('k') key [column-wise]",
        "    │   │   per group:",
        "    │   │   └── union#2  union(2 inputs)",
        "    │   │       ├── group#0  group",
        "    │   │       └── shift#1  shift(1)",
        "    │   │           └── group#0 (shared, see above)",
        "    │   └── main  from_rows(1 rows, start='t', shape='point')",
        "    └── ref  from_rows(1 rows, start='t', shape='point')",
    ]
    # a sub-query that reads another source (refused when planned) is drawn the same way
    joined = src.group_apply("k", lambda g: g.join(ref, on=("k", "k")))
    assert joined.explain(stages=False).splitlines()[2:] == [
        "    │   per group:",
        "    │   └── join#2  join(on=('k', 'k'))",
        "    │       ├── group#0  group",
        "    │       └── ref  from_rows(1 rows, start='t', shape='point')",
        "    └── main  from_rows(1 rows, start='t', shape='point')",
    ]


def test_fusion_merges_stateless_neighbours_only():
    q = (Stream.from_events(EVENTS).where(lambda p: p > 1).select(lambda p: p * 2).shift(1)
         .alter_lifetime(duration=2).to_points().clip_duration(1))
    assert list(q.plan(fuse=True).stages) == [
        "from_events#0+where#1+select#2+shift#3", "alter_lifetime#4",
        "to_points#5+clip_duration#6", "sink"]
    assert_equivalent(q.collect(runtime="inline", fuse=True), q.collect(runtime="inline"))


def test_a_fan_out_is_not_fused():
    s = Stream.from_events(EVENTS).where(lambda p: p > 1)
    q = s.select(lambda p: -p).union(s.shift(2))
    # where#1 joins its source, but neither of the two steps it feeds joins it
    assert list(q.plan(fuse=True).stages) == [
        "from_events#0+where#1", "select#2", "shift#3", "union#4", "sink"]


def test_partitioned_group_apply_plans_n_stages_and_a_merge():
    q = Stream.from_events(EVENTS).group_apply(lambda p: p % 5, lambda g: g.shift(1),
                                               partitions=3)
    p = q.plan()
    assert [s for s in p.stages if s.startswith("group_apply#1")] == [
        "group_apply#1[0]", "group_apply#1[1]", "group_apply#1[2]", "group_apply#1"]
    assert {e.index for e in p.edges["from_events#0"]} == {0, 1, 2}
    assert_equivalent(q.collect(runtime="inline"),
                      [(s + 1, e + 1, (p % 5, p)) for s, e, p in to_cht(EVENTS)])


def test_group_apply_sub_query_with_several_inputs_runs_as_a_dag():
    #   per key: the group's events, plus the same events shifted by 100
    q = Stream.from_events(EVENTS).group_apply(
        lambda p: p % 2, lambda g: g.union(g.shift(100)))
    rows = to_cht(q.collect(runtime="inline"))
    assert len(rows) == 24
    assert sorted(r for r in rows if r[0] >= 100) == sorted(
        (s + 100, e + 100, (p % 2, p)) for s, e, p in to_cht(EVENTS))
    sub = q.plan().stages["group_apply#1"].factory().factory()
    assert isinstance(sub, DagProcessor)


def test_group_apply_sub_query_may_not_read_another_source():
    other = Stream.from_events(EVENTS)
    with pytest.raises(ValueError, match="may only read the group"):
        Stream.from_events(EVENTS).group_apply(lambda p: p, lambda g: g.union(other)).plan()


def test_from_rows_checks_its_configuration_where_it_is_written():
    with pytest.raises(ValueError, match="needs end="):
        Stream.from_rows([], start="t", shape="interval")
    rows = [{"t": 1, "id": "a"}, {"t": 5, "id": "b"}, {"t": 3, "id": "c"}]
    out = Stream.from_rows(rows, start="t", id="id", advance=AdvanceTime(every=1)).collect(
        runtime="inline")
    # c starts at 3, behind Cti(5): dropped by the default policy
    assert [(s, e, p["id"]) for s, e, p in to_cht(out)] == [(1, 2, "a"), (5, 6, "b")]


def test_from_events_sends_malformed_messages_to_the_dead_letters():
    bad = [Insert("a", 5, 9), Cti(6), Insert("b", 1, 2), Retract("zz", 0, 3, 1), Cti(10)]
    out = Stream.from_events(bad).collect(runtime="inline")
    assert out == [Insert("a", 5, 9), Cti(6), Cti(10)]


def test_inline_runtime_cannot_read_a_published_query():
    with pytest.raises(ValueError, match="cannot run inline"):
        Stream.published("elsewhere").collect(runtime="inline")


def test_unknown_runtime_and_bad_partitions_are_refused():
    s = Stream.from_events(EVENTS)
    with pytest.raises(ValueError, match="runtime='spark'"):
        s.collect(runtime="spark")
    with pytest.raises(ValueError, match="partitions"):
        s.group_apply(lambda p: p, lambda g: g, partitions=0)
    with pytest.raises(TypeError, match="must return a Stream"):
        s.group_apply(lambda p: p, lambda g: None)
    with pytest.raises(TypeError, match="expected a Stream"):
        s.union([1, 2])


def test_windows_and_joins_build_from_the_builder():
    left = Stream.from_events([Insert("l", 0, INF, {"k": 1}), Cti(30)])
    right = Stream.from_events([Insert("r", 5, 12, {"k": 1}), Cti(30)])
    q = left.join(right, on=("k", "k"), select=lambda a, b: "both")
    assert to_cht(q.collect(runtime="inline")) == [(5, 12, "both")]
    counts = Stream.from_events(EVENTS).hopping_window(6, 3).aggregate(Count())
    assert to_cht(counts.collect(runtime="inline"))[:2] == [(-3, 3, 3), (0, 6, 6)]


def test_query_handles_refuse_to_be_pickled():
    q = Query("q", {})
    with pytest.raises(TypeError, match="attach"):
        pickle.dumps(q)
