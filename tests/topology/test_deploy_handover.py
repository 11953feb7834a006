"""The hand-over from the driver to the actors (issue 40, item 3): each actor is told its
stage by a frozen :class:`~actors.stage_config.StageConfig` built from the plan, and neither
``deploy`` nor ``collect`` changes the plan it is given (a plan can be explained, collected
and deployed again, and means the same each time)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from actors import checkpoint as ck
from actors.config import ShellConfig
from actors.stage_config import StageCheckpoint, StageConfig
from operators.events import Cti, Insert, Message
from operators.publish import Publish
from topology import Stream
from topology.planning.plan import Plan
from topology.running.deploy import collect_plan, deploy_plan, stage_config, with_history


def _plan() -> Plan:
    #   a [1, 5)  b [2, 3)  c [4, 9)   where v > 1: b and c go on   Cti(9)
    events: list[Message] = [Insert("a", 1, 5, 1), Insert("b", 2, 3, 2), Insert("c", 4, 9, 3),
                             Cti(9)]
    left = Stream.from_events(events).where(lambda v: v > 1)
    right = Stream.from_events(events).select(lambda v: v * 10)
    return left.union(right).plan()


def _shape(plan: Plan) -> Any:
    """What a run could change of ``plan``: its containers and stages, by identity and value."""
    return (id(plan.stages), id(plan.edges), list(plan.stages), plan.sink, list(plan.sources),
            {s: (id(st), st.factory, st.describe, st.nodes, st.n_inputs, st.role)
             for s, st in plan.stages.items()},
            {s: (id(es), list(es)) for s, es in plan.edges.items()})


def _payloads(out: Any) -> list[Any]:
    return sorted(m.payload for m in out if isinstance(m, Insert))


def test_with_history_makes_a_new_plan_and_leaves_the_old_one() -> None:
    plan = _plan()
    before = _shape(plan)
    kept = with_history(plan)
    assert _shape(plan) == before
    proc = kept.stages[kept.sink].factory()
    assert isinstance(proc, Publish) and proc.history
    old = plan.stages[plan.sink].factory()
    assert isinstance(old, Publish) and not old.history
    # every other stage is the same object: only the sink was replaced
    assert [s for s in plan.stages if kept.stages[s] is not plan.stages[s]] == [plan.sink]


def test_each_stage_is_told_its_inputs_edges_and_checkpoint() -> None:
    plan = _plan()
    handles = {s: f"actor of {s}" for s in plan.stages}
    settings = ShellConfig(batch_size=7)
    union = next(s for s in plan.stages if s.startswith("union"))
    cfg = stage_config(plan, union, handles, settings, {"query": "q"})
    assert isinstance(cfg, StageConfig)
    assert (cfg.step, cfg.n_in, cfg.settings, cfg.checkpoint, cfg.restore) == \
        (union, 2, settings, None, None)
    assert [(e.dst, e.port) for e in cfg.edges] == [(plan.sink, 0)]
    assert dict(cfg.handles) == {plan.sink: f"actor of {plan.sink}"}
    assert dict(cfg.info) == {}  # only the sink is told of its query

    sink = stage_config(plan, plan.sink, handles, settings, {"query": "q"}, ("/ckpt", "q"), 3)
    assert dict(sink.info) == {"query": "q"} and sink.edges == []
    assert sink.checkpoint == StageCheckpoint("/ckpt", "q", sink=True)
    assert sink.restore == ck.stage_path("/ckpt", "q", 3, plan.sink)  # epoch 3's file
    with pytest.raises(dataclasses.FrozenInstanceError):
        sink.n_in = 3  # type: ignore[misc]


def test_a_stage_config_refuses_what_no_actor_could_host() -> None:
    from topology.planning.routing import OutEdge, Router

    def make() -> Publish:
        return Publish("sink")

    with pytest.raises(ValueError, match="n_in=0"):
        StageConfig(step="s", factory=make, n_in=0)
    with pytest.raises(ValueError, match="no actor handle for the out-edge"):
        StageConfig(step="s", factory=make, router=Router([OutEdge("sink", 0)]))
    with pytest.raises(TypeError, match="factory"):
        StageConfig(step="s", factory="Publish")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="restore"):
        StageConfig(step="s", factory=make, restore="/ckpt/1/s.pkl")


@pytest.mark.ray
def test_deploy_and_collect_leave_the_plan_as_it_was(ray_session) -> None:
    plan = _plan()
    before = _shape(plan)
    out = collect_plan(plan)
    assert _shape(plan) == before
    q = deploy_plan(plan, "handover-unchanged", history=True, detached=False)
    try:
        assert q.wait(60) is True
        assert _shape(plan) == before
        # the deployed sink kept its history: every final row, as the collected output
        assert sorted(r[2] for r in q.snapshot()) == _payloads(out)
    finally:
        q.stop()
    assert _payloads(collect_plan(plan)) == _payloads(out)  # the plan runs again, as it did
