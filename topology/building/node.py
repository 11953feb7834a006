"""The base of every logical node (:class:`Node`): what each states of its operator for the
planner, pruning and the debugger, with the safe defaults (docs/architecture.md), and how a
node's arguments read in ``explain()``. The node types are in :mod:`topology.building.nodes` (and
the sources in :mod:`topology.building.source_nodes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from operators.expr import why_per_event
from operators.ticks import TIMESTAMPS, format_duration
from operators.udm import field_getter
from topology.building.checks import check_step_name
from topology.building.reads import Reads


@dataclass(frozen=True, eq=False, kw_only=True)
class Node:
    """A logical operator: its input nodes (port order) and an optional user-given step id."""

    inputs: tuple[Node, ...]
    name: str | None = None

    #: The operator's verb: the readable part of its step id.
    verb: ClassVar[str] = "node"
    #: True for a base class node types share (no step of its own: the joins' ``Keyed2``).
    shared_base: ClassVar[bool] = False
    #: True for span operators that keep no state (the planner may fuse them).
    stateless: ClassVar[bool] = False
    #: True for nodes that take their input from outside the plan.
    is_source: ClassVar[bool] = False
    #: What a trace says the step is (``kind`` in ``plan.json``): the rule by which the
    #: debugger (:mod:`topology.seeing.debug`) finds the inputs that made an output event --
    #: ``"source"``, ``"span"`` (the input event with the same id), ``"window"``, ``"join"``,
    #: ... (a kind it has no rule for: every input overlapping the output). Every node type
    #: declares its own (no default: a test walks :data:`NODE_TYPES`).
    trace_kind: ClassVar[str]
    #: For ``"span"`` nodes: whether the output event keeps its input's lifetime, and whether
    #: the node may drop events (what the debugger needs of a group_apply's sub-query).
    keeps_time: ClassVar[bool] = False
    drops: ClassVar[bool] = False

    def __post_init__(self) -> None:
        # validate where it was written: a step name names an actor, files and stats lines
        check_step_name(self.name, self.label)

    @property
    def label(self) -> str:
        """The readable part of the step id: the verb (a window's kind and verb)."""
        return self.verb

    def describe(self, clock: str | None = None) -> str:
        """One line for :meth:`Stream.explain`: the verb and its arguments, durations in
        units (``1 min``) when the query's ``clock`` is ``"timestamps"``, else in ticks
        (:mod:`topology.building.times`)."""
        return self.verb

    # -- the facts the planner, pruning and the debugger read (docs/architecture.md) ----------
    # Each node type states its own; the defaults are the safe answers (tests/topology/
    # test_node_facts.py holds every type to what its operator can state).
    def lengths(self) -> int | None:
        """The longest lifetime of the step's output when it holds only inserts (``MAX_TIME``:
        any, edges included), or None when it may hold retractions (the default). The keyed
        fast paths (:mod:`topology.planning.rules`) take insert-only input."""
        return None

    def reads(self, out: Reads, port: int) -> Reads:
        """The payload columns the step needs of its input ``port`` when its consumers need
        ``out`` of its output (:mod:`topology.building.reads`); None, every column, by default."""
        return None

    def keys(self) -> tuple[Any, ...] | None:
        """The key function of each input port when the step keys its input (its events
        meet only events of equal keys: a group_apply's groups, a join's ``on``), else None
        (the default)."""
        return None

    def source_data(self) -> Any:
        """What a source consumes in a run in this process (messages, rows or batches); a
        ValueError says why a node has nothing to feed here."""
        raise ValueError(f"{self.describe()} has nothing to feed")

    def without_data(self) -> Node:
        """The node without the data it feeds (a source's rows or messages): what an actor
        that runs it needs, the driver or the host feeding the data. Itself by default."""
        return self

    def trace_info(self) -> dict[str, Any]:
        """What ``plan.json`` says of this node's step: its :attr:`trace_kind` (the
        debugger's cause rule), its type (``node``) and the arguments the debugger reads (a
        window's spec and output policy, a join's payload shape, a group_apply's sub-query);
        node types add theirs."""
        info: dict[str, Any] = {"kind": self.trace_kind, "node": type(self).__name__,
                                "keyed": self.keys() is not None}
        if self.trace_kind == "span":
            info["keeps_time"] = self.keeps_time
            info["drops"] = self.drops
        return info


def trace_chain(nodes: Sequence[Node]) -> dict[str, Any]:
    """What ``plan.json`` says of ``nodes`` run as one processor, in data order (a fused
    stage, a group_apply's linear sub-query): the one node's :meth:`~Node.trace_info`; of
    several, their infos as ``members`` under the kind ``"span"`` when all are spans (an
    output keeps its input's id), ``"source"`` when a source leads them, else ``"chain"``.

    >>> from topology.building.nodes import FromEvents, Shift, Where
    >>> src = FromEvents(inputs=(), messages=())
    >>> w = Where(inputs=(src,), pred=bool)
    >>> trace_chain([w, Shift(inputs=(w,), delta=1)])["kind"]
    'span'
    >>> [m["kind"] for m in trace_chain([src, w])["members"]]
    ['source', 'span']
    """
    members = [node.trace_info() for node in nodes]
    if len(members) == 1:
        return members[0]
    kinds = [m["kind"] for m in members]
    kind = ("span" if all(k == "span" for k in kinds)
            else "source" if kinds[0] == "source" else "chain")
    return {"kind": kind, "members": members}


def fn_text(f: Any) -> str:
    """A user function as ``explain()`` names it (cut to 40 characters)."""
    name = getattr(f, "__name__", None) or repr(f)
    return name if len(name) <= 40 else name[:37] + "..."


def duration_text(ticks: int, clock: str | None) -> str:
    """A duration argument as ``explain()`` shows it: exactly, in units (``1 h 30 min``) when
    the query's times are timestamps; the ticks when its clock is plain integers."""
    return format_duration(ticks) if clock == TIMESTAMPS else str(ticks)


def how_text(f: Any) -> str:
    """How a user function runs on a Columns batch (the rule: operators.expr)."""
    why = why_per_event(field_getter(f))
    return "[column-wise]" if why is None else f"[per event: {why}]"
