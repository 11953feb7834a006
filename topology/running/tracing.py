"""The plan side of a trace: what each step is, written next to the rows as ``plan.json``.

The debugger (:mod:`topology.seeing.debug`) derives root causes from each step's *kind* and its
parameters (a window's spec and output policy, a group_apply's sub-query), which each stage's
logical nodes declare (:meth:`topology.building.nodes.Node.trace_info`; a fused stage lists its
nodes as ``members``), and from the plan's edges. Rows are recorded by :mod:`actors.recorder`.

    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> p = Stream.from_events([Insert("a", 0, 1, 1), Cti(1)]).where(bool).plan()
    >>> [s["kind"] for s in plan_metadata(p)["steps"].values()]
    ['source', 'span', 'sink']
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from actors import recorder as _runtime
from actors.files import atomic_write
from topology.planning.planner import Plan

if TYPE_CHECKING:
    from topology.seeing.debug import Recording


class Trace(_runtime.TraceSettings):
    """Where and what to trace: ``Trace(path, steps=, start=, end=, where=, limit=)`` (see
    :mod:`actors.recorder`); ``Trace.open(path)`` reads a recorded trace back."""

    @staticmethod
    def open(path: str) -> Recording:
        """The recorded trace at ``path`` (:class:`topology.seeing.debug.Recording`: the
        debugger reads what the runtime wrote)."""
        from topology.seeing.debug import Recording

        return Recording.open(path)


def plan_metadata(plan: Plan) -> dict[str, Any]:
    """The steps (what their nodes say of them: kind, node type and arguments; description,
    role, inputs as ``[step, port]``), sources and sink."""
    inputs: dict[str, list[list[Any]]] = {s: [] for s in plan.stages}
    for src, edges in plan.edges.items():
        for e in edges:
            inputs[e.dst].append([src, e.port])
    steps = {}
    for step, st in plan.stages.items():
        info = st.trace_info()
        info["describe"] = st.describe
        info["variant"] = st.variant  # the fast path chosen (topology.planning.rules), or None
        info["role"] = st.role
        info["inputs"] = sorted(inputs[step], key=lambda x: x[1])
        steps[step] = info
    return {"steps": steps, "sources": list(plan.sources), "sink": plan.sink,
            "explain": plan.explain()}


def clock_of(plan: Plan) -> str:
    """``"timestamps"`` when a source of ``plan`` reads its time from timestamps or dates, so
    the debugger shows times, not ticks; else ``"ticks"`` (:attr:`Plan.clock`)."""
    return plan.clock


def write_plan(trace: _runtime.TraceSettings, plan: Plan, **extra: Any) -> str:
    """Write ``plan.json`` of ``trace`` (the trace's bounds included); returns its path."""
    os.makedirs(os.path.join(trace.path, "parts"), exist_ok=True)
    meta = plan_metadata(plan)
    meta["bounds"] = {"steps": list(trace.steps) if trace.steps is not None else None,
                      "start": trace.start, "end": trace.end,
                      "where": None if trace.where is None else repr(trace.where),
                      "limit": trace.limit}
    meta["clock"] = clock_of(plan)
    meta.update(extra)
    path = os.path.join(trace.path, "plan.json")
    text = json.dumps(meta, indent=1, default=repr)
    atomic_write(path, text.encode("utf-8"), durable=False)
    return path
