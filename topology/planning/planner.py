"""The planner: a logical query tree becomes a DAG of stages, one pure operator each.

Every node gets a stable, readable step id — its verb (a window's kind and method) and its
position in a post-order walk of the tree, e.g. ``where#1`` or ``tumbling.aggregate#2``, unless
the query writer named it (``name=``). The planner looks up one function per node type
(:data:`BUILDERS`) that returns a factory of the node's :class:`~operators.processor.Processor`;
operator modules are imported only then, so a tree can be built (and explained) before every
operator exists.

A :class:`Plan` is what both runtimes execute: the inline runtime
(:mod:`topology.running.inline`) in one process, the Ray runtime (:mod:`topology.running.deploy`)
with each stage in its own actor. By default each operator is its own stage; ``fuse=True`` merges
runs of adjacent stateless span operators into one :class:`~operators.chain.Chain` stage, and into
their source's stage when they follow one (a :class:`~operators.chain.SourceChain`: the
source's output then never crosses actors). ``collect()`` on Ray fuses unless told not to.
``group_apply(..., partitions=N)`` becomes N partition stages, fed by key hash, and a
:class:`~operators.union.Union` stage whose CTI is the minimum of theirs.

    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> p = plan(Stream.from_events([Insert(1, 0, 1, 2), Cti(1)]).where(bool).select(str)._node)
    >>> list(p.stages)
    ['from_events#0', 'where#1', 'select#2', 'sink']
    >>> list(plan(Stream.from_events([]).where(bool).select(str)._node, fuse=True).stages)
    ['from_events#0+where#1+select#2', 'sink']
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any, cast

from operators.alter_lifetime import AlterLifetime
from operators.anti_join import AntiJoin
from operators.chain import Chain, FusedChain, SourceChain
from operators.clip_duration import ClipDuration
from operators.full_outer_join import FullOuterJoin
from operators.group_apply import GroupApply
from operators.ingress import ImportCti, LateStream
from operators.join import Join
from operators.left_join import LeftJoin
from operators.processor import Processor
from operators.publish import Publish
from operators.select import Select
from operators.shift import Shift
from operators.sources import EventsSource, Passthrough, RowsSource
from operators.to_points import ToPoints
from operators.udm import field_getter
from operators.union import Union
from operators.where import Where
from operators.windows import make_window
from topology.building import nodes as n
from topology.building.checks import fuse_level
from topology.planning.dag import DagProcessor
from topology.planning.fused import FusedDag
from topology.planning.key_progress import PER_KEY_NOTE, KeyPaths, key_paths
from topology.planning.plan import Factory, MergePartitions, Plan, Sink, Stage
from topology.planning.pruning import pruned_note, pruned_source, source_columns
from topology.planning.routing import OutEdge, Partitioner
from topology.planning.rules import choose


# -- one builder per node type ----------------------------------------------------------------
def _b_where(node: n.Where, step: str) -> Factory:
    return functools.partial(Where, node.pred, name=step)


def _b_select(node: n.Select, step: str) -> Factory:
    return functools.partial(Select, node.fn, name=step)


def _b_alter(node: n.AlterLifetime, step: str) -> Factory:
    return functools.partial(AlterLifetime, start=node.start, duration=node.duration, name=step)


def _b_shift(node: n.Shift, step: str) -> Factory:
    return functools.partial(Shift, node.delta, name=step)


def _b_to_points(node: n.ToPoints, step: str) -> Factory:
    return functools.partial(ToPoints, name=step)


def _b_clip(node: n.ClipDuration, step: str) -> Factory:
    return functools.partial(ClipDuration, node.limit, name=step)


def _b_window(node: n.Window, step: str) -> Factory:
    return functools.partial(make_window, node.spec, node.udm, kind=cast(Any, node.kind),
                             policy=node.policy, name=step, on_error=cast(Any, node.on_error))


def _b_join(node: n.Join, step: str) -> Factory:
    return functools.partial(Join, on=node.on, select=node.select, name=step)


def _b_anti_join(node: n.AntiJoin, step: str) -> Factory:
    return functools.partial(AntiJoin, on=node.on, name=step)


def _b_left_join(node: n.LeftJoin, step: str) -> Factory:
    return functools.partial(LeftJoin, on=node.on, select=node.select, default=node.default,
                             name=step)


def _b_full_outer_join(node: n.FullOuterJoin, step: str) -> Factory:
    return functools.partial(FullOuterJoin, on=node.on, select=node.select, name=step)


def _b_import_ctis(node: n.ImportCti, step: str) -> Factory:
    return functools.partial(ImportCti, policy=node.policy, name=step)


def _b_late(node: n.Late, step: str) -> Factory:
    return functools.partial(LateStream, name=step)


def _with_late_stream(factory: Factory) -> Processor:
    """The producer of a late stream, told to send its late events (as LateOut markers)."""
    proc = factory()
    proc.late_stream = True  # type: ignore[attr-defined]
    return proc


def _b_union(node: n.Union, step: str) -> Factory:
    return functools.partial(Union, len(node.inputs), name=step)


def _b_group_apply(node: n.GroupApply, step: str) -> Factory:
    return functools.partial(GroupApply, node.key, subquery_factory(node.sub, step), name=step)


def _b_scan(node: n.Scan, step: str) -> Factory:
    from operators.scan import Scan, as_stream_operator

    # resolved here, in the driver: a name registered in the driver means nothing to an actor
    return functools.partial(Scan, as_stream_operator(node.step, node.initial, node.tie),
                             name=step)


def _b_distinct(node: n.Distinct, step: str) -> Factory:
    from operators.distinct import Distinct

    return functools.partial(Distinct, node.key, name=step)


def _b_detect(node: n.Detect | n.NotFollowedBy, step: str) -> Factory:
    return functools.partial(node.operator, step)


def _b_from_events(node: n.FromEvents, step: str) -> Factory:
    return functools.partial(EventsSource, step)


def _b_from_rows(node: n.FromRows, step: str) -> Factory:
    opts: dict[str, Any] = {"start": node.start, "end": node.end, "shape": node.shape,
                            "id": node.id}
    if node.advance is not None:
        opts["advance"] = node.advance
    return functools.partial(RowsSource, step, **opts)


def _b_passthrough(node: n.Node, step: str) -> Factory:
    return functools.partial(Passthrough, step)


def _b_sink(node: Sink, step: str) -> Factory:
    return functools.partial(Publish, step)


def _b_merge(node: MergePartitions, step: str) -> Factory:
    # (rescalable partitions mint ids under their own names: distinct, passed through as
    # they are, so an event keeps its id whichever partition holds its key)
    return functools.partial(Union, node.partitions, name=step, tag=not node.groups)


#: The planner's table: node type -> function (node, step id) -> processor factory.
BUILDERS: dict[type[n.Node], Callable[[Any, str], Factory]] = {
    n.FromEvents: _b_from_events, n.FromRows: _b_from_rows, n.Published: _b_passthrough,
    n.GroupInput: _b_passthrough, n.Where: _b_where, n.Select: _b_select,
    n.AlterLifetime: _b_alter, n.Shift: _b_shift, n.ToPoints: _b_to_points,
    n.ClipDuration: _b_clip, n.Window: _b_window, n.Join: _b_join, n.AntiJoin: _b_anti_join,
    n.LeftJoin: _b_left_join, n.Union: _b_union, n.GroupApply: _b_group_apply,
    n.Scan: _b_scan, n.Distinct: _b_distinct,
}
BUILDERS[n.FullOuterJoin] = _b_full_outer_join
BUILDERS[n.ImportCti] = _b_import_ctis
BUILDERS[n.Late] = _b_late
BUILDERS[n.Detect] = _b_detect
BUILDERS[n.NotFollowedBy] = _b_detect
BUILDERS[Sink] = _b_sink
BUILDERS[MergePartitions] = _b_merge


def _physical(node: n.Node, step: str, builder: Callable[[Any, str], Factory],
              per_key: bool = False) -> tuple[Factory, str | None]:
    """``node``'s operator: the first fast path that applies (:mod:`topology.planning.rules`;
    with ``per_key``, one that finalizes each key at its own CTI) and its variant, else its
    general operator (variant None)."""
    chosen = choose(node, step, per_key)
    return (builder(node, step), None) if chosen is None else (chosen.factory, chosen.variant)


def _key_progress(factory: Factory, node: n.Node, keyed: KeyPaths) -> Factory:
    """``factory``, told what it does with per-key CTIs (:mod:`topology.planning.key_progress`):
    a group_apply by the source's key uses them, a per-key source without such a consumer
    sends none."""
    if id(node) in keyed.consumers:
        return functools.partial(_setting, factory, "per_key", True)
    if id(node) in keyed.sources and id(node) not in keyed.producers:
        return functools.partial(_setting, factory, "send_key_ctis", False)
    return factory


def _setting(factory: Factory, name: str, value: Any) -> Processor:
    """``factory()`` with its attribute ``name`` set (on a source, its ingress's)."""
    proc = factory()
    setattr(getattr(proc, "ingress", proc), name, value)
    return proc


def _shown(node: n.Node, variant: str | None, clock: str | None, per_key: bool = False) -> str:
    """The stage's line in ``explain()``: the node (its durations as the query's ``clock``
    shows them), the fast path when one was chosen, and whether it finalizes by the keys'
    own CTIs (:mod:`topology.planning.key_progress`)."""
    return (node.describe(clock) + ("" if variant is None else f" as {variant}")
            + (f" {PER_KEY_NOTE}" if per_key else ""))


# -- the tree walk ------------------------------------------------------------------------------
def assign_steps(root: n.Node) -> dict[int, tuple[n.Node, str]]:
    """Step ids by node identity, in post-order (every node after its inputs)."""
    out: dict[int, tuple[n.Node, str]] = {}
    taken: set[str] = set()

    def walk(node: n.Node) -> None:
        if id(node) in out:
            return
        for i in node.inputs:
            walk(i)
        step = node.name or f"{node.label}#{len(out)}"
        if step in taken or step == "sink":
            raise ValueError(
                f"two steps of the query are named {step!r}; give each step a unique name= "
                f"(step ids name actors and appear in errors and stats)"
            )
        taken.add(step)
        out[id(node)] = (node, step)

    walk(root)
    return out


def tree_clock(root: n.Node) -> str:
    """The clock of the query under ``root`` (:attr:`topology.planning.plan.Plan.clock`, read from
    the logical tree): ``"timestamps"`` when a source's times came from timestamps, else
    ``"ticks"``."""
    from topology.building.reads import walk
    from topology.building.times import TICKS, TIMESTAMPS, source_clock

    sources = (node for node in walk(root) if node.is_source)
    return TIMESTAMPS if any(source_clock(s) == TIMESTAMPS for s in sources) else TICKS


def explain_tree(root: n.Node, steps: dict[int, tuple[n.Node, str]], top: str = "sink",
                 clock: str | None = None) -> str:
    """The logical tree, root first, as an indented outline (shared inputs shown once), its
    durations as ``clock`` shows them (default: the tree's own, :func:`tree_clock`). A
    ``group_apply``'s sub-query hangs under it, inside the line that leads on to its input.
    """
    clock = tree_clock(root) if clock is None else clock
    lines = [top]
    shown: set[int] = set()

    def walk(node: n.Node, prefix: str, last: bool) -> None:
        step = steps[id(node)][1]
        branch = "└── " if last else "├── "
        if id(node) in shown:
            lines.append(f"{prefix}{branch}{step} (shared, see above)")
            return
        shown.add(id(node))
        lines.append(f"{prefix}{branch}{step}  {node.describe(clock)}")
        below = prefix + ("    " if last else "│   ")
        if isinstance(node, n.GroupApply):
            sub = assign_steps(node.sub)
            inner = explain_tree(node.sub, sub, "per group:", clock).splitlines()
            # the line down to the group_apply's input runs past its sub-query
            lines.extend(below + ("│   " if node.inputs else "    ") + line for line in inner)
        for i, child in enumerate(node.inputs):
            walk(child, below, i == len(node.inputs) - 1)

    walk(root, "", True)
    return "\n".join(lines)


#: Whether :func:`plan` prunes columns by default (:mod:`topology.planning.pruning`).
PRUNE_COLUMNS = True


def plan(root: n.Node, *, fuse: bool | str = False, sink: bool = True,
         prune: bool | None = None) -> Plan:
    """Turn the tree under ``root`` into a :class:`Plan`.

    With ``sink=True`` a :class:`~operators.publish.Publish` stage named ``sink`` receives the
    output; otherwise (a ``group_apply`` sub-query) the root's stage is the output. With
    ``prune`` (default :data:`PRUNE_COLUMNS`) a source of batches reads only the columns the
    query reads of it (:mod:`topology.planning.pruning`; ``explain()`` names them).

    >>> from topology import Stream, Count
    >>> s = Stream.from_arrow({"t": [0], "k": [1], "big": ["x"]}, start="t", name="s")
    >>> q = s.group_apply("k", lambda g: g.tumbling_window(10).aggregate(Count()))
    >>> plan(q._node).stages["s"].describe
    "from_rows(rows, start='t', shape='point'), reading only k, t"
    >>> plan(q._node, prune=False).stages["s"].describe
    "from_rows(rows, start='t', shape='point')"
    """
    steps = assign_steps(root)
    clock = tree_clock(root)
    reads = (source_columns(root) if (PRUNE_COLUMNS if prune is None else prune) and sink
             else {})
    stages: dict[str, Stage] = {}
    edges: dict[str, list[OutEdge]] = {}
    sources: list[str] = []
    late_producers = {id(node.inputs[0]) for node, _ in steps.values() if isinstance(node, n.Late)}
    keyed = key_paths(root)
    for node, step in steps.values():
        builder = BUILDERS.get(type(node))
        if builder is None:
            raise TypeError(f"the planner has no builder for {type(node).__name__} ({step})")
        ins = [steps[id(i)][1] for i in node.inputs]
        role = "source" if node.is_source else "operator"
        if isinstance(node, n.GroupApply) and (node.partitions > 1 or node.groups):
            _partitioned(node, step, ins[0], stages, edges, clock, keyed)
            continue
        factory, variant = _physical(node, step, builder, id(node) in keyed.consumers)
        if id(node) in late_producers:
            factory = functools.partial(_with_late_stream, factory)
        factory = _key_progress(factory, node, keyed)
        shown = _shown(node, variant, clock, id(node) in keyed.consumers)
        if isinstance(node, n.FromRows) and id(node) in reads:
            node = pruned_source(node, reads[id(node)])
            shown += pruned_note(node)
        stages[step] = Stage(step, factory, max(1, len(ins)), shown, (node,), role=role,
                             stateless=node.stateless, variant=variant)
        edges[step] = []
        if node.is_source:
            sources.append(step)
        for port, src in enumerate(ins):
            edges[src].append(OutEdge(step, port, late=isinstance(node, n.Late),
                                      key_ctis=keyed.flag(node.inputs[port], node)))
    root_step = steps[id(root)][1]
    out = root_step
    if sink:
        out_node = Sink(inputs=(root,))
        stages["sink"] = Stage("sink", _b_sink(out_node, "sink"), 1, out_node.describe(),
                               (out_node,), role="sink")
        edges["sink"] = []
        edges[root_step].append(OutEdge("sink", 0, key_ctis=keyed.flag(root, out_node)))
        out = "sink"
    p = Plan(stages, edges, sources, out,
             explain_tree(root, steps, "sink" if sink else "out", clock))
    level = fuse_level("plan", fuse)
    return _fuse(p, level) if level else p


def _partitioned(node: n.GroupApply, step: str, src: str, stages: dict[str, Stage],
                 edges: dict[str, list[OutEdge]], clock: str, keyed: KeyPaths) -> None:
    """The partitions of ``group_apply(..., partitions=N)`` (fed by key, or by key group
    with ``key_groups``: their operators are then named after their partition, so their
    fresh ids differ without the merge tagging them: :mod:`operators.key_groups`)."""
    k = node.partitions
    part = Partitioner(field_getter(node.key), k, step, node.groups or None)
    per_key = id(node) in keyed.consumers
    key_ctis = keyed.flag(node.inputs[0], node)
    for p in range(k):
        pstep = f"{step}[{p}]"
        factory, variant = _physical(node, pstep if node.groups else step, _b_group_apply,
                                     per_key)
        factory = _key_progress(factory, node, keyed)
        if node.groups:
            factory = functools.partial(_setting, factory, "named_instances", True)
        stages[pstep] = Stage(pstep, factory, 1,
                              f"{_shown(node, variant, clock, per_key)} "
                              f"partition {p} of {k}{_key_groups(p, k, node.groups)}",
                              (node,),
                              variant=variant)
        edges[pstep] = [OutEdge(step, p)]
        edges[src].append(OutEdge(pstep, 0, part, p, key_ctis=key_ctis))
    merge = MergePartitions(inputs=(node,), partitions=k, groups=node.groups)
    stages[step] = Stage(step, _b_merge(merge, step), k, merge.describe(), (merge,))
    edges[step] = []


def _key_groups(p: int, k: int, groups: int) -> str:
    """The key groups partition ``p`` of ``k`` holds, as ``explain()`` shows them."""
    if not groups:
        return ""
    held = [g for g in range(groups) if g * k // groups == p]
    return f" (key group {held[0]} of {groups})" if len(held) == 1 else \
        f" (key groups {held[0]}-{held[-1]} of {groups})"


def _chain(factories: list[Factory], name: str, source: bool = False) -> Processor:
    """A fused stage's chain: its records are all its steps' (:class:`FusedChain`)."""
    return (SourceChain if source else FusedChain)([f() for f in factories], name=name)


def _sub_chain(factories: list[Factory], name: str) -> Processor:
    """A group_apply's linear sub-query (group_apply takes its records from each step)."""
    return Chain([f() for f in factories], name=name)


def _fuse(p: Plan, level: str = "stateless") -> Plan:
    """Fuse ``p``'s stages at ``level`` (:data:`FUSE_LEVELS`): ``"stateless"`` merges runs of
    stateless single-input operator stages into Chain stages, and into the source stage before
    them (a SourceChain, still the plan's source); ``"chains"`` merges runs of any single-input
    operators the same way (a keyed window, a group_apply, a scan run in their neighbour's
    stage); ``"all"`` also runs each connected part of the plan (its stages linked by edges
    that are not a partitioned group_apply's) as one :class:`FusedDag` stage. The sink stays a
    stage of its own, and so does each partition of a ``group_apply(..., partitions=N)`` (their
    parallelism is what the partitions are for; their merge joins the part after them).

    >>> from topology import Stream, Count
    >>> q = (Stream.from_rows([], start="t").where(bool)
    ...      .tumbling_window(10).aggregate(Count()).select(str))
    >>> list(plan(q._node, fuse=True).stages)
    ['from_rows#0+where#1', 'tumbling.aggregate#2', 'select#3', 'sink']
    >>> list(plan(q._node, fuse="chains").stages)
    ['from_rows#0+where#1+tumbling.aggregate#2+select#3', 'sink']
    >>> j = Stream.from_rows([], start="t", name="l").join(Stream.from_rows([], start="t",
    ...                                                                      name="r"))
    >>> list(plan(j.select(str)._node, fuse="chains").stages)
    ['l', 'r', 'join#2', 'select#3', 'sink']
    >>> list(plan(j.select(str)._node, fuse="all").stages)
    ['l', 'r', 'join#2+select#3', 'sink']
    >>> s = Stream.from_rows([], start="t")
    >>> u = s.where(bool).union(s.select(str)).shift(1)
    >>> list(plan(u._node, fuse="chains").stages)  # a chain starts at one input
    ['from_rows#0', 'where#1', 'select#2', 'union#3', 'shift#4', 'sink']
    >>> st = plan(u._node, fuse="all").stages
    >>> list(st), st["from_rows#0+where#1+select#2+union#3+shift#4"].role
    (['from_rows#0+where#1+select#2+union#3+shift#4', 'sink'], 'source')
    """
    p = _fuse_chains(p, stateful=level != "stateless")
    return _fuse_parts(p) if level == "all" else p


#: The longest id of a fused stage that lists its steps (it names an actor and files).
FUSED_ID_CHARS = 100


def fused_id(steps: list[str]) -> str:
    """The step id of a stage that runs ``steps`` (in plan order): their ids joined by ``+``,
    or, past :data:`FUSED_ID_CHARS`, the first and the last with the count between.

    >>> fused_id(["src", "where#1"])
    'src+where#1'
    >>> fused_id([f"a_long_step_name#{i}" for i in range(9)])
    'a_long_step_name#0+7-more+a_long_step_name#8'
    """
    joined = "+".join(steps)
    if len(joined) <= FUSED_ID_CHARS:
        return joined
    return f"{steps[0]}+{len(steps) - 2}-more+{steps[-1]}"


def _feeders(p: Plan) -> dict[str, list[tuple[str, OutEdge]]]:
    feeders: dict[str, list[tuple[str, OutEdge]]] = {s: [] for s in p.stages}
    for src, es in p.edges.items():
        for e in es:
            feeders[e.dst].append((src, e))
    return feeders


def _fuse_chains(p: Plan, stateful: bool) -> Plan:
    """Merge runs of single-input operator stages (only stateless ones unless ``stateful``)
    into Chain stages, and into the source stage before them (a SourceChain)."""
    feeders = _feeders(p)

    def fusible(step: str) -> bool:
        st = p.stages[step]
        return st.role == "operator" and (st.stateless or stateful) and st.n_inputs == 1

    head_of: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for step in p.stages:
        fed = feeders[step]
        if fusible(step) and len(fed) == 1:
            up, e = fed[0]
            # (an edge that routes: a partition's, a late stream's, one that drops per-key
            # CTIs; a chain passes its steps' whole output on)
            if ((fusible(up) or p.stages[up].role == "source") and len(p.edges[up]) == 1
                    and e.partition is None and not e.late and e.key_ctis is not False):
                head = head_of[up]
                groups[head].append(step)
                head_of[step] = head
                continue
        head_of[step] = step
        groups[step] = [step]
    new_id = {head: fused_id(members) for head, members in groups.items()}
    stages: dict[str, Stage] = {}
    edges: dict[str, list[OutEdge]] = {}
    for head, members in groups.items():
        sid = new_id[head]
        first, last = p.stages[members[0]], members[-1]
        if len(members) == 1:
            stages[sid] = first
        else:
            facs = [p.stages[m].factory for m in members]
            source = first.role == "source"
            stages[sid] = Stage(sid, functools.partial(_chain, facs, sid, source=source), 1,
                                " → ".join(p.stages[m].describe for m in members),
                                tuple(nd for m in members for nd in p.stages[m].nodes),
                                role=first.role,
                                stateless=all(p.stages[m].stateless for m in members),
                                variant=_variants(p.stages[m] for m in members))
        edges[sid] = [dataclasses.replace(e, dst=new_id[e.dst]) for e in p.edges[last]]
    return Plan(stages, edges, [new_id[s] for s in p.sources], new_id[p.sink], p.logical)


def _variants(stages: Iterable[Stage]) -> str | None:
    """The fast paths of a fused stage's steps (None: all general)."""
    return " | ".join(st.variant for st in stages if st.variant) or None


def _without_data(stage: Stage) -> Stage:
    """``stage`` as a fused part's actor holds it: its factory, and of its logical nodes only
    a source's, without its data. The driver or the query's host feeds the data (a Spark
    DataFrame cannot travel), and a node's inputs would carry the whole tree above it, down
    to the sources' data."""
    node = stage.source
    if node is None:
        return dataclasses.replace(stage, nodes=(n.GroupInput(inputs=()),))  # a placeholder
    return dataclasses.replace(stage, nodes=(node.without_data(),))


def _fuse_parts(p: Plan) -> Plan:
    """Run each connected part of ``p`` of two or more stages as one :class:`FusedDag`
    stage: the stages but the sink and a partitioned group_apply's partitions, linked by
    edges. A part takes in a source when the source feeds only that part and nothing
    else feeds it (the part then is a source stage, fed as the source was); a part whose
    output leaves from more than one of its stages (one processor has one output) stays as
    it is."""
    feeders = _feeders(p)
    parent = {s: s for s in p.stages}

    def find(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    # a partition of a group_apply stays a stage of its own: it runs beside the others
    partitions = {e.dst for es in p.edges.values() for e in es if e.partition is not None}
    ops = [s for s, st in p.stages.items() if st.role == "operator" and s not in partitions]
    ops_set = set(ops)
    for s in ops:
        for e in p.edges[s]:
            if e.partition is None and e.dst in ops_set:
                parent[find(e.dst)] = find(s)
    taken: set[str] = set()
    for src in p.sources:
        es = p.edges[src]
        parts = {find(e.dst) for e in es if e.dst in ops_set}
        if (len(parts) != 1 or len(parts) != len({find(e.dst) for e in es})
                or any(e.partition is not None for e in es)):
            continue
        (part,) = parts
        outside = [u for m in ops if find(m) == part for u, _ in feeders[m]
                   if find(u) != part]
        if part not in taken and set(outside) == {src}:
            taken.add(part)
            parent[src] = part
    members: dict[str, list[str]] = {}
    for s in p.stages:
        if s != p.sink and s not in partitions:
            members.setdefault(find(s), []).append(s)
    new_id: dict[str, str] = {s: s for s in p.stages}
    stages: dict[str, Stage] = {}
    edges: dict[str, list[OutEdge]] = {}
    entries: dict[str, list[tuple[str, int]]] = {}
    for steps in members.values():
        inside = set(steps)
        exits = {s for s in steps if any(e.dst not in inside for e in p.edges[s])}
        if len(steps) < 2 or len(exits) != 1:
            continue
        sid = fused_id(steps)
        for s in steps:
            new_id[s] = sid
        source = [s for s in steps if p.stages[s].role == "source"]
        # the part's inputs: its source's feed, else each (step, port) fed from outside
        ins = [(source[0], 0)] if source else list(dict.fromkeys(
            (e.dst, e.port) for s in p.stages if s not in inside for e in p.edges[s]
            if e.dst in inside))
        entries[sid] = ins
        order = source + [s for s in steps if s not in source]
        sub_stages: dict[str, Stage] = {}
        sub_edges: dict[str, list[OutEdge]] = {}
        sub_sources: list[str] = []
        for dst, port in ([] if source else ins):
            entry = f"{dst}@{port}"
            sub_stages[entry] = Stage(entry, functools.partial(Passthrough, entry), 1,
                                      f"input {port} of {dst}", (n.GroupInput(inputs=()),),
                                      role="source")
            sub_edges[entry] = [OutEdge(dst, port)]
            sub_sources.append(entry)
        for s in order:
            sub_stages[s] = _without_data(p.stages[s])
            sub_edges[s] = [e for e in p.edges[s] if e.dst in inside]
        sub = Plan(sub_stages, sub_edges, source or sub_sources, next(iter(exits)))
        stages[sid] = Stage(sid, functools.partial(FusedDag, sub, sid, bool(source)), len(ins),
                            "one process: " + " | ".join(p.stages[s].describe for s in order),
                            tuple(nd for s in order for nd in p.stages[s].nodes),
                            role="source" if source else "operator",
                            variant=_variants(p.stages[s] for s in order))
    # a part takes the place of its last stage (its exit: every other one feeds it), so the
    # plan stays in topological order (the inline runtime finishes the stages in that order)
    last = {new_id[s]: s for s in p.stages}
    out_stages: dict[str, Stage] = {}
    for s, st in p.stages.items():
        sid = new_id[s]
        if sid == s:
            out_stages[s] = st
        elif last[sid] == s:
            out_stages[sid] = stages[sid]
    for s in p.stages:
        sid = new_id[s]
        for e in p.edges[s]:
            if new_id[e.dst] == sid:
                continue  # inside the part
            port = (entries[new_id[e.dst]].index((e.dst, e.port))
                    if new_id[e.dst] != e.dst else e.port)
            edges.setdefault(sid, []).append(dataclasses.replace(e, dst=new_id[e.dst], port=port))
        edges.setdefault(sid, [])
    sources = list(dict.fromkeys(new_id[s] for s in p.sources
                                 if out_stages[new_id[s]].role == "source"))
    return Plan(out_stages, edges, sources, p.sink, p.logical)


# -- group_apply sub-queries --------------------------------------------------------------------
def subquery_factory(sub: n.Node, step: str) -> Factory:
    """A factory of one single-input processor running the sub-query under ``sub`` (whose only
    source is the group's input): a Chain for a linear sub-query, else an in-process DAG."""
    subplan = plan(sub, sink=False)
    for s in subplan.sources:
        if not isinstance(subplan.stages[s].source, n.GroupInput):
            raise ValueError(
                f"{step}: the group_apply sub-query reads another source "
                f"({subplan.stages[s].describe}); a sub-query may only read the group it is "
                f"given (join with other streams outside group_apply)"
            )
    if len(subplan.sources) != 1:
        raise ValueError(f"{step}: the group_apply sub-query must read its group input once")
    ops = [s for s in subplan.stages.values() if s.role == "operator"]
    linear = all(s.n_inputs == 1 and len(subplan.edges[s.step]) <= 1
                 for s in subplan.stages.values())
    if linear and not ops:
        return _b_passthrough(n.GroupInput(inputs=()), step)
    if linear:
        return functools.partial(_sub_chain, [s.factory for s in ops], f"{step}/sub")

    return functools.partial(DagProcessor, subplan, f"{step}/sub")
