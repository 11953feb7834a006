"""The plan keeps its nodes: every stage holds the logical nodes it was planned from, and what
a trace says of a step (its kind and arguments in ``plan.json``, which the debugger and the
timeline read) is what the node declares -- a node type needs no table anywhere else.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from operators.aggregates import Count
from operators.events import Cti, Insert
from operators.where import Where as WhereOperator
from topology import Stream
from topology.building import nodes as n
from topology.planning import planner
from topology.planning.plan import PLANNER_NODE_TYPES, MergePartitions, Sink
from topology.running.tracing import plan_metadata
from topology.seeing.debug import Recording


def _node_types(cls: type[n.Node] = n.Node) -> list[type[n.Node]]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_node_types(sub)]
    return out


def test_every_node_type_declares_its_trace_kind_and_has_a_builder():
    types = _node_types()
    assert set(n.NODE_TYPES) | set(PLANNER_NODE_TYPES) <= set(types)
    for t in types:
        if t.__module__ not in (n.__name__, "topology.planning.plan") or vars(t).get(
                "shared_base"):
            continue  # (another test's node type, or a base node types share)
        assert isinstance(vars(t).get("trace_kind"), str), f"{t.__name__} declares no trace_kind"
        assert t in planner.BUILDERS, f"the planner has no builder for {t.__name__}"


def test_a_node_without_a_declared_trace_kind_cannot_be_traced():
    @dataclass(frozen=True, eq=False, kw_only=True)
    class Undeclared(n.Node):
        verb: ClassVar[str] = "undeclared"

    node = Undeclared(inputs=())
    with pytest.raises(AttributeError, match="trace_kind"):
        node.trace_info()


def _plan_steps(q: Stream, **kw: Any) -> dict[str, dict[str, Any]]:
    return plan_metadata(q.plan(**kw))["steps"]


def test_every_stage_holds_the_nodes_it_runs():
    src = Stream.from_events([Insert(1, 0, 1, {"k": 1}), Cti(1)])
    q = src.where(bool).shift(1).group_apply(lambda p: p["k"], lambda g: g.where(bool)
                                             .snapshot_window().aggregate(Count()), partitions=2)
    p = q.plan()
    for st in p.stages.values():
        assert st.nodes and st.node is st.nodes[0]
    assert isinstance(p.stages["where#1"].node, n.Where)
    assert isinstance(p.stages["sink"].node, Sink)
    group = p.stages["group_apply#3"].node
    assert isinstance(group, MergePartitions) and group.inputs[0] is q._node
    assert p.stages["group_apply#3[1]"].node is q._node
    assert p.stages["from_events#0"].source is src._node
    fused = q.plan(fuse=True).stages["from_events#0+where#1+shift#2"]
    assert [type(x) for x in fused.nodes] == [n.FromEvents, n.Where, n.Shift]
    assert fused.source is src._node and fused.role == "source"
    # what plan.json says comes from those nodes
    steps = _plan_steps(q)
    assert steps["where#1"] == {**steps["where#1"], "kind": "span", "node": "Where",
                                "keeps_time": True, "drops": True}
    assert steps["shift#2"]["keeps_time"] is False
    assert steps["group_apply#3"]["kind"] == "union"  # the merge of the partitions
    sub = steps["group_apply#3[0]"]["sub"]
    assert sub["kind"] == "chain" and [m["node"] for m in sub["members"]] == ["Where", "Window"]
    assert sub["members"][1]["spec"] == {"kind": "snapshot"}
    fused_info = _plan_steps(q, fuse=True)["from_events#0+where#1+shift#2"]
    assert fused_info["kind"] == "source"
    assert [m["node"] for m in fused_info["members"]] == ["FromEvents", "Where", "Shift"]


@dataclass(frozen=True, eq=False, kw_only=True)
class KeepPositive(n.Node):
    """A node type a user adds: a filter. It declares its trace kind; nothing else does."""

    verb: ClassVar[str] = "keep_positive"
    stateless: ClassVar[bool] = True
    trace_kind: ClassVar[str] = "span"
    keeps_time: ClassVar[bool] = True
    drops: ClassVar[bool] = True


def _b_keep_positive(node: KeepPositive, step: str) -> Any:
    return functools.partial(WhereOperator, lambda p: p > 0, name=step)


def test_a_new_node_type_is_traced_by_what_it_declares(tmp_path, monkeypatch):
    monkeypatch.setitem(planner.BUILDERS, KeepPositive, _b_keep_positive)
    src = Stream.from_events([Insert("a", 0, 2, 1), Insert("b", 1, 3, -1),
                              Insert("c", 4, 5, 2), Cti(10)])
    q = Stream(KeepPositive(inputs=(src._node,))).tumbling_window(3).aggregate(Count())
    path = str(tmp_path)
    q.collect(runtime="inline", trace=path)
    with open(os.path.join(path, "plan.json"), encoding="utf-8") as f:
        steps = json.load(f)["steps"]
    assert steps["keep_positive#1"]["kind"] == "span"
    assert steps["keep_positive#1"]["node"] == "KeepPositive"
    rec = Recording.open(path)
    causes = {(r["start"], r["end"]): {leaf["id"] for leaf in rec.root_cause("sink", r["id"])
                                       .leaves()}
              for r in rec.events(step="sink", direction="out", kind="insert")}
    assert causes == {(0, 3): {"'a'"}, (3, 6): {"'c'"}}  # b was dropped before the window


def test_a_trace_written_before_the_nodes_is_still_read(tmp_path):
    """plan.json from before (processor class names, no ``node``): kinds, specs and output
    policies are what the debugger reads, and they kept their names."""
    evs = [Insert(i, t, t + 2, i) for i, t in enumerate([0, 1, 4, 6])] + [Cti(20)]
    path = str(tmp_path)
    (Stream.from_events(evs).where(lambda p: True).hopping_window(4, 2, output="point_end")
     .aggregate(Count())).collect(runtime="inline", trace=path)
    rec = Recording.open(path)
    now = {(r["start"], r["end"]): {x["id"] for x in rec.root_cause("sink", r["id"]).leaves()}
           for r in rec.events(step="sink", direction="out", kind="insert")}
    old = {"from_events#0": {"kind": "source", "class": "EventsSource"},
           "where#1": {"kind": "span", "class": "Where"},
           "hopping.aggregate#2": {"kind": "window", "class": "HoppingWindowOperator",
                                   "spec": {"kind": "hopping", "size": 4, "hop": 2,
                                            "alignment": 0},
                                   "output": "point_end", "keyed": False},
           "sink": {"kind": "sink", "class": "Publish"}}
    with open(os.path.join(path, "plan.json"), encoding="utf-8") as f:
        meta = json.load(f)
    for step, info in meta["steps"].items():
        meta["steps"][step] = {**old[step], "describe": info["describe"], "role": info["role"],
                               "inputs": info["inputs"]}
    with open(os.path.join(path, "plan.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    before = Recording.open(path)
    assert {(r["start"], r["end"]): {x["id"] for x in before.root_cause("sink", r["id"])
                                     .leaves()}
            for r in before.events(step="sink", direction="out", kind="insert")} == now
    assert now[(3, 4)] == {"0", "1"}  # window [0, 4): the events overlapping it


def test_a_keep_row_says_its_window_is_a_guess(tmp_path):
    #   tumbling_window(5), output="keep": a UDO may stamp its rows anywhere after its window's
    #   start, so the row [6, 7) is explained by the window holding its start, as a guess
    from operators.udm import TimeSensitiveOperator

    class Stamp(TimeSensitiveOperator):
        def compute(self, events, window):
            return [(s, e, 1) for s, e, _ in events]

    path = str(tmp_path)
    (Stream.from_events([Insert("a", 6, 7, 1), Cti(20)]).tumbling_window(5, output="keep")
     .apply(Stamp())).collect(runtime="inline", trace=path)
    rec = Recording.open(path)
    (row,) = rec.events(step="sink", direction="out", kind="insert")
    cause = rec.root_cause("sink", row["id"])
    assert {x["id"] for x in cause.leaves()} == {"'a'"}
    assert not cause.complete and "does not say which window" in cause.incomplete[0]
