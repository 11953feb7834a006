"""Facts said by the node: every node type states what the planner, pruning and the debugger
need of it (``Node.lengths``, ``Node.reads``, ``Node.keys``, its cause rule), so a new
operator cannot silently turn the fast paths off, prune a column it reads, or have no cause.

:data:`FACTS` holds, per node type, what its operator can state over point inserts: a node
type missing from it, or one that leaves a fact at the default its operator could state,
fails here. The causes of the operators added last (late, import_ctis, scan, distinct, full
outer join) are worked out by hand below, from a trace.
"""

from __future__ import annotations

from typing import Any

import pytest

from operators.aggregates import Count, Sum
from operators.events import MAX_TIME, Cti, Insert
from topology import AdvanceTime, Stream
from topology.building import nodes
from topology.planning import rules
from topology.planning.plan import PLANNER_NODE_TYPES
from topology.seeing import debug
from topology.seeing.debug import Recording

POINTS = Stream.from_rows([], start="t", name="p")
OTHER = Stream.from_rows([], start="t", name="o")
OUT = frozenset({"a"})  # what the step's consumers read of its output


def _b(p: Any) -> Any:
    return p["b"]


def _scan(state: Any, p: Any) -> tuple[Any, list[Any]]:
    return state, [p]


#: node type -> (a stream of it over points, its lengths, what it reads of input 0 when its
#: consumers read OUT, whether it keys its input)
FACTS: dict[type[nodes.Node], tuple[Stream, int | None, frozenset[str] | None, bool]] = {
    nodes.FromEvents: (Stream.from_events([]), None, None, False),
    nodes.FromRows: (POINTS, 1, None, False),
    nodes.Published: (Stream.published("q"), None, None, False),
    nodes.Where: (POINTS.where(lambda p: p["b"] > 0), 1, frozenset({"a", "b"}), False),
    nodes.Select: (POINTS.select(_b), 1, frozenset({"b"}), False),
    nodes.AlterLifetime: (POINTS.alter_lifetime(duration=5), 5, OUT, False),
    nodes.Shift: (POINTS.shift(3), 1, OUT, False),
    nodes.ToPoints: (POINTS.to_points(), 1, OUT, False),
    nodes.ClipDuration: (POINTS.alter_lifetime(duration=9).clip_duration(4), 4, OUT, False),
    nodes.Window: (POINTS.tumbling_window(10, emit="final").aggregate(Sum("b")), 10,
                   frozenset({"b"}), False),
    nodes.Join: (POINTS.join(OTHER, on=("k", "k")), 1, None, True),
    nodes.AntiJoin: (POINTS.anti_join(OTHER, on=("k", "k")), None, None, True),
    nodes.LeftJoin: (POINTS.left_join(OTHER, on=("k", "k")), None, None, True),
    nodes.FullOuterJoin: (POINTS.full_outer_join(OTHER, on=("k", "k")), None, None, True),
    nodes.ImportCti: (POINTS.import_ctis(OTHER), 1, OUT, False),
    nodes.Late: (POINTS.late(), MAX_TIME, None, False),
    nodes.Union: (POINTS.union(OTHER), 1, OUT, False),
    nodes.GroupApply: (POINTS.group_apply("k", lambda g: g.tumbling_window(
        10, emit="final").aggregate(Sum("b"))), 10, frozenset({"k", "b"}), True),
    nodes.Scan: (POINTS.scan(_scan, 0), 1, None, False),
    nodes.Distinct: (POINTS.distinct(key="k"), None, frozenset({"a", "k"}), True),
    nodes.Detect: (POINTS.detect("A B", within=10, key="k", emit="final"), 10, None, True),
    nodes.NotFollowedBy: (POINTS.not_followed_by(OTHER, within=5, on=("k", "j")), 1,
                          frozenset({"a", "k"}), True),
}


def test_every_node_type_is_in_the_table_and_in_node_types():
    declared = {c for c in vars(nodes).values()  # (not a base node types share)
                if isinstance(c, type) and issubclass(c, nodes.Node) and c is not nodes.Node
                and not vars(c).get("shared_base")}
    assert declared - {nodes.GroupInput} == set(FACTS)
    assert set(nodes.NODE_TYPES) == declared


@pytest.mark.parametrize("node_type", list(FACTS), ids=lambda t: t.__name__)
def test_each_node_type_states_its_facts(node_type):
    stream, lengths, reads, keyed = FACTS[node_type]
    node = stream._node
    assert type(node) is node_type
    assert node.lengths() == lengths
    if node.inputs:
        assert node.reads(OUT, 0) == reads
    assert (node.keys() is not None) == keyed


def test_import_ctis_reads_nothing_of_its_leader_and_the_source_is_pruned():
    leader = Stream.from_arrow({"t": [0], "big": ["x"]}, start="t", name="leader")
    q = POINTS.import_ctis(leader)
    assert q._node.reads(OUT, 1) == frozenset()
    assert "from_rows(rows, start='t', shape='point'), reading only t  → import_ctis" in q.explain()


def test_every_kind_of_step_has_a_cause_rule():
    kinds = {t.trace_kind for t in (*nodes.NODE_TYPES, *PLANNER_NODE_TYPES)} - {"source"}
    assert sorted(kinds - set(debug.CAUSE_RULES)) == []
    assert all(callable(getattr(Recording, rule)) for rule in debug.CAUSE_RULES.values())


def test_the_fast_paths_run_after_the_new_operators():
    """Stated lengths let a keyed window run column-wise after a scan and an import_ctis."""
    per_key = POINTS.scan(_scan, 0).group_apply("k", lambda g: g.tumbling_window(10)
                                               .aggregate(Count()))
    assert "as one keyed window aggregate" in per_key.explain()
    imported = POINTS.import_ctis(OTHER).tumbling_window(10).aggregate(Count())
    assert "as a column-wise window aggregate (point input)" in imported.explain()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rules, "RULES", ())
        assert " as " not in per_key.explain().split("stages")[1]


# -- the causes of the new operators --------------------------------------------------------------
def _causes(q: Stream, path: str) -> dict[tuple[int, int], set[tuple[str, str]]]:
    q.collect(runtime="inline", trace=path)
    rec = Recording.open(path)
    final: dict[str, tuple[int, int]] = {}  # the sink's events alive at the end
    for r in rec.events(step="sink", direction="out"):
        if r["kind"] == "insert":
            final[r["id"]] = (r["start"], r["end"])
        elif r["kind"] == "retract" and r["new_end"] == r["start"]:
            del final[r["id"]]
        elif r["kind"] == "retract":
            final[r["id"]] = (r["start"], r["new_end"])
    out = {}
    for oid, life in final.items():
        cause = rec.root_cause("sink", oid)
        assert cause.incomplete == [], cause.incomplete
        out[life] = {(leaf["step"], leaf["id"]) for leaf in cause.leaves()}
    return out


def test_causes_of_import_ctis_and_scan(tmp_path):
    #   ref    r [0 ─────── ∞)            leader  Cti(5) Cti(9)
    #   import r, its leader's CTIs: the cause of r is r (never the leader's events)
    #   scan   a 2, b 6 (state: none) → points [2, 3) and [6, 7), each of its own event
    ref = Stream.from_events([Insert("r", 0, MAX_TIME, 1)], name="ref")
    leader = Stream.from_events([Insert("r", 1, 2, 9), Cti(5), Cti(9)], name="lead")
    assert _causes(ref.import_ctis(leader), str(tmp_path / "i")) == {
        (0, MAX_TIME): {("ref", "'r'")}}
    src = Stream.from_events([Insert("a", 2, 4, 1), Insert("b", 6, 9, 2), Cti(10)], name="s")
    assert _causes(src.scan(_scan, 0), str(tmp_path / "s")) == {
        (2, 3): {("s", "'a'")}, (6, 7): {("s", "'b'")}}


def test_causes_of_detect(tmp_path):
    #   a@1 b@2 x@3 a@5 b@11           pattern 'A B' within 5: [1, 3) of a@1 b@2; a@5 b@11 is
    #                                  no match (11 - 5 >= 5)
    rows = [(1, "a"), (2, "b"), (3, "x"), (5, "a"), (11, "b")]
    src = Stream.from_events([Insert(p + str(t), t, t + 1, p) for t, p in rows] + [Cti(20)],
                             name="s")
    q = src.detect("A B", {"A": lambda p, m: p == "a", "B": lambda p, m: p == "b"}, within=5)
    assert _causes(q, str(tmp_path)) == {(1, 3): {("s", "'a1'"), ("s", "'b2'")}}


def test_causes_of_an_absence(tmp_path):
    #   a p@0 q@4      b c@2      within 5: p followed (c in (0, 5)); q not: at 9, caused by q
    a = Stream.from_events([Insert("p", 0, 1, "p"), Insert("q", 4, 5, "q"), Cti(20)], name="a")
    b = Stream.from_events([Insert("c", 2, 3, "c"), Cti(20)], name="b")
    assert _causes(a.not_followed_by(b, within=5), str(tmp_path)) == {(9, 10): {("a", "'q'")}}


def test_causes_of_distinct(tmp_path):
    #   x [0 ─ 4)  x [3 ─── 7)  y [1 ─ 5)       distinct: x [0, 7) of a and b, y [1, 5) of c
    src = Stream.from_events([Insert("a", 0, 4, "x"), Insert("b", 3, 7, "x"),
                              Insert("c", 1, 5, "y"), Cti(10)], name="s")
    assert _causes(src.distinct(), str(tmp_path)) == {
        (0, 7): {("s", "'a'"), ("s", "'b'")}, (1, 5): {("s", "'c'")}}


def test_causes_of_a_full_outer_join(tmp_path):
    #   left  a [0 ─────────── 12)       right  b [5 ──────────── 20)
    #   out   (a, None) [0, 5)   (a, b) [5, 12)   (None, b) [12, 20)
    left = Stream.from_events([Insert("a", 0, 12, "a"), Cti(30)], name="l")
    right = Stream.from_events([Insert("b", 5, 20, "b"), Cti(30)], name="r")
    assert _causes(left.full_outer_join(right), str(tmp_path)) == {
        (0, 5): {("l", "'a'")}, (5, 12): {("l", "'a'"), ("r", "'b'")},
        (12, 20): {("r", "'b'")}}


def test_causes_of_the_late_stream(tmp_path):
    #   a [5, 6)  Cti(5)  b [2, 3): late, refused by the source, so the late stream's event
    #   is where its cause ends (the source's own event 0 is a, never b)
    src = Stream.from_rows([{"t": 5, "v": "a"}, {"t": 2, "v": "b"}], start="t", name="s",
                           advance=AdvanceTime(every=1))
    assert _causes(src.late(), str(tmp_path)) == {(2, 3): {("late#1", "0")}}
