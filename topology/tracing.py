"""The plan side of a trace: what each step is, written next to the rows as ``plan.json``.

The debugger (:mod:`topology.debug`) derives root causes from each step's *kind* and its
parameters (a window's spec and output policy, a group_apply's sub-query), read here from the
stages' factories, and from the plan's edges. Rows are recorded by :mod:`actors.recorder`.

    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> p = Stream.from_events([Insert("a", 0, 1, 1), Cti(1)]).where(bool).plan()
    >>> [s["kind"] for s in plan_metadata(p)["steps"].values()]
    ['source', 'span', 'sink']
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from actors import recorder as _runtime
from actors.files import atomic_write

from .debug import Recording
from .planner import Plan


class Trace(_runtime.TraceSettings):
    """Where and what to trace: ``Trace(path, steps=, start=, end=, where=, limit=)`` (see
    :mod:`actors.recorder`); ``Trace.open(path)`` reads a recorded trace back."""

    @staticmethod
    def open(path: str) -> Recording:
        """The recorded trace at ``path`` (:class:`topology.debug.Recording`)."""
        return Recording.open(path)


#: Processor classes whose output event keeps its input's id and lifetime mapping.
_SPAN = {"Where", "Select", "Shift", "ToPoints", "ClipDuration", "ColumnWhere",
         "ColumnSelect", "Passthrough"}
_KINDS = {"EventsSource": "source", "RowsSource": "source", "Publish": "sink",
          "AlterLifetime": "alter_lifetime", "Union": "union",
          "Join": "join", "AntiJoin": "anti_join", "LeftJoin": "left_join",
          "GroupApply": "group_apply", "KeyedWindowAggregate": "window",
          "CountWindowOperator": "window", "make_window": "window"}


def _spec(spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": getattr(spec, "kind", type(spec).__name__)}
    if dataclasses.is_dataclass(spec):
        for f in dataclasses.fields(spec):
            v = getattr(spec, f.name)
            if isinstance(v, (int, str, float, bool)) or v is None:
                out[f.name] = v
    return out


def factory_kind(factory: Any) -> dict[str, Any]:
    """The kind of the processor ``factory`` builds, with what the debugger needs of it."""
    func = getattr(factory, "func", factory)
    args = getattr(factory, "args", ())
    kw = getattr(factory, "keywords", {}) or {}
    name = getattr(func, "__name__", type(func).__name__)
    if name == "_chain":  # fused stateless steps, or a linear group_apply sub-query
        members = [factory_kind(f) for f in args[0]]
        if len(members) == 1:
            return members[0]
        if all(m["kind"] == "span" for m in members):
            return {"kind": "span", "class": "Chain", "members": members}
        return {"kind": "chain", "members": members}
    if name in _SPAN:
        return {"kind": "span", "class": name}
    kind = _KINDS.get(name, "other")
    info: dict[str, Any] = {"kind": kind, "class": name}
    if kind == "window":
        spec = args[1] if name == "KeyedWindowAggregate" else args[0]
        info["spec"] = _spec(spec)
        info["output"] = kw["policy"].output  # a WindowPolicy, for the spec (topology.nodes)
        info["keyed"] = name == "KeyedWindowAggregate" and kw.get("keyed", True)
    elif kind in ("join", "left_join"):
        info["pairs"] = kw.get("select") is None  # payloads are (left, right)
    elif kind == "group_apply" and len(args) > 1:
        info["sub"] = factory_kind(args[1])
    elif name == "DagProcessor":
        info["kind"] = "dag"
    return info


def plan_metadata(plan: Plan) -> dict[str, Any]:
    """The steps (kind, description, inputs as ``[step, port]``), sources and sink."""
    inputs: dict[str, list[list[Any]]] = {s: [] for s in plan.stages}
    for src, edges in plan.edges.items():
        for e in edges:
            inputs[e.dst].append([src, e.port])
    steps = {}
    for step, st in plan.stages.items():
        info = factory_kind(st.factory)
        info["describe"] = st.describe
        info["role"] = st.role
        info["inputs"] = sorted(inputs[step], key=lambda x: x[1])
        steps[step] = info
    return {"steps": steps, "sources": list(plan.sources), "sink": plan.sink,
            "explain": plan.explain()}


def clock_of(plan: Plan) -> str:
    """``"timestamps"`` when a source of ``plan`` reads its time from timestamps or dates, so
    the debugger shows times, not ticks; else ``"ticks"`` (:attr:`Plan.clock`)."""
    return plan.clock


def write_plan(trace: Trace, plan: Plan, **extra: Any) -> str:
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
