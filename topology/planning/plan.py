"""The physical plan both runtimes execute: :class:`Stage` (one operator, what a runtime
instantiates in an actor or inline, with the logical nodes it runs) and :class:`Plan` (the
stages in topological order and their edges), and the two nodes only the planner makes
(:class:`Sink`, :class:`MergePartitions`). :mod:`topology.planning.planner` builds plans from a
logical tree; nothing here runs them. Each stage has a fingerprint (:func:`step_fingerprints`),
which ``explain()`` shows for the whole plan and savepoints match.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from operators.processor import Processor
from topology.building import nodes as n
from topology.planning.code_hash import code_text
from topology.planning.routing import OutEdge

Factory = Callable[[], Processor]


# -- the nodes only the planner makes (a query tree never holds them; Stream builds none) ---------
@dataclass(frozen=True, eq=False, kw_only=True)
class Sink(n.Node):
    """The query's output (step ``sink``), publishing its one input: the planner adds it."""

    verb: ClassVar[str] = "sink"
    trace_kind: ClassVar[str] = "sink"

    def describe(self, clock: str | None = None) -> str:
        return "publish"


@dataclass(frozen=True, eq=False, kw_only=True)
class MergePartitions(n.Node):
    """The merge of a ``group_apply(..., partitions=N)``'s N partition stages (a union whose
    CTI is the minimum of theirs): the planner adds it, with the group_apply as its input."""

    partitions: int
    #: the group_apply's key groups (0: none; its partitions' ids are then tagged here)
    groups: int = 0
    verb: ClassVar[str] = "merge"
    trace_kind: ClassVar[str] = "union"

    def describe(self, clock: str | None = None) -> str:
        return f"merge {self.partitions} partitions"


#: The node types only the planner makes (it has a builder for each, as for
#: :data:`topology.building.nodes.NODE_TYPES`).
PLANNER_NODE_TYPES: tuple[type[n.Node], ...] = (Sink, MergePartitions)


@dataclass(frozen=True)
class Stage:
    """One operator of a plan: what the runtime instantiates (in an actor, or inline), and the
    logical nodes it was planned from (:mod:`topology.building.nodes`), which say what it means: the
    trace's ``plan.json`` (:func:`topology.running.tracing.plan_metadata`) and the debugger read the
    operator's kind and arguments from them, never from the factory."""
    step: str
    factory: Factory
    n_inputs: int
    describe: str
    #: The logical nodes the stage runs, in data order: one, or the several of a fused chain
    #: (stateless span operators, after their source or not). The planner's own stages hold
    #: its own nodes: the output's :class:`Sink`, a partitioned group_apply's
    #: :class:`MergePartitions` (its partitions hold the group_apply).
    nodes: tuple[n.Node, ...]
    role: str = "operator"  # "source", "operator" or "sink"
    stateless: bool = False
    #: The fast path the planner chose (:mod:`topology.planning.rules`), or None: the general
    # operator.
    variant: str | None = None

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError(f"stage {self.step!r}: a stage runs at least one logical node")

    @property
    def node(self) -> n.Node:
        """The node the stage was planned from: its only node, or a fused chain's first (the
        one that makes it a source or an operator); :attr:`nodes` holds them all."""
        return self.nodes[0]

    @property
    def source(self) -> n.Node | None:
        """For sources: the logical source node (FromEvents, FromRows, Published,
        GroupInput); None for other stages."""
        return self.nodes[0] if self.role == "source" else None

    def trace_info(self) -> dict[str, Any]:
        """What a trace says of the stage: its nodes'
        :meth:`~topology.building.nodes.Node.trace_info` (a fused chain's as its members,
        :func:`~topology.building.nodes.trace_chain`)."""
        return n.trace_chain(self.nodes)


@dataclass(frozen=True)
class Plan:
    """Stages in topological order, their out-edges, the input stages and the output stage."""
    stages: dict[str, Stage]
    edges: dict[str, list[OutEdge]]
    sources: list[str]
    sink: str
    logical: str = ""
    #: in-edge counts, filled on first use (a cache: not an argument, not compared)
    _in: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def in_edges(self, step: str) -> int:
        """How many edges feed ``step`` (a source: one, its feed)."""
        if not self._in:
            for edges in self.edges.values():
                for e in edges:
                    self._in[e.dst] = self._in.get(e.dst, 0) + 1
        return self._in.get(step, 0) or (1 if step in self.sources else 0)

    @property
    def clock(self) -> str:
        """The kind of time the plan carries: ``"timestamps"`` when a source's times came from
        timestamps (ticks are µs since the epoch, shown as times), else ``"ticks"``
        (:func:`topology.building.times.source_clock`)."""
        from topology.building.times import TICKS, TIMESTAMPS, source_clock

        clocks = {source_clock(self.stages[s].source) for s in self.sources}
        return TIMESTAMPS if TIMESTAMPS in clocks else TICKS

    def explain(self) -> str:
        """The logical tree and the stages (one actor each on Ray) with their edges; each
        stage is described by its nodes (and the fast path the planner chose for it)."""
        lines = [self.logical, "", f"stages ({len(self.stages)}):"]
        for step, st in self.stages.items():
            outs = ", ".join(
                f"{e.dst}:{e.port}" + (f" [partition {e.index} of {e.partition.n}]"
                                       if e.partition is not None else "")
                for e in self.edges.get(step, ()))
            lines.append(f"  {step:<28} {st.describe}" + (f"  → {outs}" if outs else ""))
        lines.append(f"fingerprint: {plan_fingerprint(self)} (of every stage and its edges; a "
                     f"savepoint restores each step's state into a step with its own "
                     f"fingerprint: `cedar upgrade` shows which)")
        return "\n".join(lines)


# -- fingerprints ----------------------------------------------------------------------------------
# What a savepoint's state belongs to. A stage's *own* fingerprint (:func:`own_fingerprints`)
# hashes what it is -- its nodes' descriptions (a source's without its data, so that more rows of
# the same source keep it; a group_apply's with its per-group query), the code of the user
# functions they hold (topology/planning/code_hash.py), its role, the fast path the planner chose
# (a variant keeps another state), its number of inputs and the shape of its in-edges (port,
# partition) -- and not what feeds it nor its step id, which the planner numbers in plan order (a
# step added upstream renames it: `where#1` becomes `where#2`). A stage's fingerprint
# (:func:`step_fingerprints`) hashes its own and its in-edges: each upstream stage's fingerprint,
# the port and the partition the edge carries. As in a Merkle tree, it changes when anything
# upstream of it changes, and only then. A savepoint (actors/savepoints.py) records both;
# deploy(..., restore=PATH) matches the new plan's steps to the savepoint's by them
# (topology/running/savepoints.py, upgrades.py).

#: Hex digits of a fingerprint as shown (64 bits: no two plans of a user collide).
SHOWN_HEX = 16


def _node(node: n.Node, inner: bool = False) -> str:
    """A node as the fingerprint sees it: its description, a source's without its data
    (``from_rows(3 rows, ...)`` and ``from_rows(5 rows, ...)`` are the same step), the code
    of the user functions it holds (:func:`_functions`), and the nodes it holds (a
    group_apply's per-group query, with its inputs: ``inner``)."""
    if isinstance(node, (n.GroupApply, MergePartitions)) and node.groups:
        node = dataclasses.replace(node, partitions=1)  # rescalable: the width is not it
    text = node.without_data().describe() if node.is_source else node.describe()
    held = [f"{f.name}=[{_node(v, True)}]" for f in dataclasses.fields(node)
            if isinstance(v := getattr(node, f.name), n.Node)]
    ins = [f"({_node(i, True)})" for i in node.inputs] if inner else []
    return " ".join([text, *_functions(node), *held, *ins])


def _functions(node: n.Node) -> list[str]:
    """The code of every user function a node's fields hold (directly, or in a tuple, a list
    or a dict's values), as :func:`~topology.planning.code_hash.code_text` reads it. Of a
    source, only its functions proper (a ``start=`` function), never its data, even
    callable (``Batches``): more rows of the same source are the same step."""
    source = node.without_data() if node.is_source else None
    out = []
    for f in dataclasses.fields(node):
        value = getattr(source or node, f.name)
        values = (list(value.values()) if isinstance(value, dict) else
                  list(value) if isinstance(value, (tuple, list)) else [value])
        out += [f"{f.name}:{code_text(v)}" for v in values
                if callable(v) and not isinstance(v, n.Node) and
                (source is None or isinstance(v, _FUNCTIONS))]
    return out


#: What a source's field holds that is a function, not data.
_FUNCTIONS = (types.FunctionType, types.MethodType, functools.partial)


def _description(st: Stage) -> str:
    """The stage as the fingerprint sees it: its role, fast path, inputs and nodes."""
    nodes = " → ".join(_node(node) for node in st.nodes)
    inputs = "n" if _widthless(st) else st.n_inputs
    return f"{st.role}|{st.variant}|{inputs}|{nodes}"


def _widthless(st: Stage) -> bool:
    """Whether ``st`` merges a rescalable group_apply's partitions (its inputs are as many
    as the partitions, which a savepoint of it does not depend on)."""
    return any(isinstance(x, MergePartitions) and x.groups for x in st.nodes)


def _hash(text: str) -> str:
    # an object's default repr names its address, which another process does not share
    return hashlib.sha256(re.sub(r" at 0x[0-9a-fA-F]+", "", text).encode()).hexdigest()[
        :SHOWN_HEX]


def own_fingerprints(plan: Plan) -> dict[str, str]:
    """Each step's own fingerprint (see "fingerprints" above): what the step is, and the
    shape of its in-edges (port, partition: a group_apply's partition 1 of 2 is not its
    partition 0), not what feeds it nor its step id, in plan order.

    >>> from topology import Stream
    >>> src = Stream.from_rows([{"t": 1}], start="t")
    >>> own = own_fingerprints(src.where(lambda r: r["t"] > 0).where(bool).plan())
    >>> own["where#2"] == own_fingerprints(src.where(bool).plan())["where#1"]
    True
    """
    widthless = {step for step, st in plan.stages.items() if _widthless(st)}
    edges: dict[str, list[str]] = {step: [] for step in plan.stages}
    for out in plan.edges.values():
        for e in out:
            edges[e.dst].append(_edge(e, e.dst in widthless))
    return {step: _hash("\n".join([_description(st), *(
                sorted(set(edges[step])) if step in widthless else sorted(edges[step]))]))
            for step, st in plan.stages.items()}


def _edge(e: OutEdge, widthless: bool = False) -> str:
    """An in-edge as the fingerprints see it: its port and partition, but neither into a
    rescalable group_apply's partitions (all alike: each holds some of its key groups) or
    out of them into their merge (``widthless``), so that its fingerprints are the same at
    any ``partitions``."""
    if e.partition is not None and e.partition.groups:
        return f"kg:{e.partition.groups}"
    part = "" if e.partition is None else f"{e.index}/{e.partition.n}"
    return f"{'*' if widthless else e.port}:{part}:{'late' if e.late else ''}"


def step_fingerprints(plan: Plan) -> dict[str, str]:
    """Each step's fingerprint (see "fingerprints" above): its own and its upstream's, in
    plan order.

    >>> from topology import Stream
    >>> more = Stream.from_rows([{"t": 1}, {"t": 2}], start="t").where(bool).plan()
    >>> step_fingerprints(Stream.from_rows([{"t": 1}], start="t").where(bool).plan()) == \\
    ...     step_fingerprints(more)  # the same query over more rows
    True
    """
    own = own_fingerprints(plan)
    widthless = {step for step, st in plan.stages.items() if _widthless(st)}
    inputs: dict[str, list[str]] = {step: [] for step in plan.stages}
    out: dict[str, str] = {}
    for step in plan.stages:  # topological order: upstream stages come first
        ins = sorted(set(inputs[step])) if step in widthless else sorted(inputs[step])
        out[step] = _hash("\n".join([own[step], *ins]))
        for e in plan.edges.get(step, ()):
            inputs[e.dst].append(f"{out[step]}:{_edge(e, e.dst in widthless)}")
    return out


def source_fingerprints(plan: Plan) -> dict[str, str]:
    """The fingerprint of the source alone of each source stage whose other steps (fused
    into it: ``fuse=True``) hold no state: a savepoint of it restores into a stage of the
    same source whatever stateless steps are fused after it (:mod:`topology.running.upgrades`).
    """
    return {step: _hash(f"source|{_node(st.nodes[0])}") for step, st in plan.stages.items()
            if st.role == "source" and all(x.stateless for x in st.nodes[1:])}


def plan_fingerprint(plan: Plan) -> str:
    """The plan's fingerprint: a hash of every step's."""
    return _hash("\n".join(f"{s}={f}" for s, f in step_fingerprints(plan).items()))
